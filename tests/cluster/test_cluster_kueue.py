"""adl with Kueue on the real control plane: Kueue built from its module (``versions.env``),
installed from its own chart, its manager running with its webhooks (``kueue_install``)."""

from __future__ import annotations

from typing import Any

from cluster_procs import wait_for
from kubernetes import client
from kueue_install import Kueue

KUEUE = ("kueue.x-k8s.io", "v1beta2")


def kueue_object(kind: str, name: str, spec: dict[str, Any], namespace: str | None = None) -> Any:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "/".join(KUEUE), "kind": kind, "metadata": meta, "spec": spec}


def create_queues(
    api: client.ApiClient, namespace: str, name: str, gpus: int, cohort: str | None = None
) -> None:
    """A ClusterQueue ``name`` with a nominal quota of ``gpus`` GPUs (and ample CPU and memory)
    on one ResourceFlavor, and a LocalQueue of the same name in ``namespace``."""
    custom = client.CustomObjectsApi(api)
    flavor = kueue_object("ResourceFlavor", "default-flavor", {})
    try:
        custom.create_cluster_custom_object(*KUEUE, "resourceflavors", flavor)
    except client.exceptions.ApiException as exc:
        if exc.status != 409:
            raise
    resources = [
        {"name": "cpu", "nominalQuota": "64"},
        {"name": "memory", "nominalQuota": "256Gi"},
        {"name": "nvidia.com/gpu", "nominalQuota": str(gpus)},
    ]
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                "flavors": [{"name": "default-flavor", "resources": resources}],
            }
        ],
    }
    if cohort:
        spec["cohortName"] = cohort
    custom.create_cluster_custom_object(
        *KUEUE, "clusterqueues", kueue_object("ClusterQueue", name, spec)
    )
    local = kueue_object("LocalQueue", name, {"clusterQueue": name}, namespace)
    custom.create_namespaced_custom_object(*KUEUE, namespace, "localqueues", local)


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
