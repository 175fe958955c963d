"""Decisions the operator's handler used to make after the step, now the lifecycle's own
(issue 30: "SetStatus first, effects after, all through the backend"): a launch that waits for
an outside cause says so in the status and once in an event, the status says Starting again
once the wait is over, and the exited replicas of old groups are cleared away last."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from adl.controller.actions import CreateGroup, EmitEvent, RemoveExited, SetStatus
from adl.controller.driver import Driver
from adl.controller.job_record import JobRecord
from adl.controller.lifecycle import (
    GroupBlocked,
    ObservedWorkers,
    ReplicaPhase,
    ReplicaState,
    starting_message,
    step,
)
from adl.controller.memory import MemoryWorkerBackend
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, Phase
from adl.sched.policy import AdlPolicy
from adl.sched.types import NodeInfo

NOW = datetime(2026, 1, 1, tzinfo=UTC)
JOB = "ns/j"
TWO = ["n0", "n1"]
SPEC = AdaptiveJobSpec.model_validate(
    {"template": {"spec": {"containers": [{"name": "t", "command": ["python", "t.py"]}]}}}
)
LEFTOVERS = GroupBlocked(
    2, "WaitingForPreviousJob", "PreviousJobResources", "pod j-g4-0 of a deleted job is stopping"
)


def starting(group: int = 2, **kw: Any) -> AdaptiveJobStatus:
    base = {"reason": "Starting", "message": starting_message(group, TWO)}
    fields = base | kw
    return AdaptiveJobStatus(
        phase=Phase.STARTING, group=group, allocation=TWO, replicas=2, **fields
    )


def run(status: AdaptiveJobStatus, observed: ObservedWorkers) -> list[Any]:
    return step(JOB, SPEC, status, observed, TWO, NOW)


def written(actions: list[Any]) -> AdaptiveJobStatus | None:
    return next((a.status for a in actions if isinstance(a, SetStatus)), None)


def test_a_blocked_launch_says_why_once_and_tries_again_each_step() -> None:
    first = run(starting(), ObservedWorkers(blocked=LEFTOVERS))
    status = written(first)
    assert status is not None and status.phase == Phase.STARTING
    assert (status.reason, status.message) == (LEFTOVERS.reason, LEFTOVERS.message)
    events = [a for a in first if isinstance(a, EmitEvent)]
    assert [(e.type, e.reason, e.message) for e in events] == [
        ("Warning", LEFTOVERS.event, LEFTOVERS.message)
    ]
    assert isinstance(first[0], SetStatus)  # the status first, the retried launch after it
    assert [a.ranks for a in first if isinstance(a, CreateGroup)] == [(0, 1)]
    # the same wait on the next look: no status write, no second event, one more try
    again = run(status, ObservedWorkers(blocked=LEFTOVERS))
    assert [type(a) for a in again] == [CreateGroup]


def test_a_wait_of_an_older_group_is_not_the_current_groups() -> None:
    stale = GroupBlocked(1, "ServiceRejected", "ServiceRejected", "quota exceeded")
    actions = run(starting(), ObservedWorkers(blocked=stale))
    status = written(actions)
    assert status is not None and status.reason == "Starting"
    assert not any(isinstance(a, EmitEvent) for a in actions)


def test_the_status_says_starting_again_once_the_wait_is_over() -> None:
    waiting = starting(reason=LEFTOVERS.reason, message=LEFTOVERS.message)
    # the launch went through (its replicas pending, nothing to say about them)
    pending = tuple(ReplicaState(2, r, ReplicaPhase.PENDING) for r in range(2))
    status = written(run(waiting, ObservedWorkers(pending)))
    assert status is not None
    assert (status.phase, status.reason, status.message) == (
        Phase.STARTING,
        "Starting",
        starting_message(2, TWO),
    )
    # or about to be launched (no wait reported now): Starting, and the launch
    actions = run(waiting, ObservedWorkers())
    status = written(actions)
    assert status is not None and status.reason == "Starting"
    assert any(isinstance(a, CreateGroup) for a in actions)


def test_a_replicas_own_reason_still_wins_over_starting() -> None:
    pulling = ReplicaState(2, 0, ReplicaPhase.PENDING, reason="ContainerCreating", message="pull")
    observed = ObservedWorkers((pulling, ReplicaState(2, 1, ReplicaPhase.RUNNING)))
    status = written(run(starting(), observed))
    assert status is not None and status.reason == "ContainerCreating"


def test_exited_replicas_of_old_groups_are_removed_last() -> None:
    observed = ObservedWorkers(
        (
            ReplicaState(0, 0, ReplicaPhase.SUCCEEDED),
            ReplicaState(1, 0, ReplicaPhase.FAILED),
            ReplicaState(1, 1, ReplicaPhase.STOPPED, terminating=True),  # being removed
            ReplicaState(2, 0, ReplicaPhase.STOPPED),  # the previous group: kept for its logs
            ReplicaState(3, 0, ReplicaPhase.RUNNING),
            ReplicaState(3, 1, ReplicaPhase.RUNNING),
        )
    )
    running = AdaptiveJobStatus(phase=Phase.RUNNING, group=3, allocation=TWO, replicas=2)
    actions = step(JOB, SPEC, running, observed, TWO, NOW)
    assert actions[-1] == RemoveExited(JOB, (0, 1))
    assert sum(isinstance(a, RemoveExited) for a in actions) == 1


def test_an_old_group_still_alive_is_stopped_not_removed() -> None:
    observed = ObservedWorkers(
        (ReplicaState(0, 0, ReplicaPhase.RUNNING), ReplicaState(3, 0, ReplicaPhase.RUNNING))
    )
    running = AdaptiveJobStatus(phase=Phase.RUNNING, group=3, allocation=["n0"], replicas=1)
    actions = step(JOB, SPEC, running, observed, ["n0"], NOW)
    assert not any(isinstance(a, RemoveExited) for a in actions)


class SettlingBackend(MemoryWorkerBackend):
    """Records what ``after_step`` was told, and what had been done by then."""

    def __init__(self, job: JobRecord) -> None:
        super().__init__([job], [NodeInfo("n0", 1), NodeInfo("n1", 1)])
        self.settled: list[tuple[list[Any], AdaptiveJobStatus]] = []

    def after_step(self, job: JobRecord, actions: Any) -> None:
        self.settled.append((list(actions), self.jobs[job.key].status))


def test_the_backend_settles_after_the_steps_actions_are_carried_out() -> None:
    job = JobRecord(JOB, SPEC, AdaptiveJobStatus(), NOW, desired=TWO)
    backend = SettlingBackend(job)
    actions = Driver(backend, AdlPolicy()).step_job(job, NOW)
    [(told, status_then)] = backend.settled
    assert told == actions and isinstance(actions[0], SetStatus)
    assert status_then.phase == Phase.STARTING  # the status was written before
    assert [type(g) for g in backend.groups] == [CreateGroup]
