"""The GPU pool from Node objects, JobInfos from CRD objects, and the round's changed set."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from adl.controller.rounds import job_info, plan_round
from adl.operator.scheduling import (
    desired_allocation,
    gpus_used_by_others,
    job_records,
    nodes_from_objects,
)
from adl.sched.types import Allocation, JobInfo, NodeInfo

NOW = datetime(2026, 1, 1, 0, 10, tzinfo=UTC)
TEMPLATE = {"spec": {"containers": [{"name": "t", "image": "i"}]}}


def node(name: str, gpus: Any, **extra: Any) -> dict[str, Any]:
    spec = extra.pop("spec", {})
    return {
        "metadata": {"name": name, "labels": extra.pop("labels", {})},
        "spec": spec,
        "status": {"allocatable": {"nvidia.com/gpu": gpus, "cpu": "8"}, **extra},
    }


def foreign_pod(node_name: str, gpus: str, phase: str = "Running", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": labels},
        "status": {"phase": phase},
        "spec": {
            "nodeName": node_name,
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": gpus}}}],
        },
    }


def test_free_gpus_exclude_foreign_pods_and_unusable_nodes() -> None:
    nodes = [
        node("a", "8"),
        node("b", 4),
        node("cordoned", "8", spec={"unschedulable": True}),
        node("tainted", "8", spec={"taints": [{"key": "x", "effect": "NoSchedule"}]}),
        node("soft-taint", "2", spec={"taints": [{"key": "x", "effect": "PreferNoSchedule"}]}),
        node("notready", "8", conditions=[{"type": "Ready", "status": "False"}]),
        node("cpu-only", None),
        node("full", "2"),
    ]
    pods = [
        foreign_pod("a", "3"),
        foreign_pod("a", "1", phase="Succeeded"),  # finished: holds nothing
        foreign_pod("b", "2", **{"adl.dev/job": "mine"}),  # adl's own: the policy re-plans it
        foreign_pod("full", "2"),
    ]
    assert gpus_used_by_others(pods) == {"a": 3, "full": 2}
    result = nodes_from_objects(nodes, pods)
    assert result == [NodeInfo("a", 5), NodeInfo("b", 4), NodeInfo("soft-taint", 2)]


def test_node_selector_limits_the_pool() -> None:
    nodes = [node("a", "8", labels={"pool": "train"}), node("b", "8", labels={"pool": "infer"})]
    assert [n.name for n in nodes_from_objects(nodes, [], selector={"pool": "train"})] == ["a"]


def job(name: str, created: str, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "creationTimestamp": created,
            "annotations": status.pop("annotations", {}),
        },
        "spec": {
            "template": TEMPLATE,
            "minReplicas": 1,
            "maxReplicas": 4,
            **status.pop("spec", {}),
        },
        "status": status,
    }


def test_job_records_from_the_crd() -> None:
    body = job(
        "a",
        "2026-01-01T00:00:00Z",
        restarts={"resize": 2, "failure": 1},
        hints={"initBatchSize": 32, "restartCostS": 12.0},
        kopf={"ignored": True},
        annotations={"adl.dev/allocation": '["n1", "n1"]'},
    )
    invalid = job("d", "2026-01-01T00:00:00Z", spec={"minReplicas": 9})
    (record,) = job_records([body, invalid])
    assert record.key == "ns/a" and record.desired == ["n1", "n1"]
    assert record.created == datetime(2026, 1, 1, tzinfo=UTC)
    info = job_info(record, NOW, order=3)
    assert (info.name, info.min_replicas, info.max_replicas) == ("ns/a", 1, 4)
    assert info.age_s == 600 and info.restarts == 3 and info.restart_cost_s == 12.0


def test_a_job_being_deleted_takes_no_part_in_rounds() -> None:
    """Its workers are stopping: the GPUs it held are the others' to take."""
    deleting = job("gone", "2026-01-01T00:00:00Z", allocation=["a"])
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:09:00Z"
    records = job_records([deleting, job("b", "2026-01-01T00:01:00Z")])
    assert [r.key for r in records] == ["ns/b"]


class Recorder:
    def __init__(self, answer: Allocation) -> None:
        self.answer = answer
        self.seen: list[Any] = []

    def optimize(
        self, jobs: Sequence[JobInfo], nodes: Sequence[NodeInfo], previous: Mapping[str, list[str]]
    ) -> Allocation:
        self.seen.append(([j.name for j in jobs], list(nodes), dict(previous)))
        return self.answer


def test_plan_reports_only_changed_allocations_in_submission_order() -> None:
    same = job(
        "same",
        "2026-01-01T00:01:00Z",
        allocation=["a"],
        annotations={"adl.dev/allocation": json.dumps(["a"])},
    )
    new = job("new", "2026-01-01T00:02:00Z")
    done = job("done", "2026-01-01T00:00:00Z", phase="Failed")
    policy = Recorder({"ns/same": ["a"], "ns/new": ["b", "b"]})
    records = job_records([new, done, same])
    result = plan_round(policy, records, [NodeInfo("a", 1), NodeInfo("b", 2)], NOW)
    assert result.changed == {"ns/new": ["b", "b"]}
    names, _nodes, previous = policy.seen[0]
    assert names == ["ns/same", "ns/new"]
    assert previous == {"ns/same": ["a"], "ns/new": []}
    assert desired_allocation(same) == ["a"] and desired_allocation(new) is None


def test_plan_with_the_real_policy() -> None:
    from adl.sched.policy import AdlPolicy

    jobs = [job(f"j{i}", f"2026-01-01T00:0{i}:00Z") for i in range(3)]
    nodes = [NodeInfo("a", 4), NodeInfo("b", 4)]
    result = plan_round(AdlPolicy(), job_records(jobs), nodes, NOW)
    used: dict[str, int] = {}
    for alloc in result.allocation.values():
        for n in alloc:
            used[n] = used.get(n, 0) + 1
    assert all(used[n.name] <= n.gpus for n in nodes if n.name in used)
    assert all(1 <= len(result.allocation[f"ns/j{i}"]) <= 4 for i in range(3))


def test_a_sharded_jobs_memory_minimum_raises_its_min_replicas() -> None:
    """The hints' minReplicas (what the job fits in) reaches the policy as its minimum."""
    body = job("a", "2026-01-01T00:00:00Z", hints={"initBatchSize": 32, "minReplicas": 3})
    (record,) = job_records([body])
    assert job_info(record, NOW).min_replicas == 3


def test_a_nodes_gpu_type_is_its_gpu_feature_discovery_label_unless_told_another() -> None:
    gfd = "nvidia.com/gpu.product"
    nodes = [
        node("a100", "8", labels={gfd: "NVIDIA-A100-SXM4-80GB", "itype": "p4d.24xlarge"}),
        node("t4", "4", labels={gfd: "Tesla-T4", "itype": "g4dn.12xlarge"}),
        node("plain", "2"),  # no label: an unknown type, ""
        node("odd", "2", labels={gfd: "NVIDIA A10G (24 GB)"}),  # as a label value would say it
    ]
    got = {n.name: n.gpu_type for n in nodes_from_objects(nodes, [])}
    assert got == {
        "a100": "NVIDIA-A100-SXM4-80GB",
        "t4": "Tesla-T4",
        "plain": "",
        "odd": "NVIDIA-A10G-24-GB",
    }
    other = {n.name: n.gpu_type for n in nodes_from_objects(nodes, [], gpu_type_label="itype")}
    assert other == {"a100": "p4d.24xlarge", "t4": "g4dn.12xlarge", "plain": "", "odd": ""}


def test_a_jobs_allowed_gpu_types_reach_the_policy() -> None:
    body = {
        "metadata": {"name": "j", "namespace": "ns", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"template": TEMPLATE, "gpuTypes": ["Tesla-T4", "NVIDIA-L4"]},
    }
    (record,) = job_records([body])
    assert job_info(record, NOW).gpu_types == ("Tesla-T4", "NVIDIA-L4")
