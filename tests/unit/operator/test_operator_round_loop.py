"""The operator's one round loop (``handlers.round_loop``): when it runs a round, that it waits
for an asked-for round rather than polling, that it rides out an unreachable API server, and
that kopf's clean-up stops it."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any, cast

import kopf
import pytest
import urllib3

from adl.operator import handlers
from adl.operator.handlers import Runtime, round_loop, round_wait_s
from adl.operator.store import KubeStore
from tests.event_sink import EventRecorder
from tests.fakes import NoPolicy
from tests.waiting import eventually

INTERVAL_S = 3600.0  # no round comes from the interval within a test
#: the longest a test waits for the loop to do something
LIMIT_S = 10.0


class CountingCluster:
    """The store calls a round makes, on a cluster with no jobs: counts the rounds (each
    lists the jobs once), and fails the first ``failures`` of them as an outage would."""

    def __init__(self, failures: int = 0) -> None:
        self.rounds = 0
        self.failures = failures

    def list_jobs(self, namespace: str | None = None) -> list[dict[str, Any]]:
        self.rounds += 1
        if self.failures:
            self.failures -= 1
            raise urllib3.exceptions.NewConnectionError(None, "connection refused")  # type: ignore[arg-type]
        return []

    def list_nodes(self) -> list[dict[str, Any]]:
        return []

    def list_all_pods(self) -> list[dict[str, Any]]:
        return []


async def rounds_reach(cluster: CountingCluster, count: int) -> None:
    await eventually(lambda: cluster.rounds >= count, LIMIT_S, what=f"{count} rounds")


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> Runtime:
    config = replace(handlers.DEFAULT_CONFIG, round_interval_s=INTERVAL_S, namespaces=[])
    monkeypatch.setattr(handlers, "DEFAULT_CONFIG", config)
    rt = Runtime(cast(KubeStore, CountingCluster()), NoPolicy(), events=EventRecorder())
    rt.jobs.add("ns/j")
    rt.rounds.last = time.monotonic()  # a round just ran
    return rt


@pytest.fixture
async def loop_of(runtime: Runtime) -> AsyncIterator[CountingCluster]:
    """The loop running over ``runtime``; stopped as kopf's clean-up stops it."""
    runtime.round_task = asyncio.create_task(round_loop(runtime))
    try:
        yield cast(CountingCluster, runtime.store)
    finally:
        memo = kopf.Memo()
        memo.runtime = runtime
        await handlers.cleanup(memo=memo)


def test_when_the_next_round_is_due(runtime: Runtime) -> None:
    now = runtime.rounds.last + 100.0
    assert round_wait_s(runtime, now) == pytest.approx(INTERVAL_S - 100.0)
    assert round_wait_s(runtime, runtime.rounds.last + INTERVAL_S + 1) == 0.0
    runtime.rounds.ask()
    assert round_wait_s(runtime, now) == 0.0
    runtime.rounds.due = False
    runtime.jobs.clear()  # no job: no periodic round, which would only list the cluster
    assert round_wait_s(runtime, runtime.rounds.last + INTERVAL_S + 1) == math.inf


async def test_an_asked_for_round_runs_at_once_and_once(
    runtime: Runtime, loop_of: CountingCluster
) -> None:
    runtime.rounds.ask()
    await rounds_reach(loop_of, 1)
    assert not runtime.rounds.due
    runtime.rounds.ask()
    await rounds_reach(loop_of, 2)
    assert loop_of.rounds == 2 and not runtime.rounds.due


async def test_a_round_asked_for_while_one_runs_runs_after_it(
    runtime: Runtime, loop_of: CountingCluster
) -> None:
    """A forced round that found one running (which may have read the jobs before the change
    that forced it) is not lost: the loop runs it once the running one is over."""
    async with runtime.round_lock:
        assert not await handlers.cluster_round(runtime, force=True)
        assert runtime.rounds.due and loop_of.rounds == 0
    await rounds_reach(loop_of, 1)
    assert not runtime.rounds.due


async def test_the_loop_rides_out_an_unreachable_api_server(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(handlers, "TICK_BACKOFF_S", 0.05)
    cluster = CountingCluster(failures=2)
    runtime.store = cast(KubeStore, cluster)
    runtime.round_task = asyncio.create_task(round_loop(runtime))
    try:
        runtime.rounds.ask()
        await rounds_reach(cluster, 3)  # two failed tries, then the round
        assert not runtime.rounds.due and not runtime.round_task.done()
    finally:
        memo = kopf.Memo()
        memo.runtime = runtime
        await handlers.cleanup(memo=memo)
    unavailable = [r for r in caplog.records if "API server is unavailable" in r.message]
    assert len(unavailable) == 2 and not [r for r in caplog.records if r.exc_info]


async def test_the_clean_up_stops_the_loop(runtime: Runtime) -> None:
    task = runtime.round_task = asyncio.create_task(round_loop(runtime))
    memo = kopf.Memo()
    memo.runtime = runtime
    await handlers.cleanup(memo=memo)
    assert task.done() and runtime.round_task is None


async def test_the_first_job_wakes_an_idle_loop(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no job the loop waits without a deadline (``math.inf``); the first job's event
    must wake it to start its interval, or no periodic round would ever run."""

    async def no_reconcile(rt: Any, namespace: str | None, name: str) -> None:
        return None

    monkeypatch.setattr(handlers, "reconcile_job", no_reconcile)
    runtime.jobs.clear()
    runtime.rounds.wake.clear()
    running = {  # placed already: its event forces no round of its own
        "metadata": {"name": "j", "namespace": "ns", "uid": "u",
                     "annotations": {"adl.dev/allocation": '["n1"]'}},
        "spec": {},
        "status": {"phase": "Running"},
    }  # fmt: skip
    memo = kopf.Memo()
    memo.runtime = runtime
    await handlers.on_job_event(
        type="ADDED", body=cast(kopf.Body, running), namespace="ns", name="j", memo=memo
    )
    assert runtime.rounds.wake.is_set() and runtime.jobs == {"ns/j"}
    assert cast(CountingCluster, runtime.store).rounds == 0
