"""Tainted GPU nodes: the pool holds a node exactly when the round's jobs tolerate its taints,
matched as kube-scheduler matches them; adl's pods carry the GPU toleration they are counted
with (a managed GPU pool taints every node, e.g. GKE's nvidia.com/gpu=present:NoSchedule)."""

from __future__ import annotations

from typing import Any

import pytest

from adl.models import AdaptiveJobSpec
from adl.operator.pods import JobRef, build_pod
from adl.operator.scheduling import nodes_from_objects
from adl.operator.taints import pod_tolerations, tolerates
from adl.sched.types import NodeInfo

GKE_GPU = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
JOB = JobRef("j", "ns", "uid-1")
SPOT = {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"}


def node(name: str, *taints: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {}},
        "spec": {"taints": list(taints)},
        "status": {"allocatable": {"nvidia.com/gpu": "4"}},
    }


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        ({"key": "k", "operator": "Equal", "value": "v", "effect": "NoSchedule"},
         {"key": "k", "value": "v", "effect": "NoSchedule"}, True),
        ({"key": "k", "value": "v"}, {"key": "k", "value": "v", "effect": "NoExecute"}, True),
        ({"key": "k", "value": "w"}, {"key": "k", "value": "v", "effect": "NoSchedule"}, False),
        ({"key": "k", "operator": "Exists"},
         {"key": "k", "value": "v", "effect": "NoSchedule"}, True),
        ({"key": "k", "operator": "Exists", "effect": "NoExecute"},
         {"key": "k", "effect": "NoSchedule"}, False),
        ({"operator": "Exists"}, {"key": "any", "value": "v", "effect": "NoSchedule"}, True),
        ({"key": "other", "operator": "Exists"}, {"key": "k", "effect": "NoSchedule"}, False),
        ({"key": "k", "value": ""}, {"key": "k", "effect": "NoSchedule"}, True),
        # tolerated for a while only: the node is going away, nothing new starts there
        ({"key": "k", "operator": "Exists", "tolerationSeconds": 300},
         {"key": "k", "effect": "NoExecute"}, False),
    ],
)  # fmt: skip
def test_a_toleration_matches_a_taint_as_kube_scheduler_does(
    toleration: dict[str, Any], taint: dict[str, Any], expected: bool
) -> None:
    assert tolerates([toleration], taint) is expected


def test_a_gke_tainted_gpu_node_is_in_the_pool_for_jobs_that_request_gpus() -> None:
    """The GPU pool's taint is tolerated by every pod that requests the GPU resource (adl adds
    the toleration, as the ExtendedResourceToleration admission plugin does)."""
    nodes = [node("gpu-a", GKE_GPU), node("gpu-b", GKE_GPU)]
    jobs = [pod_tolerations({"containers": [{"name": "t"}]}, "nvidia.com/gpu", gpus=1)]
    assert nodes_from_objects(nodes, [], tolerations=jobs) == [
        NodeInfo("gpu-a", 4),
        NodeInfo("gpu-b", 4),
    ]


def test_a_tainted_node_is_left_out_unless_every_job_of_the_round_tolerates_it() -> None:
    nodes = [node("plain"), node("spot", SPOT)]
    tolerant = pod_tolerations(
        {"tolerations": [{"key": SPOT["key"], "operator": "Exists"}]}, "nvidia.com/gpu", gpus=1
    )
    plain = pod_tolerations({}, "nvidia.com/gpu", gpus=1)
    names = lambda tol: [n.name for n in nodes_from_objects(nodes, [], tolerations=tol)]  # noqa: E731
    assert names([tolerant]) == ["plain", "spot"]
    assert names([plain]) == ["plain"]
    # one job that does not tolerate it keeps the node out for all (the policy places every
    # job on one pool; a pod never lands where it is not tolerated)
    assert names([tolerant, plain]) == ["plain"]
    assert names([]) == ["plain"]  # no job: nothing to tolerate with


def test_worker_pods_carry_the_gpu_toleration_only_when_they_request_gpus() -> None:
    spec = AdaptiveJobSpec.model_validate(
        {"template": {"spec": {"containers": [{"name": "t", "image": "i", "command": ["python"]}],
                               "tolerations": [{"key": "team", "operator": "Exists"}]}}}
    )  # fmt: skip
    pod = build_pod(JOB, spec, group=1, index=0, node="gpu-a", replicas=2, env={})
    tolerations = pod["spec"]["tolerations"]
    assert {"key": "team", "operator": "Exists"} in tolerations
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tolerations
    assert all(tolerates(tolerations, t) for t in (GKE_GPU,))
    cpu = spec.model_copy(update={"gpus_per_replica": 0})
    pod = build_pod(JOB, cpu, group=1, index=0, node="n", replicas=1, env={})
    assert pod["spec"]["tolerations"] == [{"key": "team", "operator": "Exists"}]


@pytest.mark.parametrize(
    ("label", "value"),
    [
        ("adl.dev/preemptible", "true"),
        ("karpenter.sh/capacity-type", "spot"),
        ("cloud.google.com/gke-spot", "true"),
        ("eks.amazonaws.com/capacityType", "SPOT"),
        ("kubernetes.azure.com/scalesetpriority", "spot"),
    ],
)
def test_spot_nodes_are_known_by_the_autoscalers_and_clouds_labels(label: str, value: str) -> None:
    spot, on_demand = node("spot"), node("on-demand")
    spot["metadata"]["labels"][label] = value
    on_demand["metadata"]["labels"]["karpenter.sh/capacity-type"] = "on-demand"
    assert nodes_from_objects([spot, on_demand], []) == [
        NodeInfo("on-demand", 4, preemptible=False),
        NodeInfo("spot", 4, preemptible=True),
    ]
