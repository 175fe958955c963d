"""The round loop's task posts its events through kopf's poster, captured in a job handler:
outside kopf's per-object tasks ``kopf.event`` has no queue (the round failed on its first
decision event before)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import kopf
import pytest
from kopf._core.engines import posting

from adl.operator import event_posting
from adl.operator.backend import post_kopf_event
from adl.operator.handlers import Runtime
from adl.operator.store import KubeStore
from tests.fakes import NoPolicy

BODY: dict[str, Any] = {
    "apiVersion": "adl.dev/v1",
    "kind": "AdaptiveJob",
    "metadata": {"name": "j", "namespace": "default", "uid": "u1"},
}


async def test_a_task_outside_kopf_posts_through_the_captured_poster() -> None:
    queue: asyncio.Queue[Any] = asyncio.Queue()
    posting.settings_var.set(kopf.OperatorSettings())  # kopf sets it for all of its tasks

    async def handler() -> event_posting.Poster | None:  # as kopf runs one object's handler
        posting.event_queue_loop_var.set(asyncio.get_running_loop())
        posting.event_queue_var.set(queue)
        return event_posting.capture()

    async def round_task(poster: event_posting.Poster | None) -> None:  # started at start-up
        event_posting.install(poster)
        kopf.event(BODY, type="Normal", reason="Rescheduled", message="1 -> 2 replicas")

    async def bare_task() -> None:
        kopf.event(BODY, type="Normal", reason="Rescheduled", message="lost")

    with pytest.raises(LookupError):  # what the round loop met before
        await asyncio.create_task(bare_task())
    assert await asyncio.create_task(_capture_here()) is None  # no poster outside kopf
    poster = await asyncio.create_task(handler())
    assert poster is not None
    await asyncio.create_task(round_task(poster))
    event = await asyncio.wait_for(queue.get(), 5)
    assert (event.reason, event.message) == ("Rescheduled", "1 -> 2 replicas")


async def _capture_here() -> event_posting.Poster | None:
    return event_posting.capture()


async def test_the_backends_default_sink_posts_through_kopf() -> None:
    """Tests hand ``Runtime``/``KubeWorkerBackend`` a recording sink; the operator's own (the
    default) puts the Event on kopf's posting queue, its message cut to what an Event holds."""
    queue: asyncio.Queue[Any] = asyncio.Queue()
    posting.settings_var.set(kopf.OperatorSettings())

    async def in_a_handler() -> None:  # kopf's context, as in one object's handler
        posting.event_queue_loop_var.set(asyncio.get_running_loop())
        posting.event_queue_var.set(queue)
        runtime = Runtime(cast(KubeStore, object()), NoPolicy())
        assert runtime.backend.events is post_kopf_event
        runtime.backend.events(BODY, "Warning", "NoNodePool", "x" * 1500)

    await asyncio.create_task(in_a_handler())
    event = await asyncio.wait_for(queue.get(), 5)
    assert (event.type, event.reason, event.message) == ("Warning", "NoNodePool", "x" * 1000)
