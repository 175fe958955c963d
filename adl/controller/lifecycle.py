"""The job lifecycle as a pure, level-triggered state machine shared by every backend.

``step(job, spec, status, observed, desired, now)`` -> actions. No clocks, no I/O: the backend
passes in what it sees of the workers and what the scheduler wants, executes the returned
actions in order (``SetStatus`` first) and calls ``step`` again on the next change or tick.

Invariants a backend can rely on:
- a new group starts only when no replica of any older group is alive, so two groups of one
  job never run at once (the backend crashing between actions cannot break this: the next step
  recomputes from the persisted status and the replicas that really exist);
- restarts are counted by cause: ``resize`` (the scheduler changed the allocation),
  ``failure`` (a replica crashed or could not start; retried with exponential backoff up to
  ``spec.maxRestarts``, then the job is Failed with that reason) and ``preemption`` (a replica
  was stopped from outside, or the scheduler took every GPU away);
- suspend stops the workers without counting a restart; resume starts a new group.

Phases: Pending -> Starting -> Running -> (Restarting -> Starting ...) -> Succeeded | Failed,
with Suspended reachable from any unfinished phase.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from adl.contract import EXIT_STOPPED as EXIT_STOPPED
from adl.controller.actions import (
    Action,
    CreateGroup,
    DeleteGroup,
    EmitEvent,
    RemoveExited,
    SetStatus,
)
from adl.controller.env import node_slots
from adl.controller.liveness import RankProgress, judge, progressing
from adl.controller.status_hints import reflect_hints
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, Condition, Phase, RestartCause

#: a replica still present this long after its stop was due is reported (its node may be down)
STOP_OVERDUE_S = 60.0
#: the status reason and event of a group whose node was lost (its replicas force-deleted)
NODE_LOST = "NodeLost"
#: the status reason and event of a group stopped because a node of it is about to go away
#: (a disruption taint, a cordon, a deletion: ``ObservedWorkers.nodes_leaving``)
NODE_DISRUPTED = "NodeDisrupted"


# ----------------------------------------------------------------------------- observations


class ReplicaPhase(StrEnum):
    PENDING = "pending"  # launched, not yet running (image pull, scheduling, process spawn)
    RUNNING = "running"
    SUCCEEDED = "succeeded"  # exited 0: training finished
    STOPPED = "stopped"  # exited 143: checkpointed after SIGTERM
    FAILED = "failed"  # any other exit, or a start that will never succeed

    @property
    def alive(self) -> bool:
        return self in (ReplicaPhase.PENDING, ReplicaPhase.RUNNING)


@dataclass(frozen=True)
class ReplicaState:
    """What a backend observes of one replica (a process, or the share of a pod)."""

    group: int
    rank: int
    phase: ReplicaPhase
    ready: bool = True
    exit_code: int | None = None
    reason: str = ""
    message: str = ""
    terminating: bool = False  # a stop was already requested
    since: datetime | None = None  # when it entered its current phase/reason (for timeouts)
    #: not running, yet still holding its GPUs until deleted: a Kubernetes pod whose container
    #: could not start (e.g. ImagePullBackOff) stays bound to its node, and may start later
    holds: bool = False
    #: when a requested stop should be complete (a Kubernetes pod's deletionTimestamp: the end
    #: of its grace period); a replica still there well after it is probably on a lost node
    stop_due: datetime | None = None
    #: the node it runs on ("" where the backend has one node)
    node: str = ""

    @property
    def alive(self) -> bool:
        return self.phase.alive

    @property
    def present(self) -> bool:
        """Running, about to, or holding resources: must be stopped before the next group."""
        return self.phase.alive or self.holds

    @classmethod
    def exited(cls, group: int, rank: int, code: int, message: str = "") -> ReplicaState:
        """A replica whose process ended with ``code`` (negative: killed by that signal)."""
        if code == 0:
            return cls(group, rank, ReplicaPhase.SUCCEEDED, ready=False, exit_code=0)
        if code == EXIT_STOPPED:
            return cls(group, rank, ReplicaPhase.STOPPED, False, code, "Stopped", message)
        reason = f"KilledBySignal{-code}" if code < 0 else "WorkerFailed"
        text = message or (
            f"rank {rank} killed by signal {-code}" if code < 0 else f"rank {rank} exited {code}"
        )
        return cls(group, rank, ReplicaPhase.FAILED, False, code, reason, text)


@dataclass(frozen=True)
class GroupBlocked:
    """Why the backend could not launch group ``group`` at its last try, for a cause outside
    the job that a retry may clear (Kubernetes: a child object of a deleted namesake still
    there, the cluster refusing the job's Service, Secret or claim). The job waits, Starting,
    with ``reason`` and ``message`` in its status and one Warning event ``event``; each later
    step tries the launch again."""

    group: int
    reason: str
    event: str
    message: str


@dataclass(frozen=True)
class ObservedWorkers:
    """Every replica the backend knows of, of any group (finished ones included, so that an
    exit code observed once is not forgotten before the controller has acted on it)."""

    replicas: tuple[ReplicaState, ...] = ()
    #: what the ranks' heartbeats said of their progress (``adl.controller.liveness``)
    progress: tuple[RankProgress, ...] = ()
    #: node -> since when it has not been Ready (NotReady, or unreachable: its kubelet stopped
    #: reporting), for the nodes of the replicas above that are down
    nodes_down: Mapping[str, datetime] = field(default_factory=dict)
    #: node -> why it is about to go away (a taint's key, a cordon, a deletion), for the nodes
    #: of the replicas above and of the scheduler's answer that are. The group on such a node
    #: is stopped gracefully at once (it checkpoints within the notice), and no group starts
    #: there
    nodes_leaving: Mapping[str, str] = field(default_factory=dict)
    #: the launch of a group that could not start for an outside cause, as the backend's last
    #: try found it (None: no such wait)
    blocked: GroupBlocked | None = None

    def of_group(self, group: int) -> list[ReplicaState]:
        return sorted((r for r in self.replicas if r.group == group), key=lambda r: r.rank)

    def others(self, group: int) -> list[ReplicaState]:
        return [r for r in self.replicas if r.group != group]

    def any_present(self) -> bool:
        return any(r.present for r in self.replicas)


@dataclass(frozen=True)
class Timing:
    """Restart timing knobs, in seconds."""

    backoff_base_s: float = 10.0
    backoff_max_s: float = 300.0
    #: a replica still pending after this long is a failed start (e.g. unschedulable)
    pending_timeout_s: float = 300.0
    #: a node down (NotReady or unreachable) this long is lost: the group with a replica on it
    #: is treated as gone, those replicas are force-deleted and the job starts again without
    #: them. Long enough that a kubelet restart or a short network blip is not a loss, short
    #: against the 5 minutes after which Kubernetes itself evicts (and then waits forever for
    #: a dead kubelet to confirm)
    node_lost_s: float = 60.0

    def backoff_s(self, failures: int) -> float:
        """Delay before the restart that follows the ``failures``-th failure."""
        return min(self.backoff_base_s * 2 ** max(failures - 1, 0), self.backoff_max_s)


# ----------------------------------------------------------------------------- helpers


def same_placement(a: Sequence[str], b: Sequence[str]) -> bool:
    """Equal up to replica order: only the number of replicas per node matters."""
    return sorted(node_slots(a)) == sorted(node_slots(b))


def set_condition(
    status: AdaptiveJobStatus, kind: str, value: bool, reason: str, message: str, now: datetime
) -> None:
    """Upsert one condition; its transition time moves only when its truth value changes."""
    text = "True" if value else "False"
    old = next((c for c in status.conditions if c.type == kind), None)
    since = old.last_transition_time if old is not None and old.status == text else now
    new = Condition(
        type=kind, status=text, reason=reason, message=message, last_transition_time=since
    )
    status.conditions = sorted(
        [c for c in status.conditions if c.type != kind] + [new], key=lambda c: c.type
    )


@dataclass
class _Step:
    job: str
    spec: AdaptiveJobSpec
    before: AdaptiveJobStatus
    observed: ObservedWorkers
    desired: list[str] | None
    now: datetime
    timing: Timing
    #: why an outside quota manager (Kueue) admits none of the job now: it waits for that
    #: instead of for the scheduler
    quota_wait: str | None = None
    #: stop with no grace (a hang: a stopped rank does not act on SIGTERM, its peers are
    #: blocked where they cannot checkpoint)
    hard_stop: bool = False
    status: AdaptiveJobStatus = field(init=False)
    actions: list[Action] = field(default_factory=list)
    #: nodes down past ``timing.node_lost_s`` that hold a present replica -> seconds down
    lost: dict[str, float] = field(init=False)

    def __post_init__(self) -> None:
        self.status = self.before.model_copy(deep=True)
        self.lost = lost_nodes(self.observed, self.now, self.timing)

    @property
    def grace(self) -> int:
        return 0 if self.hard_stop else self.spec.termination_grace_period_seconds

    def event(self, type_: str, reason: str, message: str) -> None:
        self.actions.append(EmitEvent(type_, reason, message))

    def phase(self, phase: Phase, reason: str = "", message: str = "", warn: bool = False) -> None:
        """Set phase, reason and message; a change of phase is also an event."""
        st = self.status
        if phase != st.phase:
            self.event(
                "Warning" if warn or phase == Phase.FAILED else "Normal",
                reason or phase.value,
                message or f"{st.phase.value} -> {phase.value}",
            )
        st.phase, st.reason, st.message = phase, reason, message

    def stop(self, replicas: Sequence[ReplicaState]) -> None:
        """DeleteGroup for each group with a present replica that was not yet asked to stop
        (replicas on lost nodes are force-deleted instead: ``_remove_lost``)."""
        asked = {
            r.group for r in replicas if r.present and not r.terminating and r.node not in self.lost
        }
        for group in sorted(asked):
            self.actions.append(DeleteGroup(self.job, group, self.grace))

    def finish(self) -> list[Action]:
        st, now = self.status, self.now
        if st.phase.finished:  # a finished job holds nothing (metrics, ls, describe read this)
            st.allocation, st.replicas, st.ready_replicas = [], 0, 0
        scheduled = bool(st.allocation) and not st.phase.finished
        set_condition(
            st, "Scheduled", scheduled, "Allocated" if scheduled else "NoAllocation", "", now
        )
        set_condition(
            st, "Running", st.phase == Phase.RUNNING, st.reason or st.phase.value, st.message, now
        )
        set_condition(st, "Suspended", st.phase == Phase.SUSPENDED, "", "", now)
        set_condition(st, "Complete", st.phase == Phase.SUCCEEDED, "", "", now)
        failed = st.phase == Phase.FAILED
        set_condition(st, "Failed", failed, st.reason if failed else "", st.message, now)
        if st.phase.finished and st.completion_time is None:
            st.completion_time = now
        head: list[Action] = [SetStatus(st)] if st != self.before else []
        return head + self.actions + _remove_exited(self)


def _remove_exited(s: _Step) -> list[Action]:
    """Clear away the exited replicas of groups older than the one before the job's group
    (as the step found it): nothing runs in them any more, and the previous group's are kept
    for post-mortem logs. Last, after every decision of the step has been carried out."""
    keep_from = s.before.group - 1
    groups = sorted(
        {
            r.group
            for r in s.observed.replicas
            if r.group < keep_from and not r.alive and not r.terminating
        }
    )
    return [RemoveExited(s.job, tuple(groups))] if groups else []


# ----------------------------------------------------------------------------- transitions


def starting_message(group: int, allocation: Sequence[str]) -> str:
    """What a Starting job's status says: ``group 2: 3 replicas on 2 nodes``."""
    return f"group {group}: {len(allocation)} replicas on {len(node_slots(allocation))} nodes"


def scheduled_since(status: AdaptiveJobStatus, now: datetime) -> float:
    """The wall time (Unix seconds) since which the job has held GPUs without a break, as a
    group started ``now`` sees it: the ``Scheduled`` condition's transition while it is True
    (a group replacing one stopped for a resize or a restart), else ``now`` (a first start, a
    resume, a start after a wait for GPUs). A worker's restart cost starts there at the
    earliest, so the time the job spent suspended or queued is not counted as one."""
    held = next((c for c in status.conditions if c.type == "Scheduled"), None)
    if held is not None and held.status == "True" and held.last_transition_time is not None:
        return held.last_transition_time.timestamp()
    return now.timestamp()


def _start_group(s: _Step) -> None:
    st = s.status
    desired = s.desired or []
    if len(desired) < max(s.spec.min_replicas, 1):
        st.allocation, st.replicas, st.ready_replicas = [], 0, 0
        if s.quota_wait is not None:
            s.phase(Phase.PENDING, "WaitingForAdmission", s.quota_wait)
            return
        need = max(s.spec.min_replicas, 1)
        # neutral wording: on the local backend the slots may be CPU slots, not GPUs
        s.phase(
            Phase.PENDING,
            "WaitingForAllocation",
            f"waiting for the scheduler to allocate {need} replica{'s' if need > 1 else ''}",
        )
        return
    leaving = _leaving(s, desired)
    if leaving:
        # the round that read the node before its mark answered with it; the next one (run at
        # once on the mark) will not: start nothing that is about to be evicted
        s.phase(
            st.phase,
            NODE_DISRUPTED,
            f"{_disrupted_text(leaving)}; waiting for the scheduler to place it on other nodes",
        )
        return
    if st.restart_after is not None and s.now < st.restart_after:
        wait = (st.restart_after - s.now).total_seconds()
        s.phase(st.phase, "BackingOff", f"next start in {wait:.0f}s after a failure")
        return
    st.group += 1
    st.allocation = list(desired)
    st.replicas, st.ready_replicas = len(desired), 0
    st.restart_after = None
    if st.start_time is None:
        st.start_time = s.now
    s.phase(Phase.STARTING, "Starting", starting_message(st.group, desired))
    since = scheduled_since(s.before, s.now)
    ranks = tuple(range(len(desired)))
    s.actions.append(CreateGroup(s.job, st.group, tuple(desired), ranks, since))


def _restart(
    s: _Step, current: Sequence[ReplicaState], cause: RestartCause, reason: str, message: str
) -> None:
    st = s.status
    restarts = dict(st.restarts)
    restarts[cause] = restarts.get(cause, 0) + 1
    st.restarts = restarts
    if cause == RestartCause.FAILURE:
        failures = restarts[cause]
        if failures > s.spec.max_restarts:
            s.phase(
                Phase.FAILED,
                reason,
                f"{message} (failure {failures}, maxRestarts={s.spec.max_restarts})",
            )
            st.ready_replicas = 0
            s.stop(current)
            return
        st.restart_after = s.now + timedelta(seconds=s.timing.backoff_s(failures))
    st.ready_replicas = 0
    s.phase(Phase.RESTARTING, reason, message, warn=cause != RestartCause.RESIZE)
    s.stop(current)


def _succeeded(current: Sequence[ReplicaState]) -> bool:
    """Training finished: every replica exited, at least one with 0, none crashed (peers of a
    finished rank 0 may be stopped on the way out)."""
    return (
        bool(current)
        and not any(r.alive or r.phase == ReplicaPhase.FAILED for r in current)
        and any(r.phase == ReplicaPhase.SUCCEEDED for r in current)
    )


def _stopped_after_work_done(st: AdaptiveJobStatus, current: Sequence[ReplicaState]) -> bool:
    """The job reported all of its work done and every replica then exited cleanly, some
    stopped (143) on the way out by a SIGTERM: the final state is saved, the job is finished.
    Restarting it would only start a group that loads that checkpoint and exits again."""
    return (
        st.hints is not None
        and st.hints.work_done
        and bool(current)
        and not any(r.alive or r.phase == ReplicaPhase.FAILED for r in current)
    )


#: the condition a stop that had to checkpoint leaves behind (``adl describe`` shows it)
CHECKPOINTED = "Checkpointed"
#: its reason (and the event's) when the group was stopped before it could checkpoint at all
NOTHING_TO_CHECKPOINT = "NothingToCheckpoint"


def _record_stop(s: _Step, current: Sequence[ReplicaState]) -> None:
    """A group stopped to be resized, preempted or suspended must checkpoint on its way out;
    one whose replica exits non-zero (rank 0 hit ENOSPC while saving, or was killed past its
    grace period) did not, and the next group resumes from an older checkpoint. Say so with a
    Warning event and a False ``Checkpointed`` condition, once per failed group (the step is
    level-triggered, so the condition is also what remembers it was said). A rank that the
    stop's SIGTERM itself killed had not installed adl's handler yet (it was still importing):
    it had nothing to checkpoint, which a Normal ``NothingToCheckpoint`` event says instead. A
    failure restart (``restartAfter`` set) is not a checkpointing stop: its crash was reported
    already."""
    st = s.status
    stopping = s.spec.suspend or (st.phase == Phase.RESTARTING and st.restart_after is None)
    if not stopping or not current or st.group == 0:
        return
    old = next((c for c in st.conditions if c.type == CHECKPOINTED), None)
    failures = [r for r in current if r.phase == ReplicaPhase.FAILED]
    # killed by the stop's own SIGTERM: the rank had not installed adl's handler yet (it was
    # still importing), so it had trained nothing since its start and had nothing to save
    early = [r for r in failures if r.exit_code == -signal.SIGTERM]
    failed = next((r for r in failures if r not in early), None)
    if not failures:
        if old is not None and old.status == "False" and not any(r.present for r in current):
            set_condition(
                st, CHECKPOINTED, True, "Stopped", f"group {st.group} checkpointed", s.now
            )
        return
    why = {
        "Resizing": " for a resize",
        "Preempted": " for a preemption",
        NODE_DISRUPTED: " for a node disruption",
    }.get(st.reason, "")
    what = " for a suspend" if s.spec.suspend else why
    if failed is None:
        ranks = ", ".join(str(r.rank) for r in early)
        message = (
            f"group {st.group}: rank{'s' if len(early) > 1 else ''} {ranks} stopped{what} "
            "before it installed adl's SIGTERM handler (it was still starting up), so there was "
            "nothing to checkpoint; the next group resumes from the last checkpoint"
        )
        reason, kind = NOTHING_TO_CHECKPOINT, "Normal"
    else:
        exit_text = failed.message or f"rank {failed.rank} exited {failed.exit_code}"
        # a non-zero exit while saving is most often a failed write; a kill, its grace expiring
        hint = "disk full?" if (failed.exit_code or 0) > 0 else "a save longer than its grace?"
        message = (
            f"group {st.group}: {exit_text} while being stopped{what}, so its checkpoint may "
            f"not have been written ({hint}); the next group resumes from the last good "
            "checkpoint"
        )
        reason, kind = "CheckpointFailed", "Warning"
    if old is not None and old.status == "False" and old.message == message:
        return
    set_condition(st, CHECKPOINTED, False, reason, message, s.now)
    s.event(kind, reason, message)


def _active(s: _Step, current: list[ReplicaState]) -> None:
    """Starting or Running: a group is (supposed to be) up."""
    st, spec = s.status, s.spec
    expected = len(st.allocation)
    failed = [r for r in current if r.phase == ReplicaPhase.FAILED]
    if failed:
        first = failed[0]
        text = first.message or f"rank {first.rank} failed"
        _restart(s, current, RestartCause.FAILURE, first.reason or "WorkerFailed", text)
        return
    if _succeeded(current) and {r.rank for r in current} >= set(range(expected)):
        st.ready_replicas = 0
        s.phase(Phase.SUCCEEDED, "Succeeded", "all workers finished")
        return
    present = {r.rank for r in current}
    if _stopped_after_work_done(st, current) and present >= set(range(expected)):
        st.ready_replicas = 0
        s.phase(Phase.SUCCEEDED, "Succeeded", "all work done; workers stopped on their way out")
        return
    missing = tuple(i for i in range(expected) if i not in present)
    # before the stopped/missing check: a replica an eviction already stopped is the same
    # disruption, and says so
    leaving = _leaving(s, st.allocation)
    if leaving:
        message = f"{_disrupted_text(leaving)}; checkpointing and moving off it"
        _restart(s, current, RestartCause.PREEMPTION, NODE_DISRUPTED, message)
        return
    stopped = [r for r in current if r.phase == ReplicaPhase.STOPPED]
    finished_rank = any(r.phase == ReplicaPhase.SUCCEEDED for r in current)
    if (stopped and not finished_rank) or (missing and st.phase == Phase.RUNNING):
        who = stopped[0].rank if stopped else missing[0]
        _restart(
            s,
            current,
            RestartCause.PREEMPTION,
            "Preempted",
            f"rank {who} was stopped or removed outside adl's control",
        )
        return
    if st.phase == Phase.RUNNING and _hung(s, current, expected):
        return
    if (
        s.desired is not None
        and not same_placement(s.desired, st.allocation)
        and not _leaving(s, s.desired)  # an answer from before a node's mark: wait for the next
    ):
        enough = len(s.desired) >= max(spec.min_replicas, 1)
        _restart(
            s,
            current,
            RestartCause.RESIZE if enough else RestartCause.PREEMPTION,
            "Resizing" if enough else "Preempted",
            f"{len(st.allocation)} -> {len(s.desired)} replicas",
        )
        return
    late = [
        r
        for r in current
        if r.phase == ReplicaPhase.PENDING
        and r.since is not None
        and (s.now - r.since).total_seconds() > s.timing.pending_timeout_s
    ]
    if late:
        r = late[0]
        why = r.reason or "StartTimeout"
        text = f"rank {r.rank} not running after {s.timing.pending_timeout_s:.0f}s"
        _restart(s, current, RestartCause.FAILURE, why, f"{text}: {r.message}".rstrip(": "))
        return
    if missing:  # Starting, and the backend stopped half-way through the launch
        since = scheduled_since(s.before, s.now)
        s.actions.append(CreateGroup(s.job, st.group, tuple(st.allocation), missing, since))
    st.ready_replicas = sum(1 for r in current if r.phase == ReplicaPhase.RUNNING and r.ready)
    if st.phase != Phase.STARTING:
        return
    if not missing and all(r.phase == ReplicaPhase.RUNNING for r in current):
        s.phase(Phase.RUNNING, "Running", f"group {st.group} running")
        return
    blocked = s.observed.blocked
    if blocked is not None and blocked.group == st.group:
        _say_blocked(s, blocked)
        return
    waiting = next((r for r in current if r.alive and r.reason), None)
    if waiting is not None:  # e.g. ContainerCreating, Unschedulable: tell the user why
        s.phase(Phase.STARTING, waiting.reason, f"rank {waiting.rank}: {waiting.message}")
        return
    # nothing holds the group up that a reason could name (a wait for an outside cause is
    # over: its replicas exist, or are being launched now): the status says Starting again
    s.phase(Phase.STARTING, "Starting", starting_message(st.group, st.allocation))


def _say_blocked(s: _Step, blocked: GroupBlocked) -> None:
    """A Starting job whose launch waits for an outside cause says why, in its status and in
    one Warning event per thing waited for (the status is the memory: no event per step)."""
    st = s.status
    if (st.reason, st.message) != (blocked.reason, blocked.message):
        s.event("Warning", blocked.event, blocked.message)
    s.phase(Phase.STARTING, blocked.reason, blocked.message)


def _leaving(s: _Step, nodes: Sequence[str]) -> dict[str, str]:
    """Those of ``nodes`` that are about to go away (and are not lost already) -> why."""
    marked = s.observed.nodes_leaving
    return {n: marked[n] for n in sorted(set(nodes)) if n in marked and n not in s.lost}


def _disrupted_text(leaving: Mapping[str, str]) -> str:
    """``node a is being disrupted (karpenter.sh/disrupted)``, for each node."""
    return "; ".join(f"node {n} is being disrupted ({why})" for n, why in leaving.items())


def lost_nodes(observed: ObservedWorkers, now: datetime, timing: Timing) -> dict[str, float]:
    """The nodes down for ``timing.node_lost_s`` or longer that hold a present replica, with
    the seconds each has been down."""
    held = {r.node for r in observed.replicas if r.present and r.node}
    out: dict[str, float] = {}
    for node, since in observed.nodes_down.items():
        down = (now - since).total_seconds()
        if node in held and down >= timing.node_lost_s:
            out[node] = down
    return out


def _remove_lost(s: _Step) -> str:
    """Force-delete every present replica on a lost node (``DeleteGroup`` with its nodes) and
    return what to say about it ("" when there is none).

    Such a group is gone as far as adl is concerned: its node will never confirm a stop, and a
    worker still running there, cut off, cannot do harm. The next group gets a higher group
    number, and its rank 0 claims the checkpoint directory for that number before it loads
    (``adl.client_lib.checkpoint.claim``): a checkpoint commit of an older group is refused
    from then on, so a partitioned worker of the lost group can never overwrite the state the
    job resumed from."""
    gone = [r for r in s.observed.replicas if r.present and r.node in s.lost]
    if not gone:
        return ""
    groups = sorted({r.group for r in gone})
    for group in groups:
        nodes = tuple(sorted({r.node for r in gone if r.group == group}))
        s.actions.append(DeleteGroup(s.job, group, 0, nodes))
    down = "; ".join(f"node {n} NotReady for {t:.0f} s" for n, t in sorted(s.lost.items()))
    which = ", ".join(str(g) for g in groups)
    return (
        f"{down}: its pods were force-deleted; group{'s' if len(groups) > 1 else ''} {which} "
        "fenced (no checkpoint commits from it) and the job starts again from its last "
        "checkpoint on the remaining nodes"
    )


#: the condition a hang leaves (False, with what was said) until the next group trains, and
#: the status reason and event of the restart it causes
PROGRESSING = "Progressing"
NO_PROGRESS = "NoProgress"


def _hung(s: _Step, current: Sequence[ReplicaState], expected: int) -> bool:
    """A running group whose ranks made no progress for their bound (``liveness.judge``):
    killed at once and restarted from the last checkpoint as a failure. True when it was."""
    hang = judge(s.observed.progress, s.status.group, expected, s.now)
    if hang is None:
        return False
    message = hang.message
    set_condition(s.status, PROGRESSING, False, NO_PROGRESS, message, s.now)
    s.hard_stop = True
    _restart(s, current, RestartCause.FAILURE, NO_PROGRESS, message)
    return True


def _clear_hang(s: _Step) -> None:
    """Once a group after a hang reaches its first step, ``Progressing`` turns True."""
    st = s.status
    old = next((c for c in st.conditions if c.type == PROGRESSING), None)
    if old is None or old.status == "True" or st.phase != Phase.RUNNING:
        return
    if progressing(s.observed.progress, st.group):
        set_condition(st, PROGRESSING, True, "Training", f"group {st.group} is training", s.now)


def _report_overdue_stop(s: _Step) -> None:
    """Say why the next group does not start when an old replica outlives its stop by far: a
    pod on a node that went down stays Terminating until someone deals with the node (adl
    will not start a group beside a worker that may still run)."""
    if s.status.phase != Phase.RESTARTING:
        return
    late = [
        (r, r.stop_due)
        for r in s.observed.replicas
        if r.present
        and r.stop_due is not None
        and (s.now - r.stop_due).total_seconds() > STOP_OVERDUE_S
    ]
    if not late:
        return
    r, due = late[0]
    message = (  # no running clock in it: the status must not change on every look
        f"group {r.group} rank {r.rank} should have stopped by {due:%Y-%m-%dT%H:%M:%SZ} (is "
        "its node down?); the next group starts once it is gone"
    )
    if s.status.reason != "WaitingForStop":
        s.event("Warning", "WaitingForStop", message)
    s.phase(Phase.RESTARTING, "WaitingForStop", message)


def step(
    job: str,
    spec: AdaptiveJobSpec,
    status: AdaptiveJobStatus,
    observed: ObservedWorkers,
    desired: Sequence[str] | None,
    now: datetime,
    timing: Timing | None = None,
    *,
    quota_wait: str | None = None,
    admitted: int | None = None,
) -> list[Action]:
    """Actions that move ``job`` (``namespace/name``) one step towards what its spec and the
    scheduler want. ``desired`` is the scheduler's latest allocation (one node per replica),
    None before the first round; ``quota_wait`` says why an outside quota manager admits none
    of the job now (its wait reason then); ``admitted`` is how many replicas that manager
    admits (shown in the status; None: no manager decides). Calling it again with the same
    inputs after executing the actions yields no further actions (a fixed point)."""
    s = _Step(
        job,
        spec,
        status,
        observed,
        list(desired) if desired is not None else None,
        now,
        timing or Timing(),
        quota_wait,
    )
    st = s.status
    reflect_hints(st, now)  # the last report in status (printer columns, metrics, the pin)
    st.admitted = admitted  # what the quota manager admits, beside what the job runs
    current = observed.of_group(st.group)
    # Older groups never overlap the current one.
    s.stop(observed.others(st.group))
    lost = _remove_lost(s)
    if lost:
        _say_lost(s, current, lost)

    if st.phase.finished:
        s.stop(current)
        return s.finish()

    _record_stop(s, current)
    if spec.suspend:
        s.stop(current)
        st.allocation, st.replicas, st.ready_replicas = [], 0, 0
        st.restart_after = None
        s.phase(Phase.SUSPENDED, "Suspended", "spec.suspend is true")
        return s.finish()
    if st.phase == Phase.SUSPENDED:
        s.phase(Phase.PENDING, "Resumed", "spec.suspend is false")

    if st.phase in (Phase.PENDING, Phase.RESTARTING) or st.group == 0:
        if st.phase == Phase.RESTARTING and (
            _succeeded(current) or _stopped_after_work_done(st, current)
        ):
            s.phase(Phase.SUCCEEDED, "Succeeded", "workers finished while being stopped")
        elif observed.any_present():
            s.stop(current)  # wait for every replica to exit before the next group
            if lost:
                s.phase(st.phase, NODE_LOST, lost)
            else:
                _report_overdue_stop(s)
        else:
            _start_group(s)
        return s.finish()

    if lost and any(r.present and r.node in s.lost for r in current):
        _restart(s, current, RestartCause.PREEMPTION, NODE_LOST, lost)
        return s.finish()
    _active(s, current)
    _clear_hang(s)
    return s.finish()


def _say_lost(s: _Step, current: Sequence[ReplicaState], message: str) -> None:
    """The Warning event of a lost node, unless the phase change it causes says it (a running
    group that lost a replica restarts with this reason)."""
    st = s.status
    restarts = (
        st.phase in (Phase.STARTING, Phase.RUNNING)
        and not s.spec.suspend
        and any(r.present and r.node in s.lost for r in current)
    )
    if not restarts:
        s.event("Warning", NODE_LOST, message)


def teardown(job: str, spec: AdaptiveJobSpec, observed: ObservedWorkers) -> list[Action]:
    """Actions for a deleted job: stop every group with a present replica."""
    groups = sorted({r.group for r in observed.replicas if r.present and not r.terminating})
    return [DeleteGroup(job, g, spec.termination_grace_period_seconds) for g in groups]
