"""Tainted GPU nodes on the real control plane: a GKE-style GPU pool (every node tainted
``nvidia.com/gpu=present:NoSchedule``) is used, a node tainted for something the job does not
tolerate is not, and one it tolerates through its template is; the real kube-scheduler binds
every pod adl creates to the node adl chose (a pod that did not tolerate its node's taint would
stay unbound)."""

from __future__ import annotations

from typing import Any

from cluster_jobs import bound_claim, job_manifest
from kubernetes import client
from operator_process import OperatorProcess
from static_node import StaticNodes

from adl.operator.crd import GROUP, PLURAL, VERSION
from tests.waiting import wait_for

GKE_GPU = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
DEDICATED = {"key": "dedicated", "value": "inference", "effect": "NoSchedule"}


def test_jobs_use_tainted_gpu_nodes_exactly_when_they_tolerate_the_taints(
    operator: OperatorProcess, admin_api: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(admin_api)
    custom = client.CustomObjectsApi(admin_api)
    gpu_pool, dedicated = f"gpu-{namespace}"[:63], f"inf-{namespace}"[:63]
    claim = bound_claim(admin_api, namespace, "ckpt")  # so kube-scheduler can bind the pods

    def manifest(name: str, **spec: Any) -> dict[str, Any]:
        body = job_manifest(name, **spec)
        body["spec"]["checkpoint"] = {"claimName": claim}
        return body

    def status(name: str) -> dict[str, Any]:
        body = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        return dict(body.get("status") or {})

    def bound(name: str) -> list[str] | None:
        """The nodes kube-scheduler bound the job's live pods to, once all are bound."""
        pods = core.list_namespaced_pod(namespace, label_selector=f"adl.dev/job={name}").items
        live = [p for p in pods if not p.metadata.deletion_timestamp]
        if not live or any(not p.spec.node_name for p in live):
            return None
        return sorted(p.spec.node_name for p in live)

    try:
        with StaticNodes(admin_api, {gpu_pool: 2, dedicated: 4}):
            core.patch_node(gpu_pool, {"spec": {"taints": [GKE_GPU]}})
            core.patch_node(dedicated, {"spec": {"taints": [GKE_GPU, DEDICATED]}})

            # No tolerations in its template: only the GPU pool's taint is tolerated (its pods
            # get the GPU toleration), so of 6 GPUs 2 are free to it: too few for 3 replicas.
            custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, manifest("plain", minReplicas=3, maxReplicas=3)
            )

            def waits() -> str | None:  # the scheduler's Event on the job, as describe shows
                events = core.list_namespaced_event(
                    namespace, field_selector="involvedObject.name=plain"
                ).items
                return next((e.message for e in events if "too few" in (e.message or "")), None)

            message = wait_for(waits, timeout=90, what="plain told why", details=operator.tail)
            assert message == "waiting: 2 GPUs free, too few for its minimum of 3", message
            custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "plain")

            # 2 replicas fit the pool: there, and kube-scheduler binds the pod there
            custom.create_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, manifest("small", minReplicas=2, maxReplicas=2)
            )
            wait_for(lambda: bound("small"), timeout=90, what="small bound", details=operator.tail)
            assert bound("small") == [gpu_pool]
            assert status("small").get("allocation") == [gpu_pool, gpu_pool]
            custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "small")

            def small_gone() -> bool:
                # no kubelet confirms a graceful delete on these nodes: remove the pods at once
                # (as kubelet would once they exited) so their GPUs are free for the next job
                pods = core.list_namespaced_pod(namespace, label_selector="adl.dev/job=small")
                for pod in pods.items:
                    if pod.metadata.deletion_timestamp:
                        core.delete_namespaced_pod(
                            pod.metadata.name, namespace, grace_period_seconds=0
                        )
                return not pods.items

            wait_for(small_gone, timeout=90, what="small's pods gone", details=operator.tail)

            # tolerating the dedicated taint through its template: 6 replicas over both nodes
            tolerant = manifest("tolerant", minReplicas=6, maxReplicas=6)
            tolerant["spec"]["template"]["spec"]["tolerations"] = [
                {"key": "dedicated", "operator": "Equal", "value": "inference"}
            ]
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, tolerant)
            wait_for(
                lambda: bound("tolerant") == sorted([gpu_pool, dedicated]),
                timeout=90,
                what="tolerant's pods bound on both nodes",
                details=operator.tail,
            )
            assert sorted(status("tolerant").get("allocation") or []) == sorted(
                [gpu_pool] * 2 + [dedicated] * 4
            )
    finally:
        core.delete_persistent_volume(f"{namespace}-ckpt"[:63])
