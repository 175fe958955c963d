"""The lifecycle state machine: a table over (state x event), then the properties a backend
relies on (fixed point, no overlapping groups, backoff, conditions)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from adl.controller.actions import Action, CreateGroup, DeleteGroup, EmitEvent, SetStatus
from adl.controller.lifecycle import (
    ObservedWorkers,
    ReplicaPhase,
    ReplicaState,
    Timing,
    step,
    teardown,
)
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, Hints, Phase, RestartCause

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
JOB = "ns/train"
TWO = ["n0", "n0"]
P, R, S, X, F = (
    ReplicaPhase.PENDING,
    ReplicaPhase.RUNNING,
    ReplicaPhase.SUCCEEDED,
    ReplicaPhase.STOPPED,
    ReplicaPhase.FAILED,
)


def spec(**kw: Any) -> AdaptiveJobSpec:
    base: dict[str, Any] = {
        "template": {"spec": {"containers": [{"name": "t", "command": ["python", "t.py"]}]}},
        "max_restarts": 2,
        "termination_grace_period_seconds": 30,
    }
    return AdaptiveJobSpec(**(base | kw))


def status(phase: Phase, group: int = 1, allocation: list[str] | None = None, **kw: Any):
    alloc = TWO if allocation is None else allocation
    return AdaptiveJobStatus(phase=phase, group=group, allocation=alloc, replicas=len(alloc), **kw)


def obs(group: int, *phases: ReplicaPhase, terminating: bool = False) -> ObservedWorkers:
    return ObservedWorkers(
        tuple(
            ReplicaState(
                group,
                rank,
                ph,
                exit_code={S: 0, X: 143, F: 1}.get(ph),
                reason="WorkerFailed" if ph == F else "",
                message=f"rank {rank} exited 1" if ph == F else "",
                terminating=terminating,
            )
            for rank, ph in enumerate(phases)
        )
    )


def both(a: ObservedWorkers, b: ObservedWorkers) -> ObservedWorkers:
    return ObservedWorkers(a.replicas + b.replicas)


NONE = ObservedWorkers()


@dataclass
class Row:
    name: str
    status: AdaptiveJobStatus
    observed: ObservedWorkers
    desired: list[str] | None
    phase: Phase
    kinds: list[str]  # action kinds after SetStatus, in order (events included)
    restarts: dict[RestartCause, int] = field(default_factory=dict)
    spec: dict[str, Any] = field(default_factory=dict)
    group: int | None = None
    reason: str | None = None
    now: datetime = NOW


ROWS = [
    # ---- Pending
    Row("pending/no round yet", status(Phase.PENDING, 0, []), NONE, None, Phase.PENDING, []),
    Row(
        "pending/allocation arrives",
        status(Phase.PENDING, 0, []),
        NONE,
        TWO,
        Phase.STARTING,
        ["EmitEvent", "CreateGroup"],
        group=1,
    ),
    Row(
        "pending/too few replicas for minReplicas",
        status(Phase.PENDING, 0, []),
        NONE,
        ["n0"],
        Phase.PENDING,
        [],
        spec={"min_replicas": 2},
        reason="WaitingForAllocation",
    ),
    Row(
        "pending/older group still alive is stopped first",
        status(Phase.PENDING, 1, []),
        obs(1, R, R),
        TWO,
        Phase.PENDING,
        ["DeleteGroup"],
        group=1,
    ),
    # ---- Starting
    Row(
        "starting/all running",
        status(Phase.STARTING),
        obs(1, R, R),
        TWO,
        Phase.RUNNING,
        ["EmitEvent"],
    ),
    Row(
        "starting/one still pending", status(Phase.STARTING), obs(1, R, P), TWO, Phase.STARTING, []
    ),
    Row(
        "starting/backend crashed mid-launch: missing rank created",
        status(Phase.STARTING),
        obs(1, R),
        TWO,
        Phase.STARTING,
        ["CreateGroup"],
    ),
    Row(
        "starting/replica crashed",
        status(Phase.STARTING),
        obs(1, R, F),
        TWO,
        Phase.RESTARTING,
        ["EmitEvent", "DeleteGroup"],
        restarts={RestartCause.FAILURE: 1},
        reason="WorkerFailed",
    ),
    Row(
        "starting/resize before running",
        status(Phase.STARTING),
        obs(1, R, P),
        ["n0"],
        Phase.RESTARTING,
        ["EmitEvent", "DeleteGroup"],
        restarts={RestartCause.RESIZE: 1},
    ),
    # ---- Running
    Row("running/steady", status(Phase.RUNNING), obs(1, R, R), TWO, Phase.RUNNING, []),
    Row(
        "running/same placement in another order is not a resize",
        status(Phase.RUNNING, allocation=["a", "b", "a"]),
        obs(1, R, R, R),
        ["b", "a", "a"],
        Phase.RUNNING,
        [],
    ),
    Row(
        "running/replica crashed",
        status(Phase.RUNNING),
        obs(1, R, F),
        TWO,
        Phase.RESTARTING,
        ["EmitEvent", "DeleteGroup"],
        restarts={RestartCause.FAILURE: 1},
    ),
    Row(
        "running/crash past maxRestarts fails the job",
        status(Phase.RUNNING, restarts={RestartCause.FAILURE: 2}),
        obs(1, R, F),
        TWO,
        Phase.FAILED,
        ["EmitEvent", "DeleteGroup"],
        restarts={RestartCause.FAILURE: 3},
        reason="WorkerFailed",
    ),
    Row(
        "running/all finished",
        status(Phase.RUNNING),
        obs(1, S, S),
        TWO,
        Phase.SUCCEEDED,
        ["EmitEvent"],
    ),
    Row(
        "running/rank 0 finished first",
        status(Phase.RUNNING),
        obs(1, S, R),
        TWO,
        Phase.RUNNING,
        [],
    ),
    Row(
        "running/scheduler resizes",
        status(Phase.RUNNING, restarts={RestartCause.FAILURE: 1}),
        obs(1, R, R),
        ["n0", "n0", "n1"],
        Phase.RESTARTING,
        ["EmitEvent", "DeleteGroup"],
        restarts={RestartCause.FAILURE: 1, RestartCause.RESIZE: 1},
        reason="Resizing",
    ),
    Row(
        "running/scheduler takes every GPU: preemption",
        status(Phase.RUNNING),
        obs(1, R, R),
        [],
        Phase.RESTARTING,
        ["EmitEvent", "DeleteGroup"],
        restarts={RestartCause.PREEMPTION: 1},
        reason="Preempted",
    ),
    Row(
        "running/worker stopped from outside: preemption",
        status(Phase.RUNNING),
        obs(1, R, X),
        TWO,
        Phase.RESTARTING,
        ["EmitEvent", "DeleteGroup"],
        restarts={RestartCause.PREEMPTION: 1},
    ),
    Row(
        "running/worker vanished: preemption",
        status(Phase.RUNNING),
        obs(1, R),
        TWO,
        Phase.RESTARTING,
        ["EmitEvent", "DeleteGroup"],
        restarts={RestartCause.PREEMPTION: 1},
    ),
    Row(
        "running/suspend stops without counting a restart",
        status(Phase.RUNNING),
        obs(1, R, R),
        TWO,
        Phase.SUSPENDED,
        ["DeleteGroup", "EmitEvent"],
        spec={"suspend": True},
    ),
    # ---- Restarting
    Row(
        "restarting/workers still checkpointing",
        status(Phase.RESTARTING, reason="Resizing"),
        obs(1, R, R, terminating=True),
        ["n0"],
        Phase.RESTARTING,
        [],
    ),
    Row(
        "restarting/stop not yet requested (backend crashed) is re-issued",
        status(Phase.RESTARTING, reason="Resizing"),
        obs(1, R, X),
        ["n0"],
        Phase.RESTARTING,
        ["DeleteGroup"],
    ),
    Row(
        "restarting/stopped: next group at the new size",
        status(Phase.RESTARTING, reason="Resizing"),
        obs(1, X, X),
        ["n0"],
        Phase.STARTING,
        ["EmitEvent", "CreateGroup"],
        group=2,
    ),
    Row(
        "restarting/backing off after a failure",
        status(Phase.RESTARTING, restart_after=NOW + timedelta(seconds=5)),
        obs(1, X, F),
        TWO,
        Phase.RESTARTING,
        [],
        reason="BackingOff",
        group=1,
    ),
    Row(
        "restarting/backoff elapsed",
        status(Phase.RESTARTING, restart_after=NOW - timedelta(seconds=1)),
        obs(1, X, F),
        TWO,
        Phase.STARTING,
        ["EmitEvent", "CreateGroup"],
        group=2,
    ),
    Row(
        "restarting/finished while being stopped",
        status(Phase.RESTARTING),
        obs(1, S, X),
        ["n0"],
        Phase.SUCCEEDED,
        ["EmitEvent"],
    ),
    Row(
        "restarting/no GPUs left",
        status(Phase.RESTARTING),
        obs(1, X, X),
        [],
        Phase.PENDING,
        ["EmitEvent"],
        reason="WaitingForAllocation",
    ),
    # ---- Suspended
    Row(
        "suspended/stays suspended",
        status(Phase.SUSPENDED, allocation=[], reason="Suspended", message="spec.suspend is true"),
        obs(1, X, X),
        TWO,
        Phase.SUSPENDED,
        [],
        spec={"suspend": True},
    ),
    Row(
        "suspended/resume starts a new group",
        status(Phase.SUSPENDED, allocation=[]),
        obs(1, X, X),
        TWO,
        Phase.STARTING,
        ["EmitEvent", "EmitEvent", "CreateGroup"],
        group=2,
    ),
    # ---- finished
    Row(
        "succeeded/is final; stragglers stopped",
        status(Phase.SUCCEEDED, completion_time=NOW),
        obs(1, S, R),
        ["n0"],
        Phase.SUCCEEDED,
        ["DeleteGroup"],
    ),
    Row(
        "failed/is final",
        status(Phase.FAILED, completion_time=NOW),
        obs(1, F, X),
        TWO,
        Phase.FAILED,
        [],
    ),
]


def run(row: Row) -> tuple[AdaptiveJobStatus, list[Action]]:
    actions = step(JOB, spec(**row.spec), row.status, row.observed, row.desired, row.now)
    sets = [a for a in actions if isinstance(a, SetStatus)]
    assert len(sets) <= 1
    if sets:
        assert actions[0] is sets[0], "SetStatus must come first"
    return (sets[0].status if sets else row.status), actions


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_transition_table(row: Row) -> None:
    new, actions = run(row)
    assert new.phase == row.phase, new.message
    kinds = [type(a).__name__ for a in actions if not isinstance(a, SetStatus)]
    assert kinds == row.kinds
    assert {k: v for k, v in new.restarts.items() if v} == row.restarts
    if row.group is not None:
        assert new.group == row.group
    if row.reason is not None:
        assert new.reason == row.reason


def test_failure_past_max_restarts_says_why() -> None:
    st = status(Phase.RUNNING, restarts={RestartCause.FAILURE: 2})
    new, actions = run(Row("", st, obs(1, R, F), TWO, Phase.FAILED, []))
    assert new.reason == "WorkerFailed"
    assert "rank 1 exited 1" in new.message and "maxRestarts=2" in new.message
    failed = next(c for c in new.conditions if c.type == "Failed")
    assert failed.status == "True" and failed.reason == "WorkerFailed"
    assert new.completion_time == NOW
    warn = [a for a in actions if isinstance(a, EmitEvent)]
    assert warn and warn[0].type == "Warning"
    # a failed job holds no GPUs (metrics and `adl ls` read this), though its pods still stop
    assert (new.allocation, new.replicas, new.ready_replicas) == ([], 0, 0)
    assert any(isinstance(a, DeleteGroup) for a in actions)


def test_backoff_grows_exponentially_and_is_capped() -> None:
    timing = Timing(backoff_base_s=10, backoff_max_s=60)
    assert [timing.backoff_s(n) for n in range(1, 6)] == [10, 20, 40, 60, 60]
    sp = spec(max_restarts=10)
    waits = []
    for failures in range(0, 4):
        st = status(Phase.RUNNING, restarts={RestartCause.FAILURE: failures})
        out = step(JOB, sp, st, obs(1, R, F), TWO, NOW, timing)
        new = out[0].status  # type: ignore[union-attr]
        assert new.restart_after is not None
        waits.append((new.restart_after - NOW).total_seconds())
    assert waits == [10, 20, 40, 60]


def test_resize_sets_no_backoff() -> None:
    new, _ = run(Row("", status(Phase.RUNNING), obs(1, R, R), ["n0"], Phase.RESTARTING, []))
    assert new.restart_after is None
    assert new.restart_count(RestartCause.FAILURE) == 0


def test_pending_timeout_is_a_failure_with_the_backend_reason() -> None:
    stuck = ReplicaState(
        1,
        1,
        P,
        reason="Unschedulable",
        message="0/3 nodes have GPUs",
        since=NOW - timedelta(seconds=301),
    )
    observed = ObservedWorkers((ReplicaState(1, 0, R), stuck))
    out = step(JOB, spec(), status(Phase.STARTING), observed, TWO, NOW)
    new = out[0].status  # type: ignore[union-attr]
    assert new.phase == Phase.RESTARTING and new.reason == "Unschedulable"
    assert "0/3 nodes have GPUs" in new.message
    assert new.restart_count(RestartCause.FAILURE) == 1
    # not yet timed out: still starting, reason surfaced
    fresh = ReplicaState(1, 1, P, reason="Unschedulable", message="m", since=NOW)
    out = step(JOB, spec(), status(Phase.STARTING), ObservedWorkers((fresh,)), TWO, NOW)
    new = out[0].status  # type: ignore[union-attr]
    assert new.phase == Phase.STARTING and new.reason == "Unschedulable"


def _drive(sp, st, observed, desired, now=NOW):
    """Apply step's SetStatus and return (status, non-status actions)."""
    actions = step(JOB, sp, st, observed, desired, now)
    for a in actions:
        if isinstance(a, SetStatus):
            st = a.status
    return st, [a for a in actions if not isinstance(a, SetStatus)]


def test_fixed_point_after_executing_actions() -> None:
    sp = spec()
    st, acts = _drive(sp, AdaptiveJobStatus(), NONE, TWO)
    create = next(a for a in acts if isinstance(a, CreateGroup))
    running = obs(create.group, R, R)
    st, _ = _drive(sp, st, running, TWO)
    assert st.phase == Phase.RUNNING
    again = step(JOB, sp, st, running, TWO, NOW + timedelta(seconds=5))
    assert again == []


def test_full_resize_cycle_never_overlaps_groups() -> None:
    """Pending -> Starting -> Running -> resize -> Restarting -> Starting(2) -> Running."""
    sp = spec()
    st, acts = _drive(sp, AdaptiveJobStatus(), NONE, TWO)
    assert [a.ranks for a in acts if isinstance(a, CreateGroup)] == [(0, 1)]
    st, _ = _drive(sp, st, obs(1, R, R), TWO)
    st, acts = _drive(sp, st, obs(1, R, R), ["n0", "n1", "n1"])
    assert any(isinstance(a, DeleteGroup) and a.group == 1 and a.grace_s == 30 for a in acts)
    # still alive (checkpointing): must not start group 2
    st, acts = _drive(sp, st, obs(1, R, R, terminating=True), ["n0", "n1", "n1"])
    assert not any(isinstance(a, CreateGroup) for a in acts)
    st, acts = _drive(sp, st, obs(1, X, X), ["n0", "n1", "n1"])
    (create,) = [a for a in acts if isinstance(a, CreateGroup)]
    assert create.group == 2 and create.allocation == ("n0", "n1", "n1")
    assert create.ranks == (0, 1, 2)
    assert st.phase == Phase.STARTING and st.replicas == 3
    st, _ = _drive(sp, st, both(obs(1, X, X), obs(2, R, R, R)), ["n0", "n1", "n1"])
    assert st.phase == Phase.RUNNING and st.ready_replicas == 3
    assert st.restarts == {RestartCause.RESIZE: 1}


def test_a_start_that_failed_but_holds_its_gpus_is_deleted_before_the_next_group() -> None:
    """A pod that never started (ImagePullBackOff) still holds its node's GPUs and may start
    later: the failure restart deletes it, and the next group waits until it is gone."""
    held = ReplicaState(1, 1, F, reason="ImagePullError", message="pull failed", holds=True)
    sp = spec()
    st, acts = _drive(sp, status(Phase.STARTING), ObservedWorkers((held,)), TWO)
    assert st.phase == Phase.RESTARTING and st.restart_count(RestartCause.FAILURE) == 1
    assert DeleteGroup(JOB, 1, 30) in acts
    later = NOW + timedelta(hours=1)  # past the backoff
    deleting = ObservedWorkers((ReplicaState(1, 1, F, holds=True, terminating=True),))
    st, acts = _drive(sp, st, deleting, TWO, later)
    assert not any(isinstance(a, CreateGroup) for a in acts)
    st, acts = _drive(sp, st, NONE, TWO, later)
    assert [a.group for a in acts if isinstance(a, CreateGroup)] == [2]
    # the same pod of a job that has failed for good is deleted too
    st = status(Phase.STARTING, restarts={RestartCause.FAILURE: 2})
    st, acts = _drive(sp, st, ObservedWorkers((held,)), TWO)
    assert st.phase == Phase.FAILED and DeleteGroup(JOB, 1, 30) in acts
    st, acts = _drive(sp, st, ObservedWorkers((held,)), TWO)
    assert DeleteGroup(JOB, 1, 30) in acts


def test_finishing_since_marks_when_the_job_reported_its_work_done() -> None:
    done = Hints(init_batch_size=8, progress=10.0, total_progress=10.0)
    st = status(Phase.RUNNING, hints=done)
    st, _ = _drive(spec(), st, obs(1, R, R), TWO)
    assert st.finishing_since == NOW
    st, _ = _drive(spec(), st, obs(1, R, R), TWO, NOW + timedelta(minutes=5))
    assert st.finishing_since == NOW  # kept, not moved
    st.hints = done.model_copy(update={"total_progress": 20.0})  # a longer run declared
    st, _ = _drive(spec(), st, obs(1, R, R), TWO)
    assert st.finishing_since is None


def test_stale_group_alive_is_deleted_even_when_running() -> None:
    observed = both(obs(1, R), obs(2, R, R))
    out = step(JOB, spec(), status(Phase.RUNNING, group=2), observed, TWO, NOW)
    assert DeleteGroup(JOB, 1, 30) in out


def test_conditions_track_phase_with_stable_transition_times() -> None:
    sp = spec()
    st, _ = _drive(sp, AdaptiveJobStatus(), NONE, TWO)
    st, _ = _drive(sp, st, obs(1, R, R), TWO, NOW + timedelta(seconds=1))
    cond = {c.type: c for c in st.conditions}
    assert set(cond) == {"Complete", "Failed", "Running", "Scheduled", "Suspended"}
    assert cond["Running"].status == "True"
    assert cond["Scheduled"].status == "True"
    since = cond["Running"].last_transition_time
    assert since == NOW + timedelta(seconds=1)
    # a later step with a new hints report keeps the transition time
    st = st.model_copy(update={"hints": Hints(init_batch_size=32, batch_size=128, goodput=3.5)})
    st, _ = _drive(sp, st, obs(1, R, R), TWO, NOW + timedelta(seconds=9))
    cond = {c.type: c for c in st.conditions}
    assert cond["Running"].last_transition_time == since
    assert st.batch_size == 128 and st.goodput == 3.5


def test_start_time_kept_across_restarts() -> None:
    sp = spec()
    st, _ = _drive(sp, AdaptiveJobStatus(), NONE, TWO)
    assert st.start_time == NOW
    st, _ = _drive(sp, st, obs(1, R, R), ["n0"], NOW + timedelta(seconds=50))
    st, _ = _drive(sp, st, obs(1, X, X), ["n0"], NOW + timedelta(seconds=60))
    assert st.group == 2 and st.start_time == NOW


def test_teardown_stops_every_live_group_once() -> None:
    observed = both(obs(1, X, R), obs(2, R, R, terminating=True))
    assert teardown(JOB, spec(), observed) == [DeleteGroup(JOB, 1, 30)]


@pytest.mark.parametrize(
    ("code", "phase", "reason"),
    [(0, S, ""), (143, X, "Stopped"), (1, F, "WorkerFailed"), (-9, F, "KilledBySignal9")],
)
def test_exit_codes(code: int, phase: ReplicaPhase, reason: str) -> None:
    r = ReplicaState.exited(3, 1, code)
    assert (r.phase, r.reason, r.exit_code, r.alive) == (phase, reason, code, False)


def test_a_replica_that_outlives_its_stop_by_far_is_reported_once() -> None:
    """A pod on a node that went down stays Terminating: the next group must not start beside
    it, but the job should say why it waits."""
    due = NOW - timedelta(seconds=30)
    stuck = ObservedWorkers((ReplicaState(1, 0, R, terminating=True, stop_due=due),))
    st = status(Phase.RESTARTING, allocation=["n0"])
    st, acts = _drive(spec(), st, stuck, ["n1"])
    assert st.reason != "WaitingForStop" and not acts  # still within its grace
    later = NOW + timedelta(minutes=5)
    st, acts = _drive(spec(), st, stuck, ["n1"], later)
    assert st.phase == Phase.RESTARTING and st.reason == "WaitingForStop"
    assert "group 1 rank 0 should have stopped by" in st.message
    assert [a.reason for a in acts if isinstance(a, EmitEvent)] == ["WaitingForStop"]
    assert not any(isinstance(a, CreateGroup) for a in acts)
    again = step(JOB, spec(), st, stuck, ["n1"], later + timedelta(minutes=5))
    assert again == []  # a fixed point: no status churn, no second event
    st, acts = _drive(spec(), st, NONE, ["n1"], later)
    assert [a.group for a in acts if isinstance(a, CreateGroup)] == [2]


def test_a_job_its_quota_manager_admits_none_of_waits_for_admission_and_says_so() -> None:
    """While Kueue admits none of a job, the job waits with Kueue's reason, not for GPUs; a
    running job so evicted is stopped like a preempted one (its round answer is empty)."""
    why = "waiting for admission in queue team-a: 8 GPUs of 16 in use"
    actions = step(JOB, spec(), status(Phase.PENDING, 0, []), NONE, [], NOW, quota_wait=why)
    (set_status,) = [a for a in actions if isinstance(a, SetStatus)]
    assert (set_status.status.phase, set_status.status.reason) == (
        Phase.PENDING,
        "WaitingForAdmission",
    )
    assert set_status.status.message == why
    assert not [a for a in actions if isinstance(a, CreateGroup)]
    assert set_status.status.admitted is None  # no count given: none shown
    running = status(Phase.RUNNING, 1, TWO)
    evicted = step(
        JOB, spec(), running, obs(1, R, R), [], NOW, quota_wait="evicted by Kueue", admitted=0
    )
    assert any(isinstance(a, DeleteGroup) for a in evicted)
    (said,) = [a.status for a in evicted if isinstance(a, SetStatus)]
    assert said.admitted == 0  # the status says Kueue admits none now


def test_the_status_shows_what_the_quota_manager_admits() -> None:
    running = status(Phase.RUNNING, 1, TWO)
    (said,) = [
        a.status
        for a in step(JOB, spec(), running, obs(1, R, R), TWO, NOW, admitted=3)
        if isinstance(a, SetStatus)
    ]
    assert said.admitted == 3 and said.phase == Phase.RUNNING
    # a fixed point once written: no status churn on the next step
    assert step(JOB, spec(), said, obs(1, R, R), TWO, NOW, admitted=3) == []
