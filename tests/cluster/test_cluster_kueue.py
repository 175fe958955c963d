"""adl with Kueue on the real control plane: Kueue built from its module (``versions.env``),
installed from its own chart, its manager running with its webhooks (``kueue_install``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chart_install import Installation
from cluster_jobs import bound_claim, job_manifest
from controlplane import ControlPlane
from kubernetes import client
from kueue_install import Kueue
from operator_process import OperatorProcess
from static_node import StaticNodes

from adl.operator.crd import GROUP, PLURAL, VERSION
from adl.operator.kueue import QUEUE_LABEL
from adl.operator.kueue_slices import ANNOTATION_SLICE as SLICE
from tests.waiting import wait_for

KUEUE = ("kueue.x-k8s.io", "v1beta2")


def kueue_object(kind: str, name: str, spec: dict[str, Any], namespace: str | None = None) -> Any:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "/".join(KUEUE), "kind": kind, "metadata": meta, "spec": spec}


def create_queues(
    api: client.ApiClient,
    namespace: str,
    name: str,
    gpus: int,
    cohort: str | None = None,
    preemption: bool = False,
    flavors: dict[str, int] | None = None,
) -> None:
    """A ClusterQueue ``name`` with a nominal quota of ``gpus`` GPUs (and ample CPU and memory)
    on one ResourceFlavor, and a LocalQueue of the same name in ``namespace``. ``flavors``
    (flavor -> GPUs, made by the caller; tried by Kueue in this order) instead of the one."""
    custom = client.CustomObjectsApi(api)
    if flavors is None:
        flavors = {"default-flavor": gpus}
        flavor = kueue_object("ResourceFlavor", "default-flavor", {})
        try:
            custom.create_cluster_custom_object(*KUEUE, "resourceflavors", flavor)
        except client.exceptions.ApiException as exc:
            if exc.status != 409:
                raise
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                "flavors": [
                    {
                        "name": flavor_name,
                        "resources": [
                            {"name": "cpu", "nominalQuota": "64"},
                            {"name": "memory", "nominalQuota": "256Gi"},
                            {"name": "nvidia.com/gpu", "nominalQuota": str(quota)},
                        ],
                    }
                    for flavor_name, quota in flavors.items()
                ],
            }
        ],
    }
    if cohort:
        spec["cohortName"] = cohort
    if preemption:  # a higher-priority workload may evict lower ones of this queue, and a
        # queue takes back the quota another of its cohort borrowed
        spec["preemption"] = {
            "withinClusterQueue": "LowerPriority",
            "reclaimWithinCohort": "Any",
        }
    custom.create_cluster_custom_object(
        *KUEUE, "clusterqueues", kueue_object("ClusterQueue", name, spec)
    )
    local = kueue_object("LocalQueue", name, {"clusterQueue": name}, namespace)
    custom.create_namespaced_custom_object(*KUEUE, namespace, "localqueues", local)


def adl_workload(api: client.ApiClient, namespace: str) -> dict[str, Any] | None:
    """The Workload of the namespace's AdaptiveJob (tests run one) that counts: of its slices
    (a second one asks to grow it), the admitted one, else the first unfinished one."""
    items = client.CustomObjectsApi(api).list_namespaced_custom_object(
        *KUEUE, namespace, "workloads"
    )["items"]
    ours = [w for w in items if w["metadata"]["name"].startswith("adaptivejob-")]

    def holds(wl: dict[str, Any], kind: str) -> bool:
        conds = (wl.get("status") or {}).get("conditions") or []
        return any(c["type"] == kind and c["status"] == "True" for c in conds)

    live = [w for w in ours if not holds(w, "Finished")]
    admitted = [w for w in live if holds(w, "Admitted")]
    return next(iter(admitted or live or ours), None)


def admitted_count(api: client.ApiClient, namespace: str) -> int:
    """Replicas Kueue admitted the AdaptiveJob for, as the API server holds it (0: none)."""
    wl = adl_workload(api, namespace) or {}
    conds = {c["type"]: c["status"] for c in (wl.get("status") or {}).get("conditions") or []}
    if conds.get("Admitted") != "True":
        return 0
    return int(wl["status"]["admission"]["podSetAssignments"][0]["count"])


def gpus_within_admission(api: client.ApiClient, namespace: str, job: str) -> int:
    """GPUs the job's live pods request, asserted never above Kueue's admission; pods that
    kube-scheduler bound and no kubelet confirms deleting are removed as a kubelet would."""
    core = client.CoreV1Api(api)
    gpus = 0
    for pod in core.list_namespaced_pod(namespace, label_selector=f"adl.dev/job={job}").items:
        if pod.metadata.deletion_timestamp:
            core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
            continue
        for c in pod.spec.containers:
            gpus += int((c.resources.requests or {}).get("nvidia.com/gpu", 0))
    ceiling = admitted_count(api, namespace)
    assert gpus <= ceiling, f"{gpus} GPUs requested, {ceiling} admitted"
    return gpus


def batch_job(name: str, queue: str, gpus: int) -> client.V1Job:
    container = client.V1Container(
        name="main",
        image="busybox",
        command=["sleep", "3600"],
        resources=client.V1ResourceRequirements(
            requests={"cpu": "100m", "nvidia.com/gpu": str(gpus)},
            limits={"nvidia.com/gpu": str(gpus)},
        ),
    )
    return client.V1Job(
        metadata=client.V1ObjectMeta(name=name, labels={"kueue.x-k8s.io/queue-name": queue}),
        spec=client.V1JobSpec(
            suspend=True,
            template=client.V1PodTemplateSpec(
                spec=client.V1PodSpec(restart_policy="Never", containers=[container])
            ),
        ),
    )


def remove_job(api: client.ApiClient, namespace: str, name: str) -> None:
    """Delete a plain Job and its pods at once (no kubelet here confirms a graceful delete:
    their GPUs would stay taken on the node)."""
    core = client.CoreV1Api(api)
    client.BatchV1Api(api).delete_namespaced_job(name, namespace, propagation_policy="Background")
    for pod in core.list_namespaced_pod(namespace, label_selector=f"job-name={name}").items:
        core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)


def test_kueue_admits_batch_jobs_within_their_queues_quota(
    kueue: Kueue, admin_api: client.ApiClient, namespace: str
) -> None:
    """The harness itself: Kueue's webhooks answer (the Job is defaulted and validated by
    them), its Workloads are made, and the quota holds: of two 3-GPU Jobs in a 4-GPU queue, one
    is admitted (unsuspended) and the other waits."""
    batch = client.BatchV1Api(admin_api)
    custom = client.CustomObjectsApi(admin_api)
    queue = f"q-{namespace}"[:63]
    create_queues(admin_api, namespace, queue, gpus=4)
    for name in ("first", "second"):
        batch.create_namespaced_job(namespace, batch_job(name, queue, gpus=3))

    def workloads() -> list[dict[str, Any]]:
        return list(custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads")["items"])

    def admitted(wl: dict[str, Any]) -> bool:
        conds = (wl.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Admitted" and c["status"] == "True" for c in conds)

    wait_for(
        lambda: len(workloads()) == 2 and sum(admitted(w) for w in workloads()) == 1,
        timeout=60,
        what="one of two 3-GPU Workloads admitted in a 4-GPU queue",
        details=lambda: kueue.tail(),
    )
    running = [
        j.metadata.name for j in batch.list_namespaced_job(namespace).items if not j.spec.suspend
    ]
    assert len(running) == 1, running


def test_an_adaptive_job_runs_within_what_kueue_admitted_and_is_requeued_when_evicted(
    kueue: Kueue,
    admin_api: client.ApiClient,
    namespace: str,
    install_chart: Callable[..., Installation],
    start_operator: Callable[..., OperatorProcess],
) -> None:
    """An AdaptiveJob in a queue (1 to 4 one-GPU replicas) on an 8-GPU node, under a 4-GPU
    quota of which a plain Job holds 3: it waits for admission with Kueue's reason, is admitted
    for 1 replica (partial admission) and runs exactly 1 although 8 GPUs are free to adl. A
    higher-priority Job of 4 GPUs makes Kueue evict it: adl stops its pods and gives the quota
    back (Kueue then admits the other Job). Once that Job is gone Kueue admits it again, for
    all 4 replicas, and adl runs 4. Throughout, the adl job's pods never request more GPUs than
    its Workload's admission allows, as read from the API server on every poll."""
    core = client.CoreV1Api(admin_api)
    batch = client.BatchV1Api(admin_api)
    custom = client.CustomObjectsApi(admin_api)
    queue = f"q-{namespace}"[:63]
    create_queues(admin_api, namespace, queue, gpus=4, preemption=True)
    high = f"high-{namespace}"[:63]
    custom.create_cluster_custom_object(
        *KUEUE,
        "workloadpriorityclasses",
        {
            "apiVersion": "/".join(KUEUE),
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": high},
            "value": 1000,
        },
    )
    installation = install_chart({"scheduler": {"interval": 2}, "kueue": {"enabled": True}})
    operator = start_operator(installation).wait_ready()
    claim = bound_claim(admin_api, namespace, "ckpt")
    node = f"gpu-{namespace}"[:63]

    def workload() -> dict[str, Any] | None:
        return adl_workload(admin_api, namespace)

    def replicas() -> int:
        return gpus_within_admission(admin_api, namespace, "elastic")

    def job_status() -> dict[str, Any]:
        body = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "elastic")
        return dict(body.get("status") or {})

    with StaticNodes(admin_api, {node: 8}):
        batch.create_namespaced_job(namespace, batch_job("holder", queue, gpus=3))
        wait_for(
            lambda: not batch.read_namespaced_job("holder", namespace).spec.suspend,
            timeout=60,
            what="the plain Job admitted",
            details=kueue.tail,
        )
        elastic = job_manifest("elastic", minReplicas=1, maxReplicas=4)
        elastic["metadata"]["labels"] = {QUEUE_LABEL: queue}
        elastic["spec"]["checkpoint"] = {"claimName": claim}
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, elastic)
        wl = wait_for(workload, timeout=60, what="the job's Workload", details=operator.tail)
        (pod_set,) = wl["spec"]["podSets"]
        assert (pod_set["count"], pod_set["minCount"]) == (4, 1)
        assert wl["metadata"]["ownerReferences"][0]["name"] == "elastic"

        wait_for(
            lambda: replicas() == 1 and admitted_count(admin_api, namespace) == 1,
            timeout=90,
            what="1 replica, as admitted",
            details=lambda: f"{job_status()}\n{operator.tail()}",
        )
        assert len(job_status()["allocation"]) == 1  # 8 GPUs free, 1 admitted
        # the status says what Kueue admitted (adl ls / describe show it beside the queue)
        wait_for(lambda: job_status().get("admitted") == 1, timeout=30, what="status.admitted 1")

        # a higher-priority Job needing the whole quota: Kueue evicts the adl job
        remove_job(admin_api, namespace, "holder")
        urgent = batch_job("urgent", queue, gpus=4)
        urgent.metadata.labels["kueue.x-k8s.io/priority-class"] = high
        batch.create_namespaced_job(namespace, urgent)
        wait_for(
            lambda: (
                replicas() == 0  # first: it removes the pods no kubelet confirms deleting
                and not batch.read_namespaced_job("urgent", namespace).spec.suspend
            ),
            timeout=120,
            what="the adl job evicted and stopped, its quota given to the urgent Job",
            details=lambda: f"{job_status()}\n{workload()}\n{operator.tail()}\n{kueue.tail()}",
        )
        said = wait_for(
            lambda: st if (st := job_status()).get("admitted") == 0 else None,
            timeout=30,
            what="status.admitted 0 once evicted",
        )
        assert said.get("reason") == "WaitingForAdmission", said
        assert "evicted by Kueue" in said.get("message", "") or queue in said.get("message", "")

        remove_job(admin_api, namespace, "urgent")
        wait_for(
            lambda: replicas() == 4,
            timeout=120,
            what="the adl job admitted again for 4 replicas and running them",
            details=lambda: f"{job_status()}\n{workload()}\n{operator.tail()}",
        )
        wait_for(lambda: job_status().get("admitted") == 4, timeout=30, what="status.admitted 4")
    core.delete_persistent_volume(f"{namespace}-ckpt"[:63])
    custom.delete_cluster_custom_object(*KUEUE, "workloadpriorityclasses", high)


def test_a_job_borrows_idle_quota_and_gives_it_back_when_its_lender_needs_it(
    kueue: Kueue,
    admin_api: client.ApiClient,
    namespace: str,
    install_chart: Callable[..., Installation],
    start_operator: Callable[..., OperatorProcess],
) -> None:
    """Two teams' queues of 4 GPUs each in one cohort. Team B's job (1 to 8 replicas) borrows
    team A's idle quota: Kueue admits it for 8, and adl runs it on 4 (its own ramp: a job that
    has measured nothing starts on at most one node's worth). Team A submits a 4-GPU Job: Kueue
    reclaims its quota by evicting B's Workload, adl stops the job (a preemption) and gives the
    quota back, A's Job is admitted, and B's job is admitted again within B's own quota (4) and
    runs 4. The pods of B's job never request more GPUs than its Workload's admission, at every
    poll."""
    core = client.CoreV1Api(admin_api)
    batch = client.BatchV1Api(admin_api)
    custom = client.CustomObjectsApi(admin_api)
    cohort = f"c-{namespace}"[:63]
    team_a, team_b = f"a-{namespace}"[:63], f"b-{namespace}"[:63]
    create_queues(admin_api, namespace, team_a, gpus=4, cohort=cohort, preemption=True)
    create_queues(admin_api, namespace, team_b, gpus=4, cohort=cohort, preemption=True)
    installation = install_chart({"scheduler": {"interval": 2}, "kueue": {"enabled": True}})
    operator = start_operator(installation).wait_ready()
    claim = bound_claim(admin_api, namespace, "ckpt")

    def replicas() -> int:
        return gpus_within_admission(admin_api, namespace, "borrower")

    def status() -> dict[str, Any]:
        body = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "borrower")
        return dict(body.get("status") or {})

    with StaticNodes(admin_api, {f"gpu-{namespace}"[:63]: 8}):
        job = job_manifest("borrower", minReplicas=1, maxReplicas=8)
        job["metadata"]["labels"] = {QUEUE_LABEL: team_b}
        job["spec"]["checkpoint"] = {"claimName": claim}
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, job)
        wait_for(
            lambda: replicas() == 4 and admitted_count(admin_api, namespace) == 8,
            timeout=90,
            what="team B's job admitted for 8 (4 borrowed), running 4",
            details=lambda: f"{status()}\n{operator.tail()}",
        )
        batch.create_namespaced_job(namespace, batch_job("lender", team_a, gpus=4))
        wait_for(
            lambda: (
                replicas() == 4 and not batch.read_namespaced_job("lender", namespace).spec.suspend
            ),
            timeout=150,
            what="team A's Job admitted, team B's job back within its own 4",
            details=lambda: f"{status()}\n{operator.tail()}\n{kueue.tail()}",
        )
        assert admitted_count(admin_api, namespace) == 4
        restarts = status().get("restarts") or {}
        assert restarts.get("preemption", 0) >= 1, status()  # stopped through a checkpoint
    core.delete_persistent_volume(f"{namespace}-ckpt"[:63])


def test_an_adaptive_job_runs_only_on_the_nodes_of_its_admitted_flavor(
    kueue: Kueue,
    admin_api: client.ApiClient,
    namespace: str,
    install_chart: Callable[..., Installation],
    start_operator: Callable[..., OperatorProcess],
) -> None:
    """Two node pools as two ResourceFlavors: node A (8 GPUs, label pool=a) and node B (4 GPUs,
    label pool=b, tainted pool=b:NoSchedule as a dedicated pool is). The queue tries flavor A
    first, but only flavor B has GPU quota (4), so Kueue admits the job (1 to 4 replicas) on
    flavor B. adl runs all its replicas on node B, although node A's 8 GPUs are free and would
    hold them on one node, and its pods carry flavor B's node labels as a nodeSelector and its
    toleration, as Kueue's own integrations do."""
    core = client.CoreV1Api(admin_api)
    custom = client.CustomObjectsApi(admin_api)
    node_a, node_b = f"a-{namespace}"[:63], f"b-{namespace}"[:63]
    pool = f"p-{namespace}"[:63]  # the pool label's value on node B, unique to this test
    taint = {"key": "adl-test/pool", "value": pool, "effect": "NoSchedule"}
    toleration = {**taint, "operator": "Equal"}
    flavor_a, flavor_b = f"fa-{namespace}"[:63], f"fb-{namespace}"[:63]
    custom.create_cluster_custom_object(
        *KUEUE,
        "resourceflavors",
        kueue_object("ResourceFlavor", flavor_a, {"nodeLabels": {"adl-test/pool": "a"}}),
    )
    custom.create_cluster_custom_object(
        *KUEUE,
        "resourceflavors",
        kueue_object(
            "ResourceFlavor",
            flavor_b,
            {"nodeLabels": {"adl-test/pool": pool}, "tolerations": [toleration]},
        ),
    )
    queue = f"q-{namespace}"[:63]
    create_queues(admin_api, namespace, queue, gpus=4, flavors={flavor_a: 0, flavor_b: 4})
    installation = install_chart({"scheduler": {"interval": 2}, "kueue": {"enabled": True}})
    operator = start_operator(installation).wait_ready()
    claim = bound_claim(admin_api, namespace, "ckpt")

    def pods() -> list[Any]:
        items = core.list_namespaced_pod(namespace, label_selector="adl.dev/job=pooled").items
        return [p for p in items if not p.metadata.deletion_timestamp]

    def placed() -> dict[str, int]:
        """GPUs of the job's pods per node adl pinned them to (never above the admission)."""
        gpus_within_admission(admin_api, namespace, "pooled")
        out: dict[str, int] = {}
        for pod in pods():
            term = pod.spec.affinity.node_affinity
            node = (
                term.required_during_scheduling_ignored_during_execution.node_selector_terms[0]
                .match_fields[0]
                .values[0]
            )
            gpus = int(pod.spec.containers[0].resources.requests["nvidia.com/gpu"])
            out[node] = out.get(node, 0) + gpus
        return out

    def status() -> dict[str, Any]:
        body = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "pooled")
        return dict(body.get("status") or {})

    with StaticNodes(admin_api, {node_a: 8, node_b: 4}):
        core.patch_node(node_a, {"metadata": {"labels": {"adl-test/pool": "a"}}})
        core.patch_node(
            node_b, {"metadata": {"labels": {"adl-test/pool": pool}}, "spec": {"taints": [taint]}}
        )
        job = job_manifest("pooled", minReplicas=1, maxReplicas=4)
        job["metadata"]["labels"] = {QUEUE_LABEL: queue}
        job["spec"]["checkpoint"] = {"claimName": claim}
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, job)
        wait_for(
            lambda: sum(placed().values()) == 4,
            timeout=90,
            what="the job admitted on flavor B and running its 4 replicas",
            details=lambda: f"{status()}\n{adl_workload(admin_api, namespace)}\n{operator.tail()}",
        )
        assert placed() == {node_b: 4}, placed()
        wl = adl_workload(admin_api, namespace) or {}
        assignment = wl["status"]["admission"]["podSetAssignments"][0]
        assert assignment["flavors"]["nvidia.com/gpu"] == flavor_b
        for pod in pods():
            assert pod.spec.node_selector == {"adl-test/pool": pool}
            tolerations = [t.to_dict() for t in pod.spec.tolerations or []]
            assert any(
                (t["key"], t["operator"], t["value"], t["effect"])
                == (taint["key"], "Equal", pool, "NoSchedule")
                for t in tolerations
            ), tolerations
        # kube-scheduler binds them there too: the node B the pods select and tolerate
        wait_for(
            lambda: {p.spec.node_name for p in pods()} == {node_b},
            timeout=60,
            what="the pods bound to node B",
            details=lambda: str([(p.metadata.name, p.spec.node_name) for p in pods()]),
        )
    core.delete_persistent_volume(f"{namespace}-ckpt"[:63])


def reported_model(sync_s: float) -> dict[str, Any]:
    """A throughput model as a job reports it (``status.hints``), measured on 4 replicas:
    ``sync_s`` seconds per gradient sync, per replica beyond two too (small: it scales well)."""
    return {
        "initBatchSize": 64,
        "maxBatchSize": 4096,
        "localBszBounds": [32, 256],
        "perfParams": {
            "alphaC": 0.05,
            "betaC": 0.002,
            "alphaN": sync_s,
            "betaN": sync_s / 2,
            "alphaR": sync_s,
            "betaR": sync_s / 2,
            "gamma": 1.0,
        },
        "gradParams": {"sqr": 1.0, "var": 1000.0},
        "maxProfiledReplicas": 4,
    }


def team_gpus_within_admissions(
    api: client.ApiClient, namespace: str, teams: dict[str, list[str]]
) -> dict[str, int]:
    """GPUs the live pods of each team's jobs request (``teams``: queue -> its jobs), asserted
    never above the GPUs Kueue admitted the team's Workloads (their admissions'
    ``resourceUsage``), both read from the API server."""
    core = client.CoreV1Api(api)
    held: dict[str, int] = {}
    pods = core.list_namespaced_pod(namespace, label_selector="adl.dev/job").items
    for queue, jobs in teams.items():
        held[queue] = 0
        for pod in pods:
            if pod.metadata.labels["adl.dev/job"] not in jobs:
                continue
            if pod.metadata.deletion_timestamp:  # no kubelet confirms a graceful delete
                core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
                continue
            for c in pod.spec.containers:
                held[queue] += int((c.resources.requests or {}).get("nvidia.com/gpu", 0))
    workloads = client.CustomObjectsApi(api).list_namespaced_custom_object(
        *KUEUE, namespace, "workloads"
    )["items"]
    for queue, gpus in held.items():
        admitted = 0
        for wl in workloads:
            conds = {c["type"]: c["status"] for c in (wl.get("status") or {}).get("conditions", [])}
            if wl["spec"]["queueName"] != queue or conds.get("Admitted") != "True":
                continue
            for assignment in wl["status"]["admission"]["podSetAssignments"]:
                admitted += int((assignment.get("resourceUsage") or {}).get("nvidia.com/gpu", 0))
        assert gpus <= admitted, f"team {queue}: {gpus} GPUs held, {admitted} admitted"
    return held


def test_two_teams_hold_no_more_than_kueue_admitted_and_adl_shares_a_teams_gpus_by_goodput(
    kueue: Kueue,
    control_plane: ControlPlane,
    admin_api: client.ApiClient,
    namespace: str,
    install_chart: Callable[..., Installation],
    start_operator: Callable[..., OperatorProcess],
) -> None:
    """Two teams' ClusterQueues in one cohort: A with 8 GPUs of nominal quota, B with 4, on
    one 8-GPU node. Team A runs two jobs of 1 to 4 replicas, one that scales well and one
    whose gradient syncs dominate (their reported models), B one job of 1 to 4: Kueue admits
    all three for 4 replicas (12 GPUs admitted, 8 on the node). Within what Kueue admitted adl
    shares the node by goodput: the well-scaling job of team A gets more than the other,
    which runs fewer than its 4 admitted. At every poll, each team's pods request no more GPUs
    than its Workloads' admissions, both read from the API server. A second job of team B
    waits, and says why with its queue's use of its quota. No call of the operator to Kueue's
    objects is refused by the chart's RBAC (the audit log)."""
    custom = client.CustomObjectsApi(admin_api)
    cohort = f"c-{namespace}"[:63]
    team_a, team_b = f"a-{namespace}"[:63], f"b-{namespace}"[:63]
    create_queues(admin_api, namespace, team_a, gpus=8, cohort=cohort)
    create_queues(admin_api, namespace, team_b, gpus=4, cohort=cohort)
    installation = install_chart({"scheduler": {"interval": 2}, "kueue": {"enabled": True}})
    operator = start_operator(installation).wait_ready()
    claim = bound_claim(admin_api, namespace, "ckpt")
    teams = {team_a: ["fast", "slow"], team_b: ["other", "waiter"]}

    def status(name: str) -> dict[str, Any]:
        body = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        return dict(body.get("status") or {})

    def submit(name: str, queue: str, suspend: bool) -> None:
        job = job_manifest(name, minReplicas=1, maxReplicas=4, suspend=suspend)
        job["metadata"]["labels"] = {QUEUE_LABEL: queue}
        job["spec"]["checkpoint"] = {"claimName": claim}
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, job)

    def held() -> dict[str, int]:
        """GPUs per job, checked per team against Kueue's admissions first."""
        team_gpus_within_admissions(admin_api, namespace, teams)
        return {name: len(status(name).get("allocation") or []) for name in ("fast", "slow")}

    with StaticNodes(admin_api, {f"gpu-{namespace}"[:63]: 8}):
        # suspended until their models are in their status: the first round already sees them
        for name, queue in (("fast", team_a), ("slow", team_a), ("other", team_b)):
            submit(name, queue, suspend=True)
        for name, sync_s in (("fast", 0.001), ("slow", 2.0)):
            custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
                {"status": {"hints": reported_model(sync_s)}},
            )
        for name in ("fast", "slow", "other"):
            custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, {"spec": {"suspend": False}}
            )
        wait_for(
            lambda: all(status(n).get("admitted") == 4 for n in ("fast", "slow", "other")),
            timeout=90,
            what="all three jobs admitted for 4 replicas",
            details=lambda: f"{[status(n) for n in ('fast', 'slow')]}\n{operator.tail()}",
        )
        shares = wait_for(
            lambda: s if (s := held())["fast"] > s["slow"] >= 1 else None,
            timeout=90,
            what="team A's well-scaling job given more GPUs than its other one",
            details=lambda: f"{held()}\n{operator.tail()}",
        )
        assert shares["slow"] < 4, shares  # adl's choice: Kueue admitted it 4
        assert team_gpus_within_admissions(admin_api, namespace, teams)[team_a] <= 8

        submit("waiter", team_b, suspend=False)
        why = f"waiting for admission in queue {team_b}: 4 GPUs of 4 in use"
        said = wait_for(
            lambda: st if (st := status("waiter")).get("message") == why else None,
            timeout=60,
            what="the second job of team B waiting, with its queue's usage",
            details=lambda: (
                f"{status('waiter')}\n"
                f"{custom.get_cluster_custom_object(*KUEUE, 'clusterqueues', team_b)}\n"
                f"{operator.tail()}"
            ),
        )
        assert said["reason"] == "WaitingForAdmission", said
        # the shares held over the rounds that ran meanwhile, within the admissions
        assert held()["fast"] > held()["slow"]
    refused = sorted(
        {
            f"{e['verb']} {e['objectRef'].get('resource')}"
            for e in control_plane.audit_events(installation.username)
            if (e.get("annotations") or {}).get("authorization.k8s.io/decision") == "forbid"
        }
    )
    assert refused == [], f"the authorizer refused the operator: {refused}"
    client.CoreV1Api(admin_api).delete_persistent_volume(f"{namespace}-ckpt"[:63])


def test_a_partially_admitted_job_grows_once_the_other_teams_job_finishes(
    kueue: Kueue,
    admin_api: client.ApiClient,
    namespace: str,
    install_chart: Callable[..., Installation],
    start_operator: Callable[..., OperatorProcess],
) -> None:
    """Two teams' queues of 4 GPUs each in one cohort, one 8-GPU node. Team B's plain Job of 7
    GPUs borrows 3 of team A's quota; team A's job (1 to 4 replicas) is partially admitted for
    the 1 left. The job asks again with a replacement Workload (a Kueue Workload slice, for 4),
    which waits until B's Job finishes: Kueue then admits it and finishes the first, and adl runs
    the job on 4, through one resize, without ever stopping it for want of an admission. Its
    pods never request more GPUs than the admission of its current Workload."""
    core = client.CoreV1Api(admin_api)
    batch = client.BatchV1Api(admin_api)
    custom = client.CustomObjectsApi(admin_api)
    cohort = f"c-{namespace}"[:63]
    team_a, team_b = f"a-{namespace}"[:63], f"b-{namespace}"[:63]
    create_queues(admin_api, namespace, team_a, gpus=4, cohort=cohort)
    create_queues(admin_api, namespace, team_b, gpus=4, cohort=cohort)
    installation = install_chart({"scheduler": {"interval": 2}, "kueue": {"enabled": True}})
    operator = start_operator(installation).wait_ready()
    claim = bound_claim(admin_api, namespace, "ckpt")

    def workloads() -> list[dict[str, Any]]:
        items = custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads")["items"]
        return [w for w in items if w["metadata"]["name"].startswith("adaptivejob-")]

    def admitted_now() -> int:
        """The admission of the job's admitted, unfinished Workload (Kueue admits one slice
        at a time; 0: none)."""
        counts, replaced, pending = [], [], 0
        for wl in workloads():
            conds = {c["type"]: c for c in (wl.get("status") or {}).get("conditions", [])}
            status_of = {kind: c["status"] for kind, c in conds.items()}
            finished = status_of.get("Finished") == "True"
            if status_of.get("Admitted") == "True":
                count = int(wl["status"]["admission"]["podSetAssignments"][0]["count"])
                if not finished:
                    counts.append(count)
                elif conds["Finished"]["reason"] == "WorkloadSliceReplaced":
                    replaced.append(count)
            elif not finished:
                pending += 1
        assert len(counts) <= 1, f"two slices of the job admitted at once: {workloads()}"
        if not counts and replaced and pending:
            # Kueue finishes the replaced slice, then writes its replacement's admission: in
            # between, the replaced slice's admission is the one the job holds
            return max(replaced)
        return counts[0] if counts else 0

    def replicas() -> int:
        gpus = 0
        for pod in core.list_namespaced_pod(namespace, label_selector="adl.dev/job=grower").items:
            if pod.metadata.deletion_timestamp:
                core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
                continue
            gpus += int(pod.spec.containers[0].resources.requests["nvidia.com/gpu"])
        ceiling = admitted_now()
        assert gpus <= ceiling, f"{gpus} GPUs requested, {ceiling} admitted"
        admitted_seen.append(ceiling)
        return gpus

    admitted_seen: list[int] = []  # the job's admission at every poll

    def status() -> dict[str, Any]:
        body = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "grower")
        return dict(body.get("status") or {})

    with StaticNodes(admin_api, {f"gpu-{namespace}"[:63]: 8}):
        batch.create_namespaced_job(namespace, batch_job("borrower", team_b, gpus=7))
        wait_for(
            lambda: not batch.read_namespaced_job("borrower", namespace).spec.suspend,
            timeout=60,
            what="team B's Job admitted, borrowing 3 of team A's GPUs",
            details=kueue.tail,
        )
        job = job_manifest("grower", minReplicas=1, maxReplicas=4)
        job["metadata"]["labels"] = {QUEUE_LABEL: team_a}
        job["spec"]["checkpoint"] = {"claimName": claim}
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, job)
        wait_for(
            lambda: replicas() == 1 and admitted_now() == 1,
            timeout=90,
            what="team A's job partially admitted for 1 and running it",
            details=lambda: f"{status()}\n{workloads()}\n{operator.tail()}",
        )
        # its queue's nominal quota has room (lent to team B): it asks at once, and the ask
        # waits while the job runs on what it was admitted
        wait_for(lambda: len(workloads()) == 2, timeout=60, what="the job's ask to grow")
        assert replicas() == 1 and status().get("admitted") == 1
        remove_job(admin_api, namespace, "borrower")
        wait_for(
            lambda: replicas() == 4 and status().get("admitted") == 4,
            timeout=120,
            what="the job admitted again through a replacement slice and running 4",
            details=lambda: f"{status()}\n{workloads()}\n{operator.tail()}\n{kueue.tail()}",
        )
        first, second = sorted(
            workloads(), key=lambda w: (w["metadata"].get("annotations") or {}).get(SLICE, "0")
        )
        finished = {c["type"]: c for c in first["status"]["conditions"]}["Finished"]
        assert (finished["status"], finished["reason"]) == ("True", "WorkloadSliceReplaced")
        replaced = second["metadata"]["annotations"][
            "kueue.x-k8s.io/workload-slice-replacement-for"
        ]
        assert replaced == f"{namespace}/{first['metadata']['name']}"
        restarts = status().get("restarts") or {}
        assert restarts == {"resize": 1}, restarts  # one resize; never preempted to grow
        # from its first admission on, never without one: asking again stopped nothing
        since = admitted_seen[admitted_seen.index(1) :]
        assert min(since) == 1 and max(since) == 4, admitted_seen
    core.delete_persistent_volume(f"{namespace}-ckpt"[:63])
