"""Kueue's admitted flavor as a node pool (``adl.operator.kueue``): the flavors of an
admission, the pool they make, and the pods that carry it."""

from __future__ import annotations

from typing import Any

import pytest

from adl.models import AdaptiveJobSpec
from adl.operator.kueue import POD_SET, FlavorError, admission, flavor_pool
from adl.operator.pods import JobRef, NodePool, build_pod
from tests.event_sink import EventRecorder

TOLERATE_B = {"key": "pool", "operator": "Equal", "value": "b", "effect": "NoSchedule"}


def flavor(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": spec}


def admitted(flavors: dict[str, str], count: int = 2) -> dict[str, Any]:
    return {
        "spec": {"queueName": "team-a", "podSets": [{"name": POD_SET, "count": 4}]},
        "status": {
            "conditions": [{"type": "Admitted", "status": "True"}],
            "admission": {
                "podSetAssignments": [{"name": POD_SET, "count": count, "flavors": flavors}]
            },
        },
    }


def test_an_admission_names_its_flavors_once_each() -> None:
    adm = admission(admitted({"nvidia.com/gpu": "gpu-b", "cpu": "cpu-x", "memory": "cpu-x"}))
    assert (adm.count, adm.flavors) == (2, ("cpu-x", "gpu-b"))
    waiting = admitted({"nvidia.com/gpu": "gpu-b"})
    waiting["status"]["conditions"] = [{"type": "QuotaReserved", "status": "True"}]
    assert admission(waiting).flavors == ()  # not admitted yet: no pool


def test_the_pool_of_several_flavors_is_the_union_of_their_labels_and_tolerations() -> None:
    flavors = {
        "gpu-b": flavor("gpu-b", nodeLabels={"pool": "b"}, tolerations=[TOLERATE_B]),
        "cpu-x": flavor("cpu-x", nodeLabels={"zone": "x"}, tolerations=[TOLERATE_B]),
        "plain": flavor("plain"),
    }
    pool = flavor_pool(("cpu-x", "gpu-b"), flavors)
    assert pool == NodePool({"zone": "x", "pool": "b"}, (TOLERATE_B,))
    assert flavor_pool(("plain",), flavors) == NodePool()


def test_flavors_that_give_no_pool_say_why() -> None:
    flavors = {n: flavor(n, nodeLabels={"pool": n}) for n in ("a", "b")}
    with pytest.raises(FlavorError, match="pool as both a and b"):
        flavor_pool(("a", "b"), flavors)
    with pytest.raises(FlavorError, match="ResourceFlavor gone of its admission does not exist"):
        flavor_pool(("gone",), flavors)


def test_pods_carry_the_pools_node_labels_and_tolerations() -> None:
    """As Kueue's own integrations start an admitted job: the flavor's labels join the
    template's nodeSelector, its tolerations the template's (and the GPU one adl adds)."""
    spec = AdaptiveJobSpec.model_validate(
        {"template": {"spec": {"containers": [{"name": "t", "image": "i", "command": ["python"]}],
                               "nodeSelector": {"disk": "ssd", "pool": "a"},
                               "tolerations": [{"key": "team", "operator": "Exists"}]}}}
    )  # fmt: skip
    pool = NodePool({"pool": "b"}, (TOLERATE_B,))
    pod = build_pod(JobRef("j", "ns", "u"), spec, group=1, index=0, node="b1", replicas=1,
                    env={}, pool=pool)  # fmt: skip
    assert pod["spec"]["nodeSelector"] == {"disk": "ssd", "pool": "b"}
    assert pod["spec"]["tolerations"] == [
        {"key": "team", "operator": "Exists"},
        TOLERATE_B,
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    ]
    bare = build_pod(JobRef("j", "ns", "u"), spec, group=1, index=0, node="b1", replicas=1, env={})
    assert bare["spec"]["nodeSelector"] == {"disk": "ssd", "pool": "a"}  # no pool: as it was


class Store:
    """The API objects of one round: jobs, their Workloads, ResourceFlavors, nodes."""

    def __init__(self, jobs: list[dict[str, Any]], workloads: list[dict[str, Any]]) -> None:
        self.jobs, self.workloads = jobs, workloads
        self.flavors = [
            flavor("flavor-a", nodeLabels={"pool": "a"}),
            flavor("flavor-b", nodeLabels={"pool": "b"}, tolerations=[TOLERATE_B]),
        ]
        taint = {"key": "pool", "value": "b", "effect": "NoSchedule"}
        self.nodes = [
            {"metadata": {"name": "a1", "labels": {"pool": "a"}}, "spec": {},
             "status": {"allocatable": {"nvidia.com/gpu": "4"}}},
            {"metadata": {"name": "b1", "labels": {"pool": "b"}}, "spec": {"taints": [taint]},
             "status": {"allocatable": {"nvidia.com/gpu": "4"}}},
        ]  # fmt: skip
        self.flavor_lists = 0

    def list_jobs(self, namespace: str | None) -> list[dict[str, Any]]:
        return self.jobs

    def list_workloads(self, namespace: str) -> list[dict[str, Any]]:
        return self.workloads

    def list_resource_flavors(self) -> list[dict[str, Any]]:
        self.flavor_lists += 1
        return self.flavors

    def list_nodes(self) -> list[dict[str, Any]]:
        return self.nodes

    def list_all_pods(self) -> list[dict[str, Any]]:
        return []


def job_body(name: str, queue: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    meta["creationTimestamp"] = "2026-01-01T00:00:00Z"
    if queue:
        meta["labels"] = {"kueue.x-k8s.io/queue-name": queue}
    template = {"spec": {"containers": [{"name": "t", "image": "i", "command": ["x"]}]}}
    return {"metadata": meta, "spec": {"template": template, "maxReplicas": 4}, "status": {}}


def owned(workload: dict[str, Any], uid: str) -> dict[str, Any]:
    workload["metadata"] = {
        "name": f"wl-{uid}",
        "ownerReferences": [{"apiVersion": "adl.dev/v1", "kind": "AdaptiveJob", "uid": uid}],
    }
    return workload


def test_the_round_confines_an_admitted_job_to_its_flavors_nodes() -> None:
    """The backend's round: a job admitted on flavor-b may run only on b1 (its label, and its
    taint tolerated through the flavor); a job in no queue may not use b1 (its taint is not
    tolerated) but b1 is still in the round's pool; ResourceFlavors are listed once."""
    from adl.operator.backend import KubeWorkerBackend, OperatorConfig

    store = Store(
        [job_body("queued", "team-b"), job_body("free", None)],
        [owned(admitted({"nvidia.com/gpu": "flavor-b"}), "uid-queued")],
    )
    backend = KubeWorkerBackend(store, OperatorConfig(kueue=True))  # type: ignore[arg-type]
    confined = {r.key: r.nodes for r in backend.round_jobs()}
    assert confined == {"ns/queued": frozenset({"b1"}), "ns/free": frozenset({"a1"})}
    assert [n.name for n in backend.round_nodes()] == ["a1", "b1"]
    assert store.flavor_lists == 1
    # not admitted (or on a flavor without labels): nobody tolerates b1, which leaves the
    # pool, and then no job is confined
    store.workloads = []
    assert {r.key: r.nodes for r in backend.round_jobs()} == {"ns/queued": None, "ns/free": None}
    assert [n.name for n in backend.round_nodes()] == ["a1"]


def test_an_admission_whose_flavors_give_no_pool_gets_no_node_and_says_so_once() -> None:
    from adl.operator.backend import KubeWorkerBackend, OperatorConfig

    events = EventRecorder()
    store = Store(
        [job_body("queued", "team-b")],
        [owned(admitted({"nvidia.com/gpu": "flavor-b", "cpu": "flavor-a"}), "uid-queued")],
    )
    backend = KubeWorkerBackend(store, OperatorConfig(kueue=True), events)  # type: ignore[arg-type]
    for _ in range(2):
        assert [r.nodes for r in backend.round_jobs()] == [frozenset()]
    assert [(e.reason, e.message) for e in events.said] == [
        ("NoNodePool", "no node can take it: its admitted flavors select node label pool "
                       "as both a and b: no node has both")
    ]  # fmt: skip
    store.flavors[0] = flavor("flavor-a")  # fixed: no label of its own any more
    assert [r.nodes for r in backend.round_jobs()] == [frozenset({"b1"})]
    assert backend.no_pool == {}
