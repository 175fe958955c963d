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
