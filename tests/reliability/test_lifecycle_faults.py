"""Faults in the stop path of the pure lifecycle: a group that fails its checkpoint while being
stopped, and a finished job that is stopped on its way out."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from adl.controller.actions import Action, CreateGroup, EmitEvent, SetStatus
from adl.controller.lifecycle import ObservedWorkers, ReplicaState, step
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, Hints, Phase, RestartCause

JOB = "default/j"
NOW = datetime(2024, 1, 1, tzinfo=UTC)
TWO = ["n0", "n0"]
THREE = ["n0", "n0", "n0"]


def _spec(**kw: Any) -> AdaptiveJobSpec:
    base: dict[str, Any] = {
        "template": {"spec": {"containers": [{"name": "t", "command": ["python", "t.py"]}]}},
        "max_restarts": 2,
        "termination_grace_period_seconds": 30,
    }
    return AdaptiveJobSpec(**(base | kw))


def _running(group: int = 1, **kw: Any) -> AdaptiveJobStatus:
    return AdaptiveJobStatus(
        phase=Phase.RUNNING, group=group, allocation=TWO, replicas=2, ready_replicas=2, **kw
    )


def _exited(group: int, *codes: int) -> ObservedWorkers:
    return ObservedWorkers(tuple(ReplicaState.exited(group, r, c) for r, c in enumerate(codes)))


def _alive(group: int, n: int, terminating: bool = False) -> ObservedWorkers:
    from adl.controller.lifecycle import ReplicaPhase

    return ObservedWorkers(
        tuple(
            ReplicaState(group, r, ReplicaPhase.RUNNING, terminating=terminating) for r in range(n)
        )
    )


def _drive(
    sp: AdaptiveJobSpec,
    st: AdaptiveJobStatus,
    observed: ObservedWorkers,
    desired: list[str] | None,
    now: datetime = NOW,
) -> tuple[AdaptiveJobStatus, list[Action]]:
    actions = step(JOB, sp, st, observed, desired, now)
    for a in actions:
        if isinstance(a, SetStatus):
            st = a.status
    return st, [a for a in actions if not isinstance(a, SetStatus)]


def _warnings(actions: list[Action], reason: str) -> list[EmitEvent]:
    return [
        a
        for a in actions
        if isinstance(a, EmitEvent) and a.type == "Warning" and a.reason == reason
    ]


def _condition(st: AdaptiveJobStatus, kind: str) -> tuple[str, str, str] | None:
    c = next((c for c in st.conditions if c.type == kind), None)
    return None if c is None else (c.status, c.reason, c.message)


def test_a_resize_whose_checkpoint_fails_is_a_warning_and_a_condition() -> None:
    """Rank 0 exits 1 (ENOSPC while saving) during a resize stop: not a silent resize."""
    sp = _spec()
    st, acts = _drive(sp, _running(), _alive(1, 2), THREE)
    assert st.phase == Phase.RESTARTING and st.restarts == {RestartCause.RESIZE: 1}
    st, acts = _drive(sp, st, _alive(1, 2, terminating=True), THREE)
    assert not _warnings(acts, "CheckpointFailed")
    st, acts = _drive(sp, st, _exited(1, 1, 143), THREE)
    (warning,) = _warnings(acts, "CheckpointFailed")
    assert "group 1" in warning.message and "rank 0" in warning.message
    assert "last good checkpoint" in warning.message
    cond = _condition(st, "Checkpointed")
    assert cond is not None and cond[0] == "False" and cond[1] == "CheckpointFailed"
    assert "rank 0 exited 1" in cond[2]
    # the next group still starts (it resumes from the previous checkpoint, which is kept)
    assert [a.group for a in acts if isinstance(a, CreateGroup)] == [2]
    # level-triggered: the same observation again warns no more
    st2, acts2 = _drive(sp, st, _exited(1, 1, 143), THREE)
    assert not _warnings(acts2, "CheckpointFailed")
    # the condition stays until a group is stopped cleanly
    st3, _ = _drive(sp, st2, _alive(2, 3), THREE)
    assert _condition(st3, "Checkpointed") == cond


def test_the_failed_checkpoint_is_reported_while_the_start_waits_only_once() -> None:
    """No allocation after the stop: every step sees the failed group again, one warning."""
    sp = _spec()
    st, _ = _drive(sp, _running(), _alive(1, 2), THREE)
    seen = []
    for i in range(3):
        st, acts = _drive(sp, st, _exited(1, 1, 143), [], NOW + timedelta(seconds=i))
        seen += _warnings(acts, "CheckpointFailed")
    assert len(seen) == 1 and st.phase == Phase.PENDING


def test_a_clean_stop_after_a_failed_one_clears_the_condition() -> None:
    sp = _spec()
    st, _ = _drive(sp, _running(), _alive(1, 2), THREE)
    st, _ = _drive(sp, st, _exited(1, 1, 143), THREE)
    st, _ = _drive(sp, st, _alive(2, 3), THREE)
    st, _ = _drive(sp, st, _alive(2, 3), TWO)  # resize again
    st, acts = _drive(sp, st, _exited(2, 143, 143, 143), TWO)
    cond = _condition(st, "Checkpointed")
    assert cond is not None and cond[0] == "True" and cond[1] == "Stopped"
    assert not _warnings(acts, "CheckpointFailed")


def test_a_suspend_whose_checkpoint_fails_is_reported() -> None:
    sp = _spec(suspend=True)
    st, _ = _drive(sp, _running(), _alive(1, 2), TWO)
    assert st.phase == Phase.SUSPENDED
    st, acts = _drive(sp, st, _exited(1, 143, 1), TWO)
    (warning,) = _warnings(acts, "CheckpointFailed")
    assert "rank 1" in warning.message and "suspend" in warning.message
    st, acts = _drive(sp, st, _exited(1, 143, 1), TWO)
    assert not _warnings(acts, "CheckpointFailed")


def test_a_stop_killed_past_its_grace_is_a_failed_checkpoint() -> None:
    """SIGKILL after the grace period: the save did not finish either."""
    sp = _spec()
    st, _ = _drive(sp, _running(), _alive(1, 2), THREE)
    st, acts = _drive(sp, st, _exited(1, -9, -9), THREE)
    (warning,) = _warnings(acts, "CheckpointFailed")
    assert "signal 9" in warning.message


def test_a_clean_resize_records_no_failure() -> None:
    sp = _spec()
    st, _ = _drive(sp, _running(), _alive(1, 2), THREE)
    st, acts = _drive(sp, st, _exited(1, 143, 143), THREE)
    assert not _warnings(acts, "CheckpointFailed")
    cond = _condition(st, "Checkpointed")
    assert cond is None or cond[0] == "True"


DONE = Hints(init_batch_size=8, progress=100.0, total_progress=100.0)


def test_a_finished_job_stopped_while_exiting_succeeds_instead_of_restarting() -> None:
    """Work done reported, then every replica is SIGTERMed on its way out (exit 143): the job
    is finished, a new group would only load the final checkpoint and exit."""
    sp = _spec()
    st, acts = _drive(sp, _running(hints=DONE), _exited(1, 143, 143), TWO)
    assert st.phase == Phase.SUCCEEDED, (st.phase, st.reason)
    assert not any(isinstance(a, CreateGroup) for a in acts)
    assert st.restarts == {}


def test_a_finished_job_stopped_by_a_resize_succeeds_when_its_group_exits() -> None:
    sp = _spec()
    st, _ = _drive(sp, _running(hints=DONE), _alive(1, 2), THREE)
    # (a finishing job is pinned by the round; a resize can still come from outside it)
    st, acts = _drive(sp, st, _exited(1, 0, 143), THREE)
    assert st.phase == Phase.SUCCEEDED
    st = _running(hints=DONE)
    st, _ = _drive(sp, st, _alive(1, 2), THREE)
    st, acts = _drive(sp, st, _exited(1, 143, 143), THREE)
    assert st.phase == Phase.SUCCEEDED, (st.phase, st.reason)
    assert not any(isinstance(a, CreateGroup) for a in acts)


def test_an_unfinished_job_stopped_from_outside_still_restarts() -> None:
    half = Hints(init_batch_size=8, progress=50.0, total_progress=100.0)
    st, _ = _drive(_spec(), _running(hints=half), _exited(1, 143, 143), TWO)
    assert st.phase == Phase.RESTARTING and st.restarts == {RestartCause.PREEMPTION: 1}


def test_a_finished_job_whose_replica_crashes_on_exit_is_not_a_success() -> None:
    st, _ = _drive(_spec(), _running(hints=DONE), _exited(1, 1, 143), TWO)
    assert st.phase == Phase.RESTARTING and st.restarts == {RestartCause.FAILURE: 1}


def _events(actions: list[Action]) -> list[EmitEvent]:
    return [a for a in actions if isinstance(a, EmitEvent)]


def test_a_rank_stopped_while_still_importing_had_nothing_to_checkpoint() -> None:
    """Killed by the stop's SIGTERM itself (-15: adl's handler was not installed yet, the
    worker was still importing): no "CheckpointFailed ... disk full?", but a plain note that
    there was nothing to checkpoint, once."""
    sp = _spec()
    st, _ = _drive(sp, _running(), _alive(1, 2), THREE)
    st, acts = _drive(sp, st, _exited(1, -15, -15), THREE)
    assert not _warnings(acts, "CheckpointFailed")
    assert not any("disk full" in e.message for e in _events(acts))
    (note,) = [e for e in _events(acts) if e.reason == "NothingToCheckpoint"]
    assert note.type == "Normal"
    assert "nothing to checkpoint" in note.message and "ranks 0, 1" in note.message
    cond = _condition(st, "Checkpointed")
    assert cond is not None and cond[1] == "NothingToCheckpoint"
    st, acts = _drive(sp, st, _exited(1, -15, -15), THREE)
    assert not [e for e in _events(acts) if e.reason == "NothingToCheckpoint"]


def test_a_failed_write_beside_a_rank_stopped_while_importing_is_still_reported() -> None:
    sp = _spec(suspend=True)
    st, _ = _drive(sp, _running(), _alive(1, 2), TWO)
    st, acts = _drive(sp, st, _exited(1, 1, -15), TWO)
    (warning,) = _warnings(acts, "CheckpointFailed")
    assert "rank 0 exited 1" in warning.message and "disk full?" in warning.message
