"""What the controller asks a backend to do. Plain frozen data: the backends (local processes,
Kubernetes pods) execute them in order; executing one twice must be harmless."""

from __future__ import annotations

from dataclasses import dataclass

from adl.controller.env import WorkerSite, worker_env
from adl.models import AdaptiveJobStatus


@dataclass(frozen=True)
class SetStatus:
    """Persist this status. Always first in the list, so that a backend that crashes after it
    finds the decision recorded and converges instead of deciding twice."""

    status: AdaptiveJobStatus


@dataclass(frozen=True)
class CreateGroup:
    """Launch the replicas ``ranks`` of worker group ``group`` on ``allocation`` (one node per
    replica). ``ranks`` is every rank for a fresh group, or the ones still missing when a
    backend restarted half-way through a launch."""

    job: str
    group: int
    allocation: tuple[str, ...]
    ranks: tuple[int, ...]
    #: the wall time (Unix seconds) since which the job has held GPUs without a break: this
    #: group's start after a suspend or a wait for GPUs, else the start of the group it replaces
    scheduled_since: float | None = None

    def env(self, rank: int, site: WorkerSite) -> dict[str, str]:
        """The ADL_* environment of one replica (identical on every backend)."""
        return worker_env(self.job, self.group, self.allocation, rank, site, self.scheduled_since)


@dataclass(frozen=True)
class DeleteGroup:
    """Stop every live replica of ``group``: SIGTERM (workers checkpoint and exit 143), then a
    hard kill after ``grace_s``. Idempotent: replicas already gone are skipped.

    With ``lost_nodes``: only the group's replicas on those nodes, removed at once (grace 0),
    those already being stopped included. Their nodes are lost (NotReady past the bound): no
    one there will confirm a graceful stop, so the objects that stand for them would otherwise
    stay forever (a Kubernetes pod Terminating on a dead node)."""

    job: str
    group: int
    grace_s: int
    lost_nodes: tuple[str, ...] = ()


@dataclass(frozen=True)
class RemoveExited:
    """The exited replicas of ``groups`` (older than the one before the current group) are
    of no further use: a backend whose exited workers leave objects behind removes them (a
    finished Kubernetes pod keeps its object, and its node's view of it, until deleted; the
    previous group's are kept for post-mortem logs). Replicas already being removed are
    skipped; nothing alive is touched."""

    job: str
    groups: tuple[int, ...]


@dataclass(frozen=True)
class EmitEvent:
    """A user-visible event (Kubernetes Event, or a line in the local job's event log)."""

    type: str  # Normal | Warning
    reason: str
    message: str


Action = SetStatus | CreateGroup | DeleteGroup | RemoveExited | EmitEvent
