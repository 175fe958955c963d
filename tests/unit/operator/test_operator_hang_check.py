"""The operator's side of hung-rank detection: the API's heartbeats reach the operator's book,
and the timer reconciles a Running job only when its heartbeats say it hangs (a hung group
sends no pod event)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from adl.controller.liveness import ProgressBook
from adl.models import Heartbeat
from adl.operator.api_store import OperatorApiStore
from adl.operator.handlers import hang_suspected

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def body(phase: str = "Running", group: int = 3) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": "a"},
        "status": {"phase": phase, "group": group, "allocation": ["n0", "n1"]},
    }


def test_a_running_job_is_suspected_once_its_heartbeats_say_it_hangs() -> None:
    clock = Clock()
    book = ProgressBook(clock)
    store = OperatorApiStore(store=None, progress=book)  # type: ignore[arg-type]
    for r in (0, 1):  # through the API's store, as a worker's PUT arrives
        asyncio.run(store.put_heartbeat("ns/a", Heartbeat(group=3, rank=r, steps=50)))
    assert not hang_suspected(book, body(), T0 + timedelta(seconds=10))
    clock.now = T0 + timedelta(seconds=50)  # rank 0 still beats, stuck; rank 1 went silent
    asyncio.run(store.put_heartbeat("ns/a", Heartbeat(group=3, rank=0, steps=50)))
    assert hang_suspected(book, body(), clock.now)
    assert not hang_suspected(book, body(group=4), clock.now)  # another group's heartbeats
    assert not hang_suspected(book, body(phase="Restarting"), clock.now)
    assert not hang_suspected(book, {"metadata": {}, "status": {}}, clock.now)
