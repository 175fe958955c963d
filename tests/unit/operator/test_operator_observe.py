"""Pod statuses -> worker states, with the reasons users see."""

from __future__ import annotations

from typing import Any

from adl.operator.observe import PodPhase, classify


def pod(phase: str, state: dict[str, Any] | None = None, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "j-g3-1", "labels": {"adl.dev/group": "3", "adl.dev/node-index": "1"}},
        "spec": {"containers": [{"name": "trainer"}], "nodeName": "n1"},
        "status": {
            "phase": phase,
            **status,
            "containerStatuses": [{"name": "trainer", "state": state or {}}],
        },
    }


def test_running_and_ready() -> None:
    st = classify(pod("Running", {"running": {}}, conditions=[{"type": "Ready", "status": "True"}]))
    assert (st.phase, st.ready, st.group, st.index, st.node) == (PodPhase.RUNNING, True, 3, 1, "n1")


def test_exit_codes() -> None:
    assert classify(pod("Succeeded", {"terminated": {"exitCode": 0}})).phase == PodPhase.SUCCEEDED
    stopped = classify(pod("Failed", {"terminated": {"exitCode": 143}}))
    assert stopped.phase == PodPhase.STOPPED
    oom = classify(pod("Failed", {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}))
    assert (oom.phase, oom.reason, oom.exit_code) == (PodPhase.FAILED, "OOMKilled", 137)
    assert "137" in oom.message


def test_eviction_without_container_state() -> None:
    st = classify(pod("Failed", reason="Evicted", message="node low on memory"))
    assert (st.phase, st.reason, st.message) == (PodPhase.FAILED, "Evicted", "node low on memory")


def test_image_pull_errors_are_failures_not_pending() -> None:
    st = classify(pod("Pending", {"waiting": {"reason": "ImagePullBackOff", "message": "nope"}}))
    assert (st.phase, st.reason) == (PodPhase.FAILED, "ImagePullError")
    assert "nope" in st.message
    cfg = classify(pod("Pending", {"waiting": {"reason": "CreateContainerConfigError"}}))
    assert cfg.reason == "ContainerConfigError"


def test_unschedulable_keeps_its_reason_and_start_time() -> None:
    cond = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "0/3 nodes: insufficient nvidia.com/gpu",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    st = classify(pod("Pending", conditions=[cond]))
    assert (st.phase, st.reason) == (PodPhase.PENDING, "Unschedulable")
    assert "insufficient" in st.message and st.since is not None and st.since.year == 2026


def test_plain_pending_and_deleting() -> None:
    p = pod("Pending", {"waiting": {"reason": "ContainerCreating"}})
    p["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    st = classify(p)
    assert (st.phase, st.reason, st.deleting) == (PodPhase.PENDING, "ContainerCreating", True)


def test_pods_become_replicas_of_the_current_group() -> None:
    from adl.controller.lifecycle import ReplicaPhase
    from adl.operator.observe import PodState, observed_workers

    pods = [
        PodState("j-g2-0", 2, 0, PodPhase.RUNNING, ready=True),
        PodState("j-g2-1", 2, 1, PodPhase.FAILED, reason="OOMKilled", exit_code=137),
        PodState("j-g1-0", 1, 0, PodPhase.RUNNING, deleting=True),
    ]
    obs = observed_workers(pods, group=2, allocation=["a", "a", "b", "b", "b"])
    current = obs.of_group(2)
    assert [r.rank for r in current] == [0, 1, 2, 3, 4]
    assert [r.phase for r in current] == [ReplicaPhase.RUNNING] * 2 + [ReplicaPhase.FAILED] * 3
    assert current[3].reason == "OOMKilled" and current[3].exit_code == 137
    (old,) = obs.others(2)
    assert old.alive and old.terminating


def test_pod_indices_for_missing_ranks() -> None:
    from adl.operator.observe import pod_indices

    alloc = ["a", "a", "b", "c", "c"]
    assert pod_indices(alloc, range(5)) == [0, 1, 2]
    assert pod_indices(alloc, [2]) == [1]
    assert pod_indices(alloc, [1, 4]) == [0, 2]


def test_a_deleted_pod_says_when_its_stop_is_due() -> None:
    body = pod("Running", {"running": {}})
    body["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    st = classify(body)
    assert st.deleting and st.stop_due is not None and st.stop_due.minute == 1
    assert classify(pod("Running", {"running": {}})).stop_due is None


def test_a_node_is_down_since_its_ready_condition_left_true() -> None:
    """Issue 36: the lost-node bound counts from the Ready condition's transition (False, or
    Unknown once the node lifecycle controller stopped hearing from the kubelet)."""
    from datetime import UTC, datetime

    from adl.operator.observe import node_down_since, observed_workers

    def node(status: str) -> dict[str, Any]:
        ready = {"type": "Ready", "status": status, "lastTransitionTime": "2024-05-01T12:00:00Z"}
        return {"status": {"conditions": [ready]}}

    since = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    assert node_down_since(node("Unknown")) == since
    assert node_down_since(node("False")) == since
    assert node_down_since(node("True")) is None
    assert node_down_since({"status": {}}) is None  # nothing reported: taken as Ready
    observed = observed_workers(
        [classify(pod("Running", {"running": {}}))], 3, ["n0", "n1"], {"n1": since}
    )
    assert [r.node for r in observed.replicas] == ["n1"]
    assert observed.nodes_down == {"n1": since}
