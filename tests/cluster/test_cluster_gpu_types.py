"""GPU types on the real control plane (issue 33): nodes labelled as GPU feature discovery
labels them, jobs restricted by ``spec.gpuTypes`` (validated by the API server against the
generated CRD) are placed by the operator on their type only, the real kube-scheduler binds
their pods there, and the decision names the type."""

from __future__ import annotations

from typing import Any

import pytest
from cluster_jobs import bound_claim, job_manifest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from operator_process import OperatorProcess
from static_node import StaticNodes

from adl.contract import LABEL_GPU_PRODUCT
from adl.operator.crd import GROUP, PLURAL, VERSION
from tests.waiting import wait_for

T4, A100 = "Tesla-T4", "NVIDIA-A100-SXM4-80GB"


def test_jobs_run_on_the_gpu_types_they_allow_and_are_told_which(
    operator: OperatorProcess, admin_api: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(admin_api)
    custom = client.CustomObjectsApi(admin_api)
    t4_node, a100_node = f"t4-{namespace}"[:63], f"a100-{namespace}"[:63]
    claim = bound_claim(admin_api, namespace, "ckpt")  # so kube-scheduler can bind the pods

    def manifest(name: str, **spec: Any) -> dict[str, Any]:
        body = job_manifest(name, **spec)
        body["spec"]["checkpoint"] = {"claimName": claim}
        return body

    def bound(name: str) -> list[str] | None:
        """The nodes kube-scheduler bound the job's live pods to, once all are bound."""
        pods = core.list_namespaced_pod(namespace, label_selector=f"adl.dev/job={name}").items
        live = [p for p in pods if not p.metadata.deletion_timestamp]
        if not live or any(not p.spec.node_name for p in live):
            return None
        return sorted(p.spec.node_name for p in live)

    def details() -> str:
        """The pods, their scheduling conditions and the namespace's events, then the
        operator's log: what a failure needs to be read."""
        lines = []
        for p in core.list_namespaced_pod(namespace).items:
            why = [f"{c.type}={c.status} {c.message or ''}" for c in p.status.conditions or []]
            lines.append(f"pod {p.metadata.name} node={p.spec.node_name} {p.status.phase} {why}")
        for e in core.list_namespaced_event(namespace).items:
            lines.append(f"event {e.involved_object.name}: {e.reason} {e.message}")
        return "\n".join(lines) + "\n" + operator.tail()

    def told(name: str) -> str | None:
        events = core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={name}"
        ).items
        return next((e.message for e in events if e.reason == "Rescheduled"), None)

    # the API server refuses a type that is no label value (the CRD's pattern)
    with pytest.raises(ApiException) as refused:
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, manifest("bad", gpuTypes=["Tesla T4"])
        )
    assert refused.value.status == 422

    try:
        with StaticNodes(admin_api, {t4_node: 2, a100_node: 2}):
            for node, product in ((t4_node, T4), (a100_node, A100)):
                core.patch_node(node, {"metadata": {"labels": {LABEL_GPU_PRODUCT: product}}})
            for name, gpu_type in (("on-t4", T4), ("on-a100", A100)):
                custom.create_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    namespace,
                    PLURAL,
                    manifest(name, minReplicas=2, maxReplicas=2, gpuTypes=[gpu_type]),
                )
            for name, node, gpu_type in (("on-t4", t4_node, T4), ("on-a100", a100_node, A100)):
                # one pod per node, holding both replicas
                wait_for(
                    lambda name=name, node=node: bound(name) == [node],
                    timeout=90,
                    what=f"{name} bound on {node}",
                    details=details,
                )
                message = wait_for(
                    lambda name=name: told(name), timeout=30, what=f"{name} told why"
                )
                assert message.startswith(f"started with 2 replicas (2 x {gpu_type}):"), message
                body = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
                assert (body.get("status") or {}).get("allocation") == [node, node]
    finally:
        core.delete_persistent_volume(f"{namespace}-ckpt"[:63])
