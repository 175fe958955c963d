"""The job as the controller sees it: what a backend keeps about one job, enough for the round
(:mod:`adl.controller.rounds`), the history of completed work (:mod:`adl.controller.history`)
and the lifecycle. A module of its own so that those can share it without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from adl.models import AdaptiveJobSpec, AdaptiveJobStatus


@dataclass(frozen=True)
class JobRecord:
    """What a backend keeps about one job: enough for the round and for the lifecycle."""

    key: str  # namespace/name
    spec: AdaptiveJobSpec
    status: AdaptiveJobStatus
    created: datetime
    desired: list[str] | None = None  # the scheduler's latest answer; None before any round
    #: the most replicas an outside quota manager admitted (Kueue: ``adl.operator.kueue``);
    #: 0 while it admits none (the job sits out), None when no quota manager decides
    ceiling: int | None = None
    #: why that manager admits none now (the job's wait reason while ``ceiling`` is 0)
    quota_wait: str | None = None
    #: the only nodes the job may run on (Kueue: the nodes of its admitted flavor), or None:
    #: any node of the round
    nodes: frozenset[str] | None = None
    #: what the backend read of the job for this step, which its primitives need (Kubernetes:
    #: the object with its resourceVersion, the pods ``observe`` found, the Workload): it
    #: travels with the record through ``observe``, the actions and ``after_step``, so the
    #: backend keeps no per-step state of its own. Opaque to the controller (each backend
    #: checks it is its own); None where the backend needs nothing, and in the round
    context: object | None = field(default=None, compare=False, repr=False)
