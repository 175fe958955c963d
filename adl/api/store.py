"""What the API service needs from a backend: a small protocol both backends implement (the
local daemon over SQLite, the operator over CRD status and Secrets).

Every method may be a plain function or a coroutine function: the service awaits results that
are awaitable, so a blocking SQLite store and an async Kubernetes store both plug in.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol, TypeAlias, TypeVar

from adl.models import AdaptiveJobStatus, GroupInfo, Heartbeat, Hints

T = TypeVar("T")
MaybeAwaitable: TypeAlias = T | Awaitable[T]


class UnknownJob(KeyError):
    """The job does not exist (any more): the service answers 404."""


@dataclass(frozen=True)
class JobSnapshot:
    """One job as the metrics endpoint sees it."""

    key: str  # namespace/name
    status: AdaptiveJobStatus
    gpus_per_replica: int = 1


class ApiStore(Protocol):
    def token_owner(self, token: str, job: str) -> MaybeAwaitable[str | None]:
        """The job (``namespace/name``) this bearer token belongs to, or None; ``job`` (the
        one the request names) when it is one of them. Compare in constant time
        (``adl.api.auth.find_owner``)."""
        ...

    def put_hints(self, job: str, hints: Hints) -> MaybeAwaitable[None]:
        """Store the job's latest report; raise ``UnknownJob`` when the job is gone."""
        ...

    def get_hints(self, job: str) -> MaybeAwaitable[Hints | None]:
        """The last report, None before the first; raise ``UnknownJob`` when the job is gone."""
        ...

    def put_heartbeat(self, job: str, beat: Heartbeat) -> MaybeAwaitable[None]:
        """Hand a rank's heartbeat to the controller's ``ProgressBook`` (it stamps the time);
        raise ``UnknownJob`` when the job is gone."""
        ...

    def group_info(self, job: str) -> MaybeAwaitable[GroupInfo | None]:
        """Rendezvous facts of the current group, None while no group was started."""
        ...

    def list_jobs(self) -> MaybeAwaitable[Iterable[JobSnapshot]]:
        """Every job the backend knows of (metrics)."""
        ...

    def ready(self) -> MaybeAwaitable[bool]:
        """Whether the backing state store answers (readiness probe)."""
        ...


async def resolve(value: MaybeAwaitable[T]) -> T:
    """The value, awaited when a store method was a coroutine."""
    if inspect.isawaitable(value):
        return await value
    return value


async def call(method: Callable[..., MaybeAwaitable[T]], *args: object) -> T:
    """``method(*args)``: awaited when it is a coroutine function, else run in a worker thread,
    so a blocking store (SQLite waiting up to 30 s for a write lock) never stalls the event loop
    that serves every other request (and, in the operator, kopf)."""
    if inspect.iscoroutinefunction(method):
        return await method(*args)
    return await resolve(await asyncio.to_thread(method, *args))
