"""resourceVersion conflicts (which kmock never produces): the reconcile re-reads the job and
decides again instead of overwriting a concurrent write or creating pods on a stale decision."""

from __future__ import annotations

import copy
from typing import Any

from adl.operator import handlers
from adl.operator.store import Conflict

TEMPLATE = {"spec": {"containers": [{"name": "t", "image": "i", "command": ["x"]}]}}


class FakeStore:
    """An API server in memory that bumps resourceVersion on every write and rejects status
    writes carrying an old one, like the real one does."""

    def __init__(self) -> None:
        self.job: dict[str, Any] = {
            "metadata": {
                "name": "j",
                "namespace": "ns",
                "uid": "u",
                "resourceVersion": "1",
                "annotations": {"adl.dev/allocation": '["n1"]'},
            },
            "spec": {"template": TEMPLATE},
            "status": {},
        }
        self.pods: list[dict[str, Any]] = []
        self.status_writes: list[dict[str, Any]] = []
        self.reads = 0
        self.concurrent_writes = 1  # another writer sneaks in once, right after our first read

    def _bump(self) -> None:
        rv = int(self.job["metadata"]["resourceVersion"]) + 1
        self.job["metadata"]["resourceVersion"] = str(rv)

    def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        self.reads += 1
        body = copy.deepcopy(self.job)
        if self.concurrent_writes:
            self.concurrent_writes -= 1
            self.job["status"]["hints"] = {"initBatchSize": 8}  # e.g. the API stored hints
            self._bump()
        return body

    def patch_job_status(
        self, namespace: str, name: str, status: dict[str, Any], resource_version: str | None
    ) -> None:
        if resource_version and resource_version != self.job["metadata"]["resourceVersion"]:
            raise Conflict("stale")
        self.status_writes.append(status)
        self.job["status"].update(status)
        self._bump()

    def patch_job_annotations(self, namespace: str, name: str, ann: dict[str, Any]) -> None:
        self.job["metadata"]["annotations"].update(ann)
        self._bump()

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return copy.deepcopy(self.pods)

    def create(self, obj: dict[str, Any]) -> bool:
        if obj["kind"] == "Pod":
            self.pods.append(obj)
        return True

    def get_secret(self, namespace: str, name: str) -> None:
        return None

    def get_pvc(self, namespace: str, name: str) -> None:
        return None

    def delete_pod(self, namespace: str, name: str, grace_s: int) -> None:
        self.pods = [p for p in self.pods if p["metadata"]["name"] != name]


async def test_a_conflicting_write_is_decided_again_from_a_fresh_read(monkeypatch: Any) -> None:
    monkeypatch.setattr(handlers, "_event", lambda *a, **k: None)
    store = FakeStore()
    rt = handlers.Runtime(store, policy=None)  # type: ignore[arg-type]
    await handlers.reconcile_job(rt, "ns", "j")
    assert store.reads == 2  # first attempt hit the conflict, the second re-read
    assert len(store.status_writes) == 1  # only the fresh decision was written
    assert store.job["status"]["hints"] == {"initBatchSize": 8}  # the other write survived
    assert store.job["status"]["group"] == 1 and store.job["status"]["phase"] == "Starting"
    assert [p["metadata"]["name"] for p in store.pods] == ["j-g1-0"]  # created exactly once


async def test_repeated_conflicts_give_up_without_acting(monkeypatch: Any) -> None:
    monkeypatch.setattr(handlers, "_event", lambda *a, **k: None)
    store = FakeStore()
    store.concurrent_writes = 100
    rt = handlers.Runtime(store, policy=None)  # type: ignore[arg-type]
    await handlers.reconcile_job(rt, "ns", "j")
    assert store.reads == 5 and store.status_writes == [] and store.pods == []
