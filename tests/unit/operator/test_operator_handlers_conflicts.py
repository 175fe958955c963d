"""resourceVersion conflicts (which kmock never produces): the reconcile re-reads the job and
decides again instead of overwriting a concurrent write or creating pods on a stale decision."""

from __future__ import annotations

from typing import Any

from operator_kit import MemoryCluster

from adl.operator import handlers
from tests.event_sink import EventRecorder


class FakeStore(MemoryCluster):
    """Another writer sneaks in once, right after our first read."""

    def __init__(self) -> None:
        super().__init__()
        self.status_writes: list[dict[str, Any]] = []
        self.reads = 0
        self.concurrent_writes = 1

    def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        self.reads += 1
        body = super().get_job(namespace, name)
        if self.concurrent_writes:
            self.concurrent_writes -= 1
            self.job["status"]["hints"] = {"initBatchSize": 8}  # e.g. the API stored hints
            self._bump()
        return body

    def patch_job_status(
        self, namespace: str, name: str, status: dict[str, Any], resource_version: str | None
    ) -> None:
        super().patch_job_status(namespace, name, status, resource_version)
        self.status_writes.append(status)


async def test_a_conflicting_write_is_decided_again_from_a_fresh_read() -> None:
    store = FakeStore()
    rt = handlers.Runtime(store, policy=None, events=EventRecorder())  # type: ignore[arg-type]
    await handlers.reconcile_job(rt, "ns", "j")
    assert store.reads == 2  # first attempt hit the conflict, the second re-read
    assert len(store.status_writes) == 1  # only the fresh decision was written
    assert store.job["status"]["hints"] == {"initBatchSize": 8}  # the other write survived
    assert store.job["status"]["group"] == 1 and store.job["status"]["phase"] == "Starting"
    assert [p["metadata"]["name"] for p in store.pods] == ["j-g1-0"]  # created exactly once


async def test_repeated_conflicts_give_up_without_acting() -> None:
    store = FakeStore()
    store.concurrent_writes = 100
    rt = handlers.Runtime(store, policy=None, events=EventRecorder())  # type: ignore[arg-type]
    await handlers.reconcile_job(rt, "ns", "j")
    assert store.reads == 5 and store.status_writes == [] and store.pods == []
