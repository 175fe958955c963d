"""The chart installed on the real API server, and the operator it describes running as the
chart's ServiceAccount: an AdaptiveJob becomes its pods, Service, token Secret and claim."""

from __future__ import annotations

from typing import Any

import pytest
from chart_install import Installation
from cluster_jobs import SCOPES, bound_claim, job_manifest, run_a_job
from controlplane import ControlPlane
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from operator_process import OperatorProcess
from static_node import StaticNodes

from adl.operator.crd import GROUP, PLURAL, VERSION
from tests.chart_variants import INSTALLED, VARIANTS
from tests.waiting import wait_for


@pytest.mark.parametrize("installed_chart", SCOPES, indirect=True)
def test_every_rendered_object_is_accepted(
    installed_chart: Installation, admin_api: client.ApiClient
) -> None:
    """Everything the chart renders exists on the API server as rendered (nothing refused)."""
    kinds = {o["kind"] for o in installed_chart.objects}
    assert {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Deployment"} <= kinds
    if installed_chart.namespaced:
        assert {"Role", "RoleBinding", "KopfPeering"} <= kinds
    else:
        assert "ClusterKopfPeering" in kinds
    rbac = client.RbacAuthorizationV1Api(admin_api)
    for obj in installed_chart.objects:
        if obj["kind"] == "ClusterRole":
            stored = rbac.read_cluster_role(obj["metadata"]["name"])
            assert len(stored.rules) == len(obj["rules"])
    sa = client.CoreV1Api(admin_api).read_namespaced_service_account(
        installed_chart.service_account, installed_chart.namespace
    )
    assert sa.metadata.name == installed_chart.service_account


def owned_by(obj: Any, uid: str) -> bool:
    return any(ref.uid == uid for ref in obj.metadata.owner_references or [])


@pytest.mark.parametrize("installed_chart", SCOPES, indirect=True)
def test_operator_creates_a_jobs_objects(
    installed_chart: Installation,
    operator: OperatorProcess,
    admin_api: client.ApiClient,
    namespace: str,
) -> None:
    core = client.CoreV1Api(admin_api)
    custom = client.CustomObjectsApi(admin_api)
    with StaticNodes(admin_api, {f"gpu-{namespace}": 4}):
        job = custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, job_manifest("first", maxReplicas=2)
        )
        uid = job["metadata"]["uid"]

        def pods() -> list[Any]:
            items = core.list_namespaced_pod(namespace, label_selector="adl.dev/job=first").items
            return [p for p in items if owned_by(p, uid)]

        created = wait_for(pods, timeout=60, what="the job's pods", details=operator.tail)
        service = core.read_namespaced_service("first", namespace)
        assert owned_by(service, uid) and service.spec.cluster_ip == "None"
        secret = core.read_namespaced_secret("first-adl-token", namespace)
        assert owned_by(secret, uid) and secret.data
        claims = core.list_namespaced_persistent_volume_claim(namespace).items
        assert [c for c in claims if owned_by(c, uid)], claims
        # no kubelet: the pods are created and stay Pending
        assert {p.status.phase for p in created} == {"Pending"}
    status = custom.get_namespaced_custom_object_status(GROUP, VERSION, namespace, PLURAL, "first")
    assert status.get("status", {}).get("phase"), status
    assert operator.alive(), operator.tail()
    # (the word, not the code: "403" can be the milliseconds of a log line)
    assert "Forbidden" not in operator.log_text(), operator.tail()


def test_job_outside_the_watched_namespaces_is_left_alone(
    install_chart: Any,
    start_operator: Any,
    admin_api: client.ApiClient,
    namespace: str,
) -> None:
    """A namespaced operator watches only its namespaces: a job elsewhere gets no status."""
    installation = install_chart({"namespaced": True, "watchNamespaces": []})
    op = start_operator(installation).wait_ready()
    custom = client.CustomObjectsApi(admin_api)
    custom.create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, job_manifest("elsewhere")
    )
    # the operator's own namespace gets a job too: once that one has a status, the operator
    # has been running long enough to have touched the other
    custom.create_namespaced_custom_object(
        GROUP, VERSION, installation.namespace, PLURAL, job_manifest("home")
    )

    def home_status() -> Any:
        body = custom.get_namespaced_custom_object(
            GROUP, VERSION, installation.namespace, PLURAL, "home"
        )
        return (body.get("status") or {}).get("phase")

    wait_for(home_status, timeout=60, what="a status on the watched job", details=op.tail)
    other = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "elsewhere")
    assert not other.get("status"), other
    with pytest.raises(ApiException):
        client.CoreV1Api(admin_api).read_namespaced_secret("elsewhere-adl-token", namespace)


def missing(sent: Any, kept: Any, path: str = "") -> list[str]:
    """Paths of the values in ``sent`` (a merge patch: nulls delete) that ``kept`` lacks."""
    if isinstance(sent, dict):
        if not isinstance(kept, dict):
            return [path or "."]
        out = []
        for key, value in sent.items():
            if value is None:
                continue
            if key not in kept:
                out.append(f"{path}.{key}")
            else:
                out += missing(value, kept[key], f"{path}.{key}")
        return out
    if isinstance(sent, list) and isinstance(kept, list) and len(sent) == len(kept):
        pairs = enumerate(zip(sent, kept, strict=True))
        return [m for i, (a, b) in pairs for m in missing(a, b, f"{path}[{i}]")]
    return []


def as_merge(body: Any) -> dict[str, Any]:
    """A JSON patch (kopf's finalizer edits) as the object its add/replace ops write, so it is
    checked like a merge patch; ops into list items are left out."""
    if not isinstance(body, list):
        return dict(body or {})
    out: dict[str, Any] = {}
    for op in body:
        keys = [k.replace("~1", "/").replace("~0", "~") for k in op["path"].split("/")[1:]]
        if op["op"] not in ("add", "replace") or any(k.isdigit() or k == "-" for k in keys):
            continue
        node = out
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = op["value"]
    return out


def test_what_the_operator_writes_is_kept(
    installed_chart: Installation,
    operator: OperatorProcess,
    control_plane: ControlPlane,
    admin_api: client.ApiClient,
    namespace: str,
) -> None:
    """The structural schema prunes fields it does not know, silently (kmock keeps them): every
    field the operator (and kopf within it) writes to a job must survive the write."""
    run_a_job(admin_api, namespace, operator)
    writes = [
        e
        for e in control_plane.audit_events(installed_chart.username)
        if (e.get("objectRef") or {}).get("resource") == PLURAL
        and e["verb"] in ("patch", "update")
        and e.get("responseStatus", {}).get("code") == 200
    ]
    on_status = [e for e in writes if e["objectRef"].get("subresource") == "status"]
    assert on_status, "the audit log holds no status write of the operator"
    assert all(e.get("requestObject", {}).get("status") for e in on_status), "bodies not audited"
    lost: set[str] = set()
    for event in writes:
        sent, kept = as_merge(event.get("requestObject")), event.get("responseObject") or {}
        # a write through /status changes only status, one through the object everything else
        through_status = event["objectRef"].get("subresource") == "status"
        parts = ["status"] if through_status else ["metadata", "spec"]
        for part in parts:
            lost |= {f"{part}{p}" for p in missing(sent.get(part), kept.get(part))}
        if not through_status and sent.get("status"):
            lost.add("status (written through the object, not /status)")
    assert sorted(lost) == [], "fields the API server dropped from the operator's writes"


@pytest.mark.parametrize("variant", INSTALLED)
def test_chart_variant_is_accepted(
    variant: str, install_chart: Any, admin_api: client.ApiClient, namespace: str
) -> None:
    values = {**VARIANTS[variant], "namespaced": True, "watchNamespaces": [namespace]}
    installation = install_chart(values)
    deployment = client.AppsV1Api(admin_api).read_namespaced_deployment(
        installation.deployment["metadata"]["name"], installation.namespace
    )
    container = deployment.spec.template.spec.containers[0]
    assert container.args == installation.operator_args
    kinds = {o["kind"] for o in installation.objects}
    assert ("PodDisruptionBudget" in kinds) == (variant == "standby")


def test_scheduler_places_pods_on_the_allocated_nodes(
    operator: OperatorProcess, admin_api: client.ApiClient, namespace: str
) -> None:
    """kube-scheduler binds each worker pod to the node the operator allocated (the operator
    pins pods by node affinity, not spec.nodeName, so the scheduler still checks them)."""
    core = client.CoreV1Api(admin_api)
    custom = client.CustomObjectsApi(admin_api)
    claim = bound_claim(admin_api, namespace, "ckpt")
    nodes = {f"a-{namespace}"[:63]: 2, f"b-{namespace}"[:63]: 2}
    try:
        with StaticNodes(admin_api, nodes):
            body = job_manifest("placed", minReplicas=4, maxReplicas=4)
            body["spec"]["checkpoint"] = {"claimName": claim}
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)

            def allocation() -> list[str]:
                body = custom.get_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, "placed"
                )
                return list((body.get("status") or {}).get("allocation") or [])

            nodes_used = set(
                wait_for(
                    lambda: len(allocation()) == 4 and allocation(),
                    timeout=60,
                    what="4 replicas allocated",
                    details=operator.tail,
                )
            )

            def placed() -> dict[str, str] | None:
                pods = core.list_namespaced_pod(namespace, label_selector="adl.dev/job=placed")
                bound = {p.metadata.name: p.spec.node_name for p in pods.items}
                # one pod per allocated node, once the operator has made them all
                done = len(bound) == len(nodes_used) and all(bound.values())
                return bound if done else None

            bound = wait_for(placed, timeout=90, what="the pods bound", details=operator.tail)
            # each bound where the allocation put it, spread over both nodes
            assert sorted(bound.values()) == sorted(nodes_used) == sorted(nodes)
    finally:
        core.delete_persistent_volume(f"{namespace}-ckpt"[:63])


#: (what a namespace's quota allows, the reason a job refused by it waits with)
QUOTAS = {
    "claim": ({"requests.storage": "1Gi"}, "ClaimRejected"),
    "service": ({"services": "0"}, "ServiceRejected"),
    "secret": ({"count/secrets": "0"}, "SecretRejected"),
}


@pytest.mark.parametrize("refused", sorted(QUOTAS))
def test_a_refused_object_is_the_jobs_reason_until_the_quota_allows_it(
    refused: str, operator: OperatorProcess, admin_api: client.ApiClient, namespace: str
) -> None:
    """A ResourceQuota (admission, which kmock does not have) refuses one of the job's objects:
    the job says so in its status and an Event, and starts once the quota allows it."""
    hard, reason = QUOTAS[refused]
    core = client.CoreV1Api(admin_api)
    custom = client.CustomObjectsApi(admin_api)
    quota = client.V1ResourceQuota(
        metadata=client.V1ObjectMeta(name="storage"), spec=client.V1ResourceQuotaSpec(hard=hard)
    )
    core.create_namespaced_resource_quota(namespace, quota)
    # the quota controller must have counted the namespace before admission enforces it
    wait_for(
        lambda: core.read_namespaced_resource_quota("storage", namespace).status.hard,
        timeout=30,
        what="the quota counted",
    )
    with StaticNodes(admin_api, {f"gpu-{namespace}": 2}):
        body = job_manifest("quota")
        body["spec"]["checkpoint"]["size"] = "10Gi"
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)

        def status() -> dict[str, Any]:
            job = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "quota")
            return dict(job.get("status") or {})

        said = wait_for(
            lambda: status() if status().get("reason") == reason else None,
            timeout=60,
            what=f"{reason} as the job's reason",
            details=operator.tail,
        )
        assert "exceeded quota" in said["message"], said

        def refusals() -> list[Any]:
            return list(
                core.list_namespaced_event(
                    namespace, field_selector=f"involvedObject.name=quota,reason={reason}"
                ).items
            )

        # kopf posts Events from a queue, so the status can be read before its Event is
        events = wait_for(
            lambda: refusals() or None,
            timeout=30,
            what=f"the {reason} Event",
            details=operator.tail,
        )
        assert len(events) == 1, events
        assert "Traceback" not in operator.log_text(), operator.tail()

        core.delete_namespaced_resource_quota("storage", namespace)
        wait_for(
            lambda: core.list_namespaced_pod(namespace, label_selector="adl.dev/job=quota").items,
            timeout=90,
            what="the pods once the quota is gone",
            details=operator.tail,
        )
        # and the status moves on (written right after the pods)
        wait_for(
            lambda: status().get("reason") != reason,
            timeout=30,
            what="the reason cleared",
            details=operator.tail,
        )
