"""When the operator runs a scheduling round: the interval, forced rounds, and a forced round
that found another one running (it must not be lost)."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any, cast

import pytest

from adl.operator import handlers
from adl.operator.handlers import Runtime, cluster_round, round_soon
from adl.operator.store import KubeStore
from tests.event_sink import EventRecorder
from tests.fakes import EveryoneOneGpu, NoPolicy


class EmptyCluster:
    """The store calls a round makes, on a cluster with no jobs."""

    def list_jobs(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return []

    def list_nodes(self) -> list[dict[str, Any]]:
        return []

    def list_all_pods(self) -> list[dict[str, Any]]:
        return []


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> Runtime:
    monkeypatch.setattr(
        handlers, "DEFAULT_CONFIG", replace(handlers.DEFAULT_CONFIG, round_interval_s=3600.0)
    )
    monkeypatch.setattr(handlers, "DEFAULT_CONFIG", replace(handlers.DEFAULT_CONFIG, namespaces=[]))
    rt = Runtime(cast(KubeStore, EmptyCluster()), NoPolicy(), events=EventRecorder())
    rt.rounds.last = time.monotonic()  # a round just ran
    return rt


async def test_rounds_wait_for_the_interval_unless_forced(runtime: Runtime) -> None:
    assert not await cluster_round(runtime)
    assert await cluster_round(runtime, force=True)
    assert not await cluster_round(runtime)


async def test_a_forced_round_that_found_one_running_runs_at_the_next_tick(
    runtime: Runtime,
) -> None:
    async with runtime.round_lock:  # a round is running (it may have read the jobs already)
        assert not await cluster_round(runtime, force=True)
    assert await cluster_round(
        runtime
    )  # the next tick runs it, although the interval has not passed
    assert not await cluster_round(runtime)  # once


async def test_an_unforced_call_during_a_round_asks_for_nothing(runtime: Runtime) -> None:
    async with runtime.round_lock:
        assert not await cluster_round(runtime)
    assert not await cluster_round(runtime)


class BrokenCluster(EmptyCluster):
    def list_jobs(self, namespace: str | None = None) -> list[dict[str, Any]]:
        raise ConnectionError("API server unreachable")


async def test_a_failed_round_after_a_deletion_does_not_fail_the_deletion(
    runtime: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    runtime.store = cast(KubeStore, BrokenCluster())
    await round_soon(runtime, "deleting ns/gone")  # does not raise: the finalizer can go
    assert runtime.rounds.due and "ns/gone" in caplog.text
    runtime.store = cast(KubeStore, EmptyCluster())
    assert await cluster_round(
        runtime
    )  # the next tick runs it, although the interval has not passed


class OneJobGone:
    """Two jobs to place; the first is deleted between the round's read and its write."""

    def __init__(self) -> None:
        self.patched: list[str] = []

    def list_jobs(self, namespace: str | None = None) -> list[dict[str, Any]]:
        template = {"spec": {"containers": [{"name": "t", "image": "i", "command": ["x"]}]}}
        return [
            {
                "metadata": {
                    "name": name,
                    "namespace": "ns",
                    "uid": name,
                    "creationTimestamp": f"2026-01-01T00:00:0{i}Z",
                },
                "spec": {"template": template, "maxReplicas": 1},
            }
            for i, name in enumerate(["gone", "kept"])
        ]

    def list_nodes(self) -> list[dict[str, Any]]:
        return [
            {
                "metadata": {"name": "n1", "labels": {}},
                "status": {"allocatable": {"nvidia.com/gpu": "2"}},
                "spec": {},
            }
        ]

    def list_all_pods(self) -> list[dict[str, Any]]:
        return []

    def patch_job_annotations(self, namespace: str, name: str, ann: dict[str, Any]) -> None:
        from kubernetes.client.exceptions import ApiException

        if name == "gone":
            raise ApiException(status=404, reason="Not Found")
        self.patched.append(name)


async def test_a_job_deleted_during_the_round_does_not_cost_the_others_their_answers(
    runtime: Runtime,
) -> None:
    cluster = OneJobGone()
    runtime.store = cast(KubeStore, cluster)
    runtime.policy = EveryoneOneGpu()
    assert await cluster_round(runtime, force=True)
    assert cluster.patched == ["kept"]
