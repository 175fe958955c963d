"""The operator's side of emptying nodes (``adl.operator.node_emptying`` and the
``EmptiesNodes`` half of ``KubeWorkerBackend``): a node another pod keeps is never emptied, a
node being emptied is offered to no job at the next round (and never written to), and each
job there gets one ``NodeEmptied`` event saying why."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from adl.contract import LABEL_CAPACITY_FOR
from adl.controller.backend import EmptiesNodes
from adl.controller.driver import Driver
from adl.operator.backend import KubeWorkerBackend, OperatorConfig
from adl.operator.node_emptying import EMPTIED, nodes_kept_by_others
from adl.operator.pods import ANNOTATION_ALLOCATION, LABEL_JOB
from adl.sched.capacity import CapacityRule
from adl.sched.emptying import NodeToEmpty
from adl.sched.policy import AdlPolicy
from tests.event_sink import EventRecorder

TEMPLATE = {"spec": {"containers": [{"name": "t", "image": "i", "command": ["x"]}]}}
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def pod(node: str, name: str, labels: dict[str, str] | None = None, **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "labels": labels or {}, **meta},
        "spec": {"nodeName": node, "containers": [{"name": "c"}]},
        "status": {"phase": "Running"},
    }


def test_only_other_pods_keep_a_node_from_being_empty() -> None:
    pods = [
        pod("n1", "worker", {LABEL_JOB: "j"}),
        pod("n2", "placeholder", {LABEL_CAPACITY_FOR: "j"}),
        pod("n3", "agent", ownerReferences=[{"kind": "DaemonSet", "name": "gpu-agent"}]),
        pod("n3", "static", annotations={"kubernetes.io/config.mirror": "x"}),
        pod("n4", "someone-else"),
        {**pod("n5", "done"), "status": {"phase": "Succeeded"}},
    ]
    assert nodes_kept_by_others(pods) == {"n4"}


class Store:
    """Jobs, GPU nodes and pods for the round. It has no Node writes: adl must make none
    (one would fail here with an AttributeError)."""

    def __init__(self, jobs: list[dict[str, Any]], nodes: list[str], pods: list[dict[str, Any]]):
        self.jobs = jobs
        self.nodes = [
            {
                "metadata": {"name": n, "labels": {}},
                "status": {"allocatable": {"nvidia.com/gpu": "1"}},
            }
            for n in nodes
        ]
        self.pods = pods

    def list_jobs(self, namespace: str | None) -> list[dict[str, Any]]:
        return self.jobs

    def list_nodes(self) -> list[dict[str, Any]]:
        return self.nodes

    def list_all_pods(self) -> list[dict[str, Any]]:
        return self.pods

    def patch_job_annotations(self, namespace: str, name: str, ann: dict[str, str]) -> None:
        job = next(j for j in self.jobs if j["metadata"]["name"] == name)
        job["metadata"].setdefault("annotations", {}).update(ann)

    def patch_job_status(self, namespace: str, name: str, patch: Any, rv: Any) -> None:
        pass

    def delete_pod(self, namespace: str, name: str, grace_s: int) -> None:
        pass

    def create(self, obj: dict[str, Any]) -> bool:
        return True


def body(name: str, **spec: Any) -> dict[str, Any]:
    meta = {"name": name, "namespace": "ns", "uid": f"u-{name}"}
    meta["creationTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"template": TEMPLATE, **spec}, "status": {}}


def answer(job: dict[str, Any]) -> list[str]:
    return json.loads(job["metadata"].get("annotations", {}).get(ANNOTATION_ALLOCATION, "[]"))


def test_an_idle_node_is_offered_to_no_job_and_one_another_pod_keeps_is_left_alone() -> None:
    jobs = [body("a", maxReplicas=1)]
    store = Store(jobs, ["n1", "n2", "n3"], [pod("n3", "someone-else")])
    config = OperatorConfig(capacity=CapacityRule())
    backend = KubeWorkerBackend(store, config, EventRecorder())  # type: ignore[arg-type]
    assert isinstance(backend, EmptiesNodes)
    driver = Driver(backend, AdlPolicy())
    driver.run_round(NOW)
    (held,) = answer(jobs[0])
    # n3 is kept by another pod; of n1 and n2, the one a does not use is being emptied
    assert set(driver.emptying) == {"n1", "n2"} - {held}
    idle = set(driver.emptying)
    result = driver.run_round(NOW)
    assert not set(result.allocation["ns/a"]) & idle
    # a's replica fits on n3, which the other pod keeps anyway: a moves there, freeing its node
    assert set(driver.emptying) == {"n1", "n2"}
    assert driver.run_round(NOW).allocation["ns/a"] == ["n3"]


def test_each_job_on_a_node_being_emptied_is_told_why() -> None:
    recorder = EventRecorder()
    jobs = [body("a"), body("b")]
    backend = KubeWorkerBackend(Store(jobs, ["n1"], []), OperatorConfig(), recorder)  # type: ignore[arg-type]
    backend.round_jobs()
    said = "moving off node n2: 1 replica(s) there add at most 0.31 of a GPU each, below 0.5"
    choice = NodeToEmpty("n2", (("ns/a", said),), 0.31, "node n2: ...")
    backend.nodes_emptied([choice], [])
    assert [(e.name, e.reason, e.message) for e in recorder.said] == [("a", EMPTIED, said)]
    backend.nodes_emptied([], ["n2"])  # offered again: logged, no job is told
    assert len(recorder.said) == 1
