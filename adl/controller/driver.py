"""The one control loop every backend runs: step a job, run a scheduling round.

``Driver.step_job`` observes a job's workers, steps the pure lifecycle, executes its actions
in order (``SetStatus`` first) and lets the backend settle what it keeps beside the workers
(``after_step``); ``Driver.run_round`` reads every job and node, adds the service
each running job attained since the last round, records the jobs that succeeded since (their
total work predicts the remaining work of jobs of the same kind that declared no length:
``adl.controller.history``), asks the policy for an allocation with speedup tables kept warm
across rounds, records the changed answers and says why each changed. The
backends (``adl.local``, ``adl.operator``) supply only the primitives of
``adl.controller.backend.WorkerBackend`` and decide *when* to call these two.

Service accrues in the round, not in the job step, because the round is the one thing both
backends run periodically (the operator reconciles a job only when something about it changes).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from adl.controller.actions import (
    Action,
    CreateGroup,
    DeleteGroup,
    EmitEvent,
    RemoveExited,
    SetStatus,
)
from adl.controller.backend import AsksForCapacity, EmptiesNodes, WorkerBackend
from adl.controller.history import CompletedWork
from adl.controller.job_record import JobRecord
from adl.controller.lifecycle import Timing, set_condition, step, teardown
from adl.controller.rounds import (
    RoundLog,
    RoundResult,
    SpeedupCache,
    accrue_service,
    timed_plan_round,
)
from adl.models import Condition, Phase
from adl.sched.capacity import CapacityRule, capacity_asks
from adl.sched.decisions import REASON
from adl.sched.emptying import NodeToEmpty, keep_emptying, nodes_worth_emptying
from adl.sched.type_history import TypeSpeedHistory
from adl.sched.types import NodeInfo, Policy

log = logging.getLogger("adl.controller")

#: the condition a job left out of a round carries, and its reason while it is False
SCHEDULABLE = "Schedulable"
UNUSABLE = "UnusableHints"
#: the condition of a job held at its size while GPUs it could grow into stay free (True,
#: with the policy's reason and message, while that lasts), and the event that says so
GROWTH_HELD = "GrowthHeld"
NOT_GROWN = "NotGrown"


def execute(backend: WorkerBackend, job: JobRecord, actions: Sequence[Action]) -> None:
    """Carry out the lifecycle's actions with the backend's primitives, in order."""
    for action in actions:
        if isinstance(action, SetStatus):
            backend.set_status(job, action.status)
        elif isinstance(action, CreateGroup):
            backend.create_group(job, action)
        elif isinstance(action, DeleteGroup):
            backend.delete_group(job, action)
        elif isinstance(action, RemoveExited):
            backend.remove_exited(job, action)
        elif isinstance(action, EmitEvent):
            backend.emit_event(job, action)


class Driver:
    """The shared loop of one backend: its policy, timing, speedup tables and round log."""

    def __init__(
        self,
        backend: WorkerBackend,
        policy: Policy,
        timing: Timing | None = None,
        *,
        on_round: Callable[[RoundResult], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        completed: CompletedWork | None = None,
        unit: str = "GPU",
    ) -> None:
        self.backend = backend
        #: what the backend's nodes hand out, as the decisions name it (``slot``: CPU slots)
        self.unit = unit
        self.policy = policy
        self.timing = timing or Timing()
        self.speedups = SpeedupCache()
        self.rounds = RoundLog()
        self.on_round = on_round  # e.g. the round-latency histogram
        self.clock = clock  # monotonic seconds: service accrues by its differences
        self._accrued_at: dict[str, float] = {}
        #: total work of the jobs that succeeded, by kind: the remaining work of jobs that
        #: declared no length is predicted from it (rebuilt from the listing after a restart)
        self.completed = completed or CompletedWork()
        #: per-type speeds jobs measured, by kind: a job's speed on a GPU type it never ran on
        #: is estimated from them (in memory: it is measured again after a restart)
        self.type_history = TypeSpeedHistory()
        #: nodes held back from the jobs so that the autoscaler can remove them once empty
        #: (``EmptiesNodes``), by name. In memory: after a restart every node is offered
        #: again, and the rule picks what is still worth emptying
        self.emptying: dict[str, NodeToEmpty] = {}

    def step_job(self, job: JobRecord, now: datetime) -> list[Action]:
        """One lifecycle step of ``job``, executed; returns the actions taken."""
        observed = self.backend.observe(job)
        actions = step(
            job.key,
            job.spec,
            job.status,
            observed,
            job.desired,
            now,
            self.timing,
            quota_wait=job.quota_wait if job.ceiling == 0 else None,
            admitted=job.ceiling,
        )
        execute(self.backend, job, actions)
        suspended = any(
            isinstance(a, SetStatus) and a.status.phase == Phase.SUSPENDED for a in actions
        )
        if suspended and job.desired:
            # The answer it ran on is history: a resume must start on a fresh one (a round that
            # read the job before the resume may still be writing), not on these GPUs. At once,
            # on every backend (the next round would forget it too, but a resume may come first).
            self.backend.set_desired({job.key: []})
        self.backend.after_step(job, actions)
        return actions

    def tear_down(self, job: JobRecord) -> bool:
        """Stop every group of a deleted ``job``, gracefully; True while any of its workers
        is still present (the backend removes the job's traces once none is)."""
        observed = self.backend.observe(job)
        execute(self.backend, job, teardown(job.key, job.spec, observed))
        return observed.any_present()

    def run_round(self, now: datetime) -> RoundResult:
        """One scheduling round over everything the backend holds."""
        jobs = self._accrue(list(self.backend.round_jobs()))
        nodes = list(self.backend.round_nodes())
        # a held-back node that left the listing (gone, leaving, taken by others) is no
        # longer ours to hold; the rest are offered to no job
        listed = {n.name for n in nodes}
        self.emptying = {k: v for k, v in self.emptying.items() if k in listed}
        held_back = [n for n in nodes if n.name in self.emptying]
        nodes = [n for n in nodes if n.name not in self.emptying]
        self.completed.record(jobs)
        result = timed_plan_round(
            self.policy,
            jobs,
            nodes,
            now,
            self.speedups,
            self.completed,
            self.unit,
            self.type_history,
        )
        self.rounds.add(result)
        if self.on_round is not None:
            self.on_round(result)
        if result.changed:
            self.backend.set_desired(result.changed)
        if isinstance(self.backend, AsksForCapacity):
            rule = self.backend.capacity_rule()
            if rule is not None:
                self._size_cluster(result, nodes, held_back, rule)
        marks = self._mark_faults(jobs, result)
        marks.update(self._mark_holds(jobs, result, marks))
        if marks:
            self.backend.record_conditions(marks)
        by_key = {job.key: job for job in jobs}
        for decision in result.decisions.values():
            log.info("%s: %s", decision.job, decision.message)
            event = EmitEvent("Normal", REASON, decision.message)
            self.backend.emit_event(by_key[decision.job], event)
        return result

    def _size_cluster(
        self,
        result: RoundResult,
        nodes: Sequence[NodeInfo],
        held_back: Sequence[NodeInfo],
        rule: CapacityRule,
    ) -> None:
        """Ask for the GPUs the jobs would put to good use, and (``EmptiesNodes``) hold back
        the nodes worth emptying: new ones chosen, or all offered again once new demand
        would use them (better theirs than a new node's). One rule, so the two never fight."""
        assert isinstance(self.backend, AsksForCapacity)
        released: list[str] = []
        if held_back and not keep_emptying(result.infos, result.allocation, nodes, held_back, rule):
            released, self.emptying = sorted(self.emptying), {}
            nodes = [*nodes, *held_back]
        self.backend.ask_capacity(capacity_asks(result.infos, result.allocation, nodes, rule))
        if not isinstance(self.backend, EmptiesNodes):
            return
        chosen: list[NodeToEmpty] = []
        if not released:
            chosen = nodes_worth_emptying(
                result.infos,
                result.allocation,
                nodes,
                rule,
                kept=self.backend.kept_by_others(),
            )
            self.emptying.update({c.node: c for c in chosen})
        if chosen or released:
            self.backend.nodes_emptied(chosen, released)

    def _mark_faults(
        self, jobs: Sequence[JobRecord], result: RoundResult
    ) -> dict[str, list[Condition]]:
        """A job the round left out because of its own data gets one Warning event and a
        ``Schedulable=False`` condition saying why (the condition doubles as the memory that
        the warning was given: no event per round, none again after a restart of the
        backend); once it takes part again the condition turns True. Returns the jobs'
        changed conditions, for ``record_conditions``."""
        marks: dict[str, list[Condition]] = {}
        for job in jobs:
            if job.key not in result.allocation:  # finished or suspended: not in the round
                continue
            why = result.faults.get(job.key)
            old = next((c for c in job.status.conditions if c.type == SCHEDULABLE), None)
            marked = old is not None and old.status == "False"
            if why is None and not marked:
                continue  # the common case: nothing to say, and no copy of the status made
            if why is not None and marked and old is not None and old.message == why:
                continue
            status = job.status.model_copy(deep=True)
            if why is not None:
                log.warning("%s: left out of the round: %s", job.key, why)
                self.backend.emit_event(job, EmitEvent("Warning", UNUSABLE, why))
                set_condition(status, SCHEDULABLE, False, UNUSABLE, why, datetime.now(UTC))
            else:
                set_condition(status, SCHEDULABLE, True, "HintsUsable", "", datetime.now(UTC))
            marks[job.key] = status.conditions
        return marks

    def _mark_holds(
        self,
        jobs: Sequence[JobRecord],
        result: RoundResult,
        marks: dict[str, list[Condition]],
    ) -> dict[str, list[Condition]]:
        """A job the round kept at its size while GPUs it could grow into stayed free gets a
        ``GrowthHeld`` condition with the policy's reason (``not grown: the remaining 80 s do
        not repay a 20 s restart``), refreshed while it lasts, and a ``NotGrown`` event when
        the reason first appears or changes; the condition goes once the job is no longer
        held. ``marks``: conditions already changed this round (they are built on)."""
        out: dict[str, list[Condition]] = {}
        for job in jobs:
            hold = result.holds.get(job.key)
            conditions = marks.get(job.key, job.status.conditions)
            old = next((c for c in conditions if c.type == GROWTH_HELD), None)
            if hold is None and old is None:
                continue
            if hold is not None and old is not None and old.message == hold.message:
                continue
            kept = [c for c in conditions if c.type != GROWTH_HELD]
            if hold is None:
                out[job.key] = kept
                continue
            if old is None or old.reason != hold.cause:
                log.info("%s: %s", job.key, hold.message)
                self.backend.emit_event(job, EmitEvent("Normal", NOT_GROWN, hold.message))
            status = job.status.model_copy(update={"conditions": kept})
            set_condition(status, GROWTH_HELD, True, hold.cause, hold.message, datetime.now(UTC))
            out[job.key] = status.conditions
        return out

    def _accrue(self, jobs: list[JobRecord]) -> list[JobRecord]:
        """``jobs`` with the GPU-time each ran since the previous round added (least attained
        service needs it); the new totals are persisted. A job seen for the first time (or
        after a restart of the backend) starts its clock now."""
        now = self.clock()
        out, service = [], {}
        for job in jobs:
            since = self._accrued_at.get(job.key)
            self._accrued_at[job.key] = now
            if since is not None:
                status = accrue_service(job.status, job.spec.gpus_per_replica, now - since)
                if status.attained_service_s != job.status.attained_service_s:
                    service[job.key] = status.attained_service_s
                    job = replace(job, status=status)
            out.append(job)
        seen = {j.key for j in jobs}
        self._accrued_at = {k: v for k, v in self._accrued_at.items() if k in seen}
        if service:
            self.backend.record_service(service)
        return out
