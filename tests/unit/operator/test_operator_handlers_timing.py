"""When the per-job timer reconciles although no event arrived (pure decision)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from adl.operator.handlers import time_based_work_due

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def body(**status: object) -> dict[str, object]:
    return {"metadata": {"name": "j"}, "status": status}


def test_backoff_end_is_due_only_once_passed() -> None:
    later = (NOW + timedelta(seconds=5)).isoformat().replace("+00:00", "Z")
    earlier = (NOW - timedelta(seconds=1)).isoformat().replace("+00:00", "Z")
    assert not time_based_work_due(body(phase="Restarting", restartAfter=later), 0.0, NOW, 10)
    assert time_based_work_due(body(phase="Restarting", restartAfter=earlier), 0.0, NOW, 10)


def test_starting_job_is_rechecked_after_the_interval() -> None:
    starting = body(phase="Starting")
    assert time_based_work_due(starting, None, NOW, 10)  # never looked at by this operator
    assert not time_based_work_due(starting, 3.0, NOW, 10)
    assert time_based_work_due(starting, 10.0, NOW, 10)


def test_settled_jobs_are_left_alone() -> None:
    for phase in ("Running", "Pending", "Succeeded", "Failed", "Suspended"):
        assert not time_based_work_due(body(phase=phase), None, NOW, 10), phase
    assert not time_based_work_due({"metadata": {"name": "j"}}, None, NOW, 10)


def test_a_job_waiting_for_its_old_group_to_stop_is_rechecked_after_the_interval() -> None:
    """Restarting with no backoff pending: waiting for the old group's pods to go. A pod on a
    node that went down never goes, and no event says so: only a recheck reports
    WaitingForStop on time."""
    restarting = body(phase="Restarting", reason="Resizing")
    assert time_based_work_due(restarting, None, NOW, 10)
    assert not time_based_work_due(restarting, 3.0, NOW, 10)
    assert time_based_work_due(restarting, 10.0, NOW, 10)


def test_a_job_waiting_for_kueue_is_looked_at_again_for_its_queues_usage() -> None:
    waiting = body(phase="Pending", reason="WaitingForAdmission")
    assert time_based_work_due(waiting, 10.0, NOW, 10)
    assert not time_based_work_due(waiting, 3.0, NOW, 10)
    assert not time_based_work_due(body(phase="Pending"), 10.0, NOW, 10)  # waits for a round
