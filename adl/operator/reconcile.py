"""One reconciliation step of an AdaptiveJob on Kubernetes, as a pure function.

(spec, status, desired allocation, observed pods, now) -> actions. Level-triggered and
idempotent: the operator may crash between any two actions and the next step, computed from
the CRD status and the pods that really exist, finishes the work without ever running two
groups of one job at once (a new group starts only when no pod of an older group is alive, and
pod names are deterministic so a repeated create is a harmless conflict).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, Condition, Phase, RestartCause
from adl.operator.observe import PodPhase, PodState
from adl.operator.pods import node_slots

#: Exponential backoff after a failure: base * 2**(n-1), capped.
BACKOFF_BASE_S = 10.0
BACKOFF_MAX_S = 300.0
#: A group whose pods stay Unschedulable this long is restarted at the next allocation.
UNSCHEDULABLE_S = 300.0


# ----------------------------------------------------------------------------------- actions


@dataclass(frozen=True)
class EnsureResources:
    """Service, token Secret and checkpoint claim exist (idempotent creates)."""


@dataclass(frozen=True)
class CreatePods:
    group: int
    allocation: tuple[str, ...]
    indices: tuple[int, ...]  # which of the group's pods (node index) to create


@dataclass(frozen=True)
class DeletePods:
    names: tuple[str, ...]
    grace_s: int


@dataclass(frozen=True)
class SetStatus:
    status: AdaptiveJobStatus
    restart_after: datetime | None = None  # kept in an annotation (operator-private)


@dataclass(frozen=True)
class EmitEvent:
    type: str  # Normal | Warning
    reason: str
    message: str


Action = EnsureResources | CreatePods | DeletePods | SetStatus | EmitEvent


@dataclass
class Observed:
    """What the operator knows besides spec and status."""

    pods: list[PodState] = field(default_factory=list)
    desired: list[str] | None = None  # the scheduler's latest allocation; None = no round yet
    restart_after: datetime | None = None


@dataclass(frozen=True)
class Timing:
    """Restart timing knobs (seconds)."""

    backoff_base_s: float = BACKOFF_BASE_S
    backoff_max_s: float = BACKOFF_MAX_S
    unschedulable_s: float = UNSCHEDULABLE_S

    def backoff_s(self, failures: int) -> float:
        return min(self.backoff_base_s * 2 ** max(failures - 1, 0), self.backoff_max_s)


def backoff_s(failures: int) -> float:
    return Timing().backoff_s(failures)


def same_placement(a: list[str], b: list[str]) -> bool:
    """Allocations equal up to replica order (only the count per node matters)."""
    return sorted(node_slots(a)) == sorted(node_slots(b))


def _alive(pod: PodState) -> bool:
    return pod.phase in (PodPhase.PENDING, PodPhase.RUNNING)


def _set_condition(
    status: AdaptiveJobStatus, kind: str, value: bool, reason: str, message: str, now: datetime
) -> None:
    text = "True" if value else "False"
    conds = [c for c in status.conditions if c.type != kind]
    old = next((c for c in status.conditions if c.type == kind), None)
    since = old.last_transition_time if old is not None and old.status == text else now
    conds.append(
        Condition(
            type=kind, status=text, reason=reason, message=message, last_transition_time=since
        )
    )
    status.conditions = sorted(conds, key=lambda c: c.type)


class _Step:
    """Accumulates the actions of one step; ``status`` is a working copy."""

    def __init__(
        self, status: AdaptiveJobStatus, observed: Observed, now: datetime, timing: Timing
    ) -> None:
        self.timing = timing
        self.before = status
        self.status = status.model_copy(deep=True)
        self.observed = observed
        self.now = now
        self.actions: list[Action] = []
        self.restart_after = observed.restart_after

    def event(self, type_: str, reason: str, message: str) -> None:
        self.actions.append(EmitEvent(type_, reason, message))

    def phase(self, phase: Phase, reason: str = "", message: str = "") -> None:
        if phase != self.status.phase:
            self.event(
                "Warning" if phase == Phase.FAILED else "Normal",
                reason or phase.value,
                message or f"{self.status.phase.value} -> {phase.value}",
            )
        self.status.phase = phase
        self.status.reason = reason
        self.status.message = message

    def finish(self) -> list[Action]:
        st, now = self.status, self.now
        running = st.phase == Phase.RUNNING
        _set_condition(st, "Running", running, st.reason or st.phase.value, st.message, now)
        _set_condition(st, "Complete", st.phase == Phase.SUCCEEDED, st.phase.value, "", now)
        _set_condition(st, "Failed", st.phase == Phase.FAILED, st.reason, st.message, now)
        _set_condition(st, "Suspended", st.phase == Phase.SUSPENDED, "", "", now)
        if st.phase.finished and st.completion_time is None:
            st.completion_time = now
        changed = st != self.before or self.restart_after != self.observed.restart_after
        out: list[Action] = []
        if changed:
            out.append(SetStatus(st, self.restart_after))
        # status first: pods are only created/deleted once the decision is recorded
        return out + self.actions


def _stop(step: _Step, pods: list[PodState], grace_s: int) -> None:
    names = tuple(p.name for p in pods if not p.deleting)
    if names:
        step.actions.append(DeletePods(names, grace_s))


def _start_group(step: _Step, spec: AdaptiveJobSpec) -> None:
    st = step.status
    desired = step.observed.desired or []
    if len(desired) < max(spec.min_replicas, 1):
        step.phase(Phase.PENDING, "WaitingForAllocation", "waiting for GPUs")
        st.replicas = st.ready_replicas = 0
        return
    if step.restart_after is not None and step.now < step.restart_after:
        wait = (step.restart_after - step.now).total_seconds()
        step.phase(st.phase, "BackingOff", f"restarting in {wait:.0f}s")
        return
    st.group += 1
    st.allocation = list(desired)
    st.replicas = len(desired)
    st.ready_replicas = 0
    if st.start_time is None:
        st.start_time = step.now
    step.restart_after = None
    step.phase(
        Phase.STARTING,
        "Starting",
        f"group {st.group}: {len(desired)} replicas on {len(node_slots(desired))} nodes",
    )
    step.actions.insert(0, EnsureResources())
    n_pods = len(node_slots(desired))
    step.actions.append(CreatePods(st.group, tuple(desired), tuple(range(n_pods))))


def _restart(
    step: _Step,
    spec: AdaptiveJobSpec,
    current: list[PodState],
    cause: RestartCause,
    reason: str,
    message: str,
) -> None:
    st = step.status
    restarts = dict(st.restarts)
    restarts[cause] = restarts.get(cause, 0) + 1
    st.restarts = restarts
    if cause == RestartCause.FAILURE:
        failures = restarts[cause]
        if failures > spec.max_restarts:
            step.phase(
                Phase.FAILED,
                reason,
                f"{message} (failed {failures} times, maxRestarts={spec.max_restarts})",
            )
            _stop(step, [p for p in current if _alive(p)], spec.termination_grace_period_seconds)
            return
        step.restart_after = step.now + timedelta(seconds=step.timing.backoff_s(failures))
    step.phase(Phase.RESTARTING, reason, message)
    _stop(step, current, spec.termination_grace_period_seconds)


def reconcile(
    spec: AdaptiveJobSpec,
    status: AdaptiveJobStatus,
    observed: Observed,
    now: datetime,
    timing: Timing | None = None,
) -> list[Action]:
    """The actions that move the job one step towards what spec and scheduler want."""
    step = _Step(status, observed, now, timing or Timing())
    st = step.status
    if st.hints is not None:  # surface the last report in the printer columns
        st.batch_size = st.hints.batch_size
        st.goodput = st.hints.goodput
    current = [p for p in observed.pods if p.group == st.group]
    stale = [p for p in observed.pods if p.group != st.group]
    grace = spec.termination_grace_period_seconds

    # Older groups never overlap the current one: delete whatever is left of them.
    _stop(step, stale, grace)

    if st.phase.finished:
        _stop(step, [p for p in current if _alive(p)], grace)
        return step.finish()

    if spec.suspend:
        _stop(step, current, grace)
        st.allocation, st.replicas, st.ready_replicas = [], 0, 0
        step.phase(Phase.SUSPENDED, "Suspended", "spec.suspend is true")
        return step.finish()
    if st.phase == Phase.SUSPENDED:
        step.phase(Phase.PENDING, "Resumed", "spec.suspend is false")

    alive_any = any(_alive(p) or p.deleting for p in observed.pods)
    if st.phase in (Phase.PENDING, Phase.RESTARTING) or st.group == 0:
        if not any(_alive(p) or p.deleting for p in current) and not alive_any:
            _start_group(step, spec)
        elif st.phase == Phase.RESTARTING:
            _stop(step, current, grace)
        return step.finish()

    # Starting or Running: a group is (supposed to be) up.
    expected = len(node_slots(st.allocation))
    present = {p.index for p in current}
    failed = [p for p in current if p.phase == PodPhase.FAILED]
    if failed:
        first = failed[0]
        _restart(
            step,
            spec,
            current,
            RestartCause.FAILURE,
            first.reason or "WorkerFailed",
            f"pod {first.name}: {first.message or first.reason}",
        )
        return step.finish()
    if current and len(present) == expected and all(p.phase == PodPhase.SUCCEEDED for p in current):
        st.ready_replicas = 0
        step.phase(Phase.SUCCEEDED, "Succeeded", "all workers exited 0")
        return step.finish()
    stopped = [p for p in current if p.phase == PodPhase.STOPPED]
    vanished = [i for i in range(expected) if i not in present]
    if stopped or (vanished and st.phase == Phase.RUNNING):
        _restart(
            step,
            spec,
            current,
            RestartCause.PREEMPTION,
            "Preempted",
            "a worker was stopped or removed outside adl's control",
        )
        return step.finish()
    desired = observed.desired
    if desired is not None and not same_placement(desired, st.allocation):
        cause = RestartCause.RESIZE if desired else RestartCause.PREEMPTION
        _restart(
            step,
            spec,
            current,
            cause,
            "Resizing" if desired else "Preempted",
            f"{len(st.allocation)} -> {len(desired)} replicas",
        )
        return step.finish()
    if vanished:  # Starting and some pods were never created (operator restarted mid-way)
        step.actions.append(CreatePods(st.group, tuple(st.allocation), tuple(vanished)))
    stuck = [p for p in current if p.reason == "Unschedulable"]
    slots = node_slots(st.allocation)
    st.ready_replicas = sum(
        slots[p.index][1]
        for p in current
        if p.phase == PodPhase.RUNNING and p.ready and 0 <= p.index < len(slots)
    )
    late = [
        p
        for p in stuck
        if p.since and (now - p.since).total_seconds() > step.timing.unschedulable_s
    ]
    if late:
        _restart(
            step,
            spec,
            current,
            RestartCause.FAILURE,
            "Unschedulable",
            f"pod {late[0].name} unschedulable for over {UNSCHEDULABLE_S:.0f}s: {late[0].message}",
        )
        return step.finish()
    if stuck:
        step.phase(st.phase, "Unschedulable", f"pod {stuck[0].name}: {stuck[0].message}")
    elif (
        st.phase == Phase.STARTING
        and not vanished
        and all(p.phase == PodPhase.RUNNING for p in current)
    ):
        step.phase(Phase.RUNNING, "Running", f"group {st.group} running")
    elif st.phase == Phase.STARTING:
        waiting = [p for p in current if p.phase == PodPhase.PENDING and p.reason]
        if waiting:
            step.phase(st.phase, waiting[0].reason, f"pod {waiting[0].name}")
    return step.finish()


def status_patch(status: AdaptiveJobStatus) -> dict[str, Any]:
    """The merge patch that sets ``status``. Explicit nulls clear fields that became unset;
    ``hints`` is left out because the API service owns it."""
    body: dict[str, Any] = status.model_dump(mode="json", by_alias=True, exclude={"hints"})
    return body
