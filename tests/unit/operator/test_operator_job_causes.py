"""Which changes of a job wake its reconcile (``adl.operator.job_causes``), and what a hints
report writes instead of one (``OperatorApiStore.put_hints``)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

import kopf
import pytest
from operator_kit import MemoryCluster

from adl.models import Hints
from adl.operator import handlers
from adl.operator.api_store import HINTS_WRITE_TRIES, OperatorApiStore
from adl.operator.job_causes import cause_digest
from adl.operator.store import KubeStore
from tests.event_sink import EventRecorder

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)

BODY: dict[str, Any] = {
    "apiVersion": "adl.dev/v1",
    "kind": "AdaptiveJob",
    "metadata": {
        "name": "j",
        "namespace": "ns",
        "uid": "u1",
        "resourceVersion": "7",
        "generation": 2,
        "labels": {"team": "a"},
        "annotations": {"adl.dev/allocation": '["n1"]', "adl.dev/token-sha256": "ab"},
        "finalizers": ["kopf.zalando.org/KopfFinalizerMarker"],
    },
    "spec": {"maxReplicas": 4, "suspend": False},
    "status": {
        "phase": "Running",
        "group": 1,
        "allocation": ["n1"],
        "replicas": 1,
        "hints": {"initBatchSize": 32, "batchSize": 64},
        "batchSize": 64,
        "attainedServiceS": 10.0,
    },
}


def changed(edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    body = copy.deepcopy(BODY)
    edit(body)
    return body


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(body: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = body
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value

    return edit


def _annotate(key: str, value: str) -> Callable[[dict[str, Any]], None]:
    def edit(body: dict[str, Any]) -> None:
        body["metadata"]["annotations"][key] = value

    return edit


def _label(key: str, value: str) -> Callable[[dict[str, Any]], None]:
    def edit(body: dict[str, Any]) -> None:
        body["metadata"]["labels"][key] = value

    return edit


QUIET = {
    "a hints report": _set("status.hints", {"initBatchSize": 32, "batchSize": 128}),
    "what the status shows of it": _set("status.batchSize", 128),
    "its goodput": _set("status.goodput", 3.5),
    "the finishing pin": _set("status.finishingSince", "2026-05-01T12:00:00Z"),
    "the round's service": _set("status.attainedServiceS", 11.0),
    "a new resourceVersion": _set("metadata.resourceVersion", "8"),
    "kopf's diff base": _annotate("adl.dev/last-handled-configuration", '{"spec": {}}'),
    "kopf's marker": _annotate("adl.dev/kopf-managed", "yes"),
    "kopf's finalizer": _set("metadata.finalizers", []),
}

CAUSES = {
    "a spec change": _set("spec.maxReplicas", 8),
    "a suspension": _set("spec.suspend", True),
    "the round's answer": _annotate("adl.dev/allocation", '["n1", "n2"]'),
    "another token": _annotate("adl.dev/token-sha256", "cd"),
    "a label (the Kueue queue)": _label("kueue.x-k8s.io/queue-name", "q"),
    "a deletion": _set("metadata.deletionTimestamp", "2026-05-01T12:00:00Z"),
    "a namesake created again": _set("metadata.uid", "u2"),
    "a phase written by someone": _set("status.phase", "Failed"),
    "conditions": _set("status.conditions", [{"type": "Schedulable", "status": "False"}]),
}


@pytest.mark.parametrize("what", sorted(QUIET))
def test_quiet_changes_are_no_cause(what: str) -> None:
    assert cause_digest(changed(QUIET[what])) == cause_digest(BODY)


@pytest.mark.parametrize("what", sorted(CAUSES))
def test_causes_change_the_digest(what: str) -> None:
    assert cause_digest(changed(CAUSES[what])) != cause_digest(BODY)


# ---------------------------------------------------------------------- the event handler


class Memo:
    def __init__(self, runtime: handlers.Runtime) -> None:
        self.runtime = runtime


@pytest.fixture
def reconciles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The reconciles ``on_job_event`` starts (the reconcile itself is tested elsewhere)."""
    calls: list[str] = []

    async def reconcile(rt: Any, namespace: str | None, name: str) -> None:
        calls.append(f"{namespace}/{name}")

    monkeypatch.setattr(handlers, "reconcile_job", reconcile)
    return calls


async def _event(rt: handlers.Runtime, body: dict[str, Any], type_: str = "MODIFIED") -> None:
    memo = cast(kopf.Memo, Memo(rt))
    await handlers.on_job_event(
        type=type_, body=cast(kopf.Body, body), namespace="ns", name="j", memo=memo
    )


async def test_the_handler_reconciles_on_causes_only(reconciles: list[str]) -> None:
    rt = handlers.Runtime(cast(KubeStore, MemoryCluster()), policy=None, events=EventRecorder())
    await _event(rt, BODY, type_="ADDED")  # the first look (a start): always
    for what in sorted(QUIET):
        await _event(rt, changed(QUIET[what]))
    assert reconciles == ["ns/j"]
    await _event(rt, changed(CAUSES["a spec change"]))
    assert reconciles == ["ns/j", "ns/j"]
    await _event(rt, changed(CAUSES["a spec change"]), type_="DELETED")
    await _event(rt, changed(CAUSES["a spec change"]), type_="ADDED")  # created again
    assert len(reconciles) == 3


async def test_a_failed_reconcile_is_tried_again_at_the_next_event(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """kopf does not retry an event handler: a reconcile that failed must not leave its cause
    marked as handled, or a quiet change after it (a report) would not try again."""
    calls: list[str] = []

    async def failing(rt: Any, namespace: str | None, name: str) -> None:
        calls.append(name)
        if len(calls) == 1:
            raise ConnectionError("API server away")

    monkeypatch.setattr(handlers, "reconcile_job", failing)
    rt = handlers.Runtime(cast(KubeStore, MemoryCluster()), policy=None, events=EventRecorder())
    with pytest.raises(ConnectionError):
        await _event(rt, BODY)
    await _event(rt, changed(QUIET["a hints report"]))
    assert calls == ["j", "j"]
    await _event(rt, changed(QUIET["a hints report"]))
    assert calls == ["j", "j"]


# ---------------------------------------------------------------------- the hints write


def _cluster(status: dict[str, Any]) -> MemoryCluster:
    cluster = MemoryCluster()
    cluster.job["status"] = copy.deepcopy(status)
    return cluster


REPORT = Hints.model_validate({"initBatchSize": 32, "batchSize": 128, "goodput": 2.5})


async def test_a_report_is_written_with_what_the_status_shows_of_it() -> None:
    cluster = _cluster({"phase": "Running", "group": 1, "allocation": ["n1"], "replicas": 1})
    api = OperatorApiStore(cast(KubeStore, cluster), now=lambda: NOW)
    await api.put_hints("ns/j", REPORT)
    status = cluster.job["status"]
    assert status["hints"]["batchSize"] == 128 and status["batchSize"] == 128
    assert status["goodput"] == 2.5 and status["finishingSince"] is None
    assert status["phase"] == "Running" and status["group"] == 1  # the rest untouched

    done = REPORT.model_copy(update={"progress": 10.0, "total_progress": 10.0})
    await api.put_hints("ns/j", done)
    assert cluster.job["status"]["finishingSince"] == "2026-05-01T12:00:00Z"


async def test_a_report_on_a_status_the_models_refuse_is_stored_alone() -> None:
    cluster = _cluster({"phase": "Sleeping", "replicas": 1})  # hand-edited: no such phase
    await OperatorApiStore(cast(KubeStore, cluster), now=lambda: NOW).put_hints("ns/j", REPORT)
    assert cluster.job["status"]["hints"]["batchSize"] == 128
    assert "batchSize" not in cluster.job["status"]


class Contended(MemoryCluster):
    """Another writer changes the status between each read and the write after it."""

    def __init__(self, contended_reads: int) -> None:
        super().__init__()
        self.job["status"] = {"phase": "Running", "replicas": 1, "allocation": ["n1"]}
        self.contended_reads = contended_reads
        self.writes: list[tuple[dict[str, Any], str | None]] = []

    def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        body = super().get_job(namespace, name)
        if self.contended_reads:
            self.contended_reads -= 1
            self._bump()
        return body

    def patch_job_status(
        self, namespace: str, name: str, status: dict[str, Any], resource_version: str | None
    ) -> None:
        self.writes.append((status, resource_version))
        super().patch_job_status(namespace, name, status, resource_version)


async def test_a_report_computed_on_a_stale_status_is_computed_again() -> None:
    cluster = Contended(contended_reads=1)
    await OperatorApiStore(cast(KubeStore, cluster), now=lambda: NOW).put_hints("ns/j", REPORT)
    assert len(cluster.writes) == 2 and all(v for _, v in cluster.writes)  # the 2nd on a re-read
    assert cluster.job["status"]["batchSize"] == 128


async def test_a_status_that_keeps_changing_gets_the_report_alone() -> None:
    cluster = Contended(contended_reads=HINTS_WRITE_TRIES)
    await OperatorApiStore(cast(KubeStore, cluster), now=lambda: NOW).put_hints("ns/j", REPORT)
    last, version = cluster.writes[-1]
    assert version is None and set(last) == {"hints"}
    assert cluster.job["status"]["hints"]["batchSize"] == 128
