"""What a job client (the ``adl`` CLI) sees of a backend: the job view, the error it shows, the
:class:`Backend` protocol every backend implements, and opt-in capabilities.

Plain data and Protocols, no I/O. It sits below the backends (``adl.local``, ``adl.operator``)
that implement it and beside, not inside, ``adl.controller``: importing that package loads the
policy (numpy, scipy), which ``adl ls`` should not pay for.

A capability is something only some backends can do (Kueue's ``JobWith*`` interfaces): a
``runtime_checkable`` Protocol the client tests with ``isinstance(backend, Capability)``, so it
never needs to know backend classes."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, runtime_checkable

from adl.models import AdaptiveJobSpec, AdaptiveJobStatus


@dataclass(frozen=True)
class JobView:
    """One job as a backend reports it to the CLI."""

    name: str
    namespace: str
    spec: AdaptiveJobSpec
    status: AdaptiveJobStatus
    created: datetime | None = None
    events: list[str] = field(default_factory=list)
    #: the Kueue LocalQueue it runs in (its ``kueue.x-k8s.io/queue-name`` label); None for a
    #: job in no queue, and on backends without Kueue
    queue: str | None = None


class BackendError(RuntimeError):
    """A failure the CLI shows to the user as one clear line (no traceback)."""


class Backend(Protocol):
    """What every backend offers the CLI. Raise BackendError for user-facing failures."""

    def submit(
        self, name: str, namespace: str, spec: AdaptiveJobSpec, *, queue: str | None = None
    ) -> JobView:
        """``queue``: the Kueue LocalQueue to run in (Kubernetes; others ignore it)."""
        ...

    def list(self, namespace: str | None = None) -> list[JobView]: ...

    def get(self, name: str, namespace: str) -> JobView: ...

    def logs(
        self, name: str, namespace: str, *, follow: bool = False, replica: int | None = None
    ) -> Iterator[str]: ...

    def delete(self, name: str, namespace: str) -> None: ...

    def set_suspend(self, name: str, namespace: str, suspend: bool) -> bool:
        """Set ``spec.suspend``; False when it already had that value."""
        ...


# ---------------------------------------------------------------------- capabilities


@runtime_checkable
class ReportsStaleness(Protocol):
    """A backend whose reported state can fall behind (the local one, while its daemon is
    down: nothing updates the job records then)."""

    def stale_note(self, views: Iterable[JobView]) -> str | None:
        """One line warning the reader of ``views`` that they may be out of date; None when
        they are current."""
        ...


@runtime_checkable
class RunsOwnController(Protocol):
    """A backend whose controller can be down while jobs exist (the local daemon): workers
    then run and exit unobserved, and how a job ended is recorded only once it is back."""

    def daemon_running(self) -> bool:
        """Whether the controller runs now."""
        ...


@runtime_checkable
class IgnoresSettings(Protocol):
    """A backend that accepts a spec but leaves some of its settings unused (the local one runs
    the command on this machine: no container image, no checkpoint volume)."""

    def ignored_settings(self) -> frozenset[str]:
        """The settings it does not use: ``image`` (the trainer container's) and ``checkpoint``
        (the volume: claim, storage class, size)."""
        ...
