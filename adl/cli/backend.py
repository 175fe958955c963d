"""The interface the CLI drives; one implementation per backend (local daemon, Kubernetes)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

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


class BackendError(RuntimeError):
    """A failure the CLI shows to the user as one clear line (no traceback)."""


class Backend(Protocol):
    """What every backend offers the CLI. Raise BackendError for user-facing failures."""

    def submit(self, name: str, namespace: str, spec: AdaptiveJobSpec) -> JobView: ...

    def list(self, namespace: str | None = None) -> list[JobView]: ...

    def get(self, name: str, namespace: str) -> JobView: ...

    def logs(
        self, name: str, namespace: str, *, follow: bool = False, replica: int | None = None
    ) -> Iterator[str]: ...

    def delete(self, name: str, namespace: str) -> None: ...

    def set_suspend(self, name: str, namespace: str, suspend: bool) -> bool:
        """Set ``spec.suspend``; False when it already had that value."""
        ...
