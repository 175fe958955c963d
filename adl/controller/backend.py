"""The contract between the shared driver (``adl.controller.driver``) and a backend.

A backend owns the workers and the state store of one kind of cluster: the local daemon
(processes, SQLite) or the Kubernetes operator (pods, the AdaptiveJob objects). It implements
only these primitives, the way torch elastic's agents implement start/stop/monitor and leave
``run()`` to ``SimpleElasticAgent``; what to do with them (step the lifecycle, execute its
actions in order, run the scheduling round, accrue service, explain decisions) is written once,
in the driver. Methods are synchronous: the operator runs the driver in a worker thread.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Protocol, runtime_checkable

from adl.controller.actions import Action, CreateGroup, DeleteGroup, EmitEvent, RemoveExited
from adl.controller.job_record import JobRecord
from adl.controller.lifecycle import ObservedWorkers
from adl.models import AdaptiveJobStatus, Condition
from adl.sched.capacity import CapacityAsk, CapacityRule
from adl.sched.emptying import NodeToEmpty
from adl.sched.types import NodeInfo


class WorkerBackend(Protocol):
    """What the driver needs from a backend, for one job's step and for the round."""

    # ---- one job
    def observe(self, job: JobRecord) -> ObservedWorkers:
        """Every replica of every group of the job that is still present."""
        ...

    def set_status(self, job: JobRecord, status: AdaptiveJobStatus) -> None:
        """Persist the job's status (the lifecycle's decision, recorded before any effect)."""
        ...

    def create_group(self, job: JobRecord, action: CreateGroup) -> None:
        """Launch the replicas ``action.ranks`` of the group (idempotent)."""
        ...

    def delete_group(self, job: JobRecord, action: DeleteGroup) -> None:
        """Stop the group gracefully (idempotent)."""
        ...

    def remove_exited(self, job: JobRecord, action: RemoveExited) -> None:
        """Remove what the exited replicas of ``action.groups`` left behind, if anything
        (idempotent; nothing alive is touched)."""
        ...

    def after_step(self, job: JobRecord, actions: Sequence[Action]) -> None:
        """The step's actions are carried out: settle what the backend keeps about the job
        beside its workers and status, from their outcome (Kubernetes: the job's Kueue
        Workload finished, or its quota given back once an evicted job's pods are gone).
        Not called when an action failed: the next step settles it."""
        ...

    def emit_event(self, job: JobRecord, event: EmitEvent) -> None:
        """A user-visible event of the job."""
        ...

    # ---- the round
    def round_jobs(self) -> Sequence[JobRecord]:
        """Every job the round may consider (deleted ones left out), as stored now."""
        ...

    def round_nodes(self) -> Sequence[NodeInfo]:
        """The schedulable nodes with the GPUs (or slots) adl may hand out on each."""
        ...

    def set_desired(self, changed: Mapping[str, list[str]]) -> None:
        """Record the scheduler's new answers (job -> one node per replica)."""
        ...

    def record_service(self, service: Mapping[str, float]) -> None:
        """Persist the jobs' attained service (GPU-seconds), the fair-share input."""
        ...

    def record_conditions(self, conditions: Mapping[str, list[Condition]]) -> None:
        """Persist the whole condition list of each job given (the round marks a job it had to
        leave out ``Schedulable=False`` and clears the mark once it takes part again)."""
        ...


@runtime_checkable
class AsksForCapacity(Protocol):
    """Opt-in capability (Kueue jobframework style): the backend can make more GPUs appear,
    the operator through an autoscaler's pending pods. After each round the driver hands it
    what the jobs would put to good use beyond the cluster (``adl.sched.capacity``)."""

    def capacity_rule(self) -> CapacityRule | None:
        """When and how much to ask for; None: asking is off (the default)."""
        ...

    def ask_capacity(self, asks: Sequence[CapacityAsk]) -> None:
        """Make exactly ``asks`` visible (fewer than before: withdraw the rest). Must not
        raise: a failed ask is logged and retried by the next round."""
        ...


@runtime_checkable
class EmptiesNodes(Protocol):
    """Opt-in capability beside :class:`AsksForCapacity`: the autoscaler removes a node once
    it is empty, so the driver may hold nodes back from the jobs (``adl.sched.emptying``):
    offered to no job, not cordoned, until they are gone or new demand wants them back. The
    driver keeps which nodes are held back; the backend says so on the jobs."""

    def kept_by_others(self) -> Collection[str]:
        """The nodes that something besides adl's workers keeps from being empty: emptying
        them would free nothing (only an empty node is removed)."""
        ...

    def nodes_emptied(self, chosen: Sequence[NodeToEmpty], released: Sequence[str]) -> None:
        """``chosen`` are held back from the next round on (tell each job there why);
        ``released`` are offered again. Must not raise."""
        ...
