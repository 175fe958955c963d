"""Tainted GPU nodes: the pool holds a node when some job of the round tolerates its taints,
matched as kube-scheduler matches them, and each job is confined to the nodes it tolerates;
adl's pods carry the GPU toleration they are counted with (a managed GPU pool taints every
node, e.g. GKE's nvidia.com/gpu=present:NoSchedule)."""

from __future__ import annotations

from typing import Any

import pytest

from adl.models import AdaptiveJobSpec
from adl.operator.pods import JobRef, build_pod
from adl.operator.scheduling import confinements, nodes_from_objects, pool_nodes
from adl.operator.taints import pod_tolerations, tolerates
from adl.sched.types import NodeInfo

GKE_GPU = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
JOB = JobRef("j", "ns", "uid-1")
SPOT = {"key": "cloud.google.com/gke-spot", "value": "true", "effect": "NoSchedule"}


def node(
    name: str, *taints: dict[str, Any], labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": dict(labels or {})},
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


def test_a_tainted_node_is_offered_when_some_job_tolerates_it_and_only_to_those_jobs() -> None:
    """A node no job of the round tolerates is left out; one that some job tolerates is in the
    pool, and each job that does not tolerate it is confined to the others (the policy then
    places it only there: never a pod where it is not tolerated)."""
    nodes = [node("plain"), node("spot", SPOT)]
    tolerant = pod_tolerations(
        {"tolerations": [{"key": SPOT["key"], "operator": "Exists"}]}, "nvidia.com/gpu", gpus=1
    )
    plain = pod_tolerations({}, "nvidia.com/gpu", gpus=1)
    names = lambda tol: [n.name for n in nodes_from_objects(nodes, [], tolerations=tol)]  # noqa: E731
    assert names([tolerant]) == ["plain", "spot"]
    assert names([plain]) == ["plain"]
    assert names([tolerant, plain]) == ["plain", "spot"]
    assert names([]) == ["plain"]  # no job: nothing to tolerate with
    jobs = {"t": (tolerant, None), "p": (plain, None)}
    assert confinements(nodes, jobs) == {"t": None, "p": frozenset({"plain"})}
    assert confinements(nodes, {"p": (plain, None)}) == {"p": None}  # nothing else offered


def test_a_job_of_a_node_pool_is_confined_to_its_labelled_nodes_it_tolerates() -> None:
    """A pool (Kueue: the admitted flavor) selects nodes by label; its nodes' taints must
    still be tolerated, by the template's tolerations or the pool's."""
    b_taint = {"key": "pool", "value": "b", "effect": "NoSchedule"}
    nodes = [node("a1", labels={"pool": "a"}), node("b1", b_taint, labels={"pool": "b"}),
             node("b2", labels={"pool": "b"})]  # fmt: skip
    plain = pod_tolerations({}, "nvidia.com/gpu", gpus=1)
    assert pool_nodes(nodes, plain, {"pool": "b"}) == frozenset({"b2"})
    with_pool = [*plain, {"key": "pool", "operator": "Equal", "value": "b"}]
    assert pool_nodes(nodes, with_pool, {"pool": "b"}) == frozenset({"b1", "b2"})
    jobs = {"queued": (with_pool, {"pool": "b"}), "free": (plain, None)}
    assert confinements(nodes, jobs) == {
        "queued": frozenset({"b1", "b2"}),
        "free": frozenset({"a1", "b2"}),
    }


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
