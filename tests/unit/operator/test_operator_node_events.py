"""The operator's node watch (``handlers.on_node_event``): a node that starts going away asks a
round at once and reconciles each job with a pod there (in the watched namespaces), once per
mark; a node's other updates, and a mark seen again, do nothing; a mark that goes asks a round
(the node is offered again). And a reconcile reads its nodes' marks itself."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

import kopf
import pytest
from operator_kit import MemoryCluster

from adl.operator import handlers
from adl.operator.handlers import Runtime
from adl.operator.store import KubeStore
from tests.event_sink import EventRecorder
from tests.fakes import NoPolicy

DISRUPTED = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}


class PodsByNode:
    """The one call the handler makes: which adl jobs have a pod on a node."""

    def __init__(self, jobs: dict[str, set[tuple[str, str]]]) -> None:
        self.jobs = jobs
        self.asked: list[tuple[str, str]] = []

    def jobs_on_node(self, node: str, selector: str) -> set[tuple[str, str]]:
        self.asked.append((node, selector))
        return self.jobs.get(node, set())


def node(name: str, *, taints: Any = (), unschedulable: bool = False) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"taints": list(taints), "unschedulable": unschedulable},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


@pytest.fixture
def setup(monkeypatch: pytest.MonkeyPatch) -> tuple[Runtime, PodsByNode, list[tuple[str, str]]]:
    config = replace(handlers.DEFAULT_CONFIG, namespaces=["ns", "other"])
    monkeypatch.setattr(handlers, "DEFAULT_CONFIG", config)
    store = PodsByNode({"n2": {("ns", "a"), ("other", "b"), ("unwatched", "c")}})
    rt = Runtime(cast(KubeStore, store), NoPolicy())
    reconciled: list[tuple[str, str]] = []

    async def reconcile(_: Runtime, namespace: str | None, name: str) -> None:
        reconciled.append((namespace or "", name))

    monkeypatch.setattr(handlers, "reconcile_job", reconcile)
    return rt, store, reconciled


async def event(rt: Runtime, body: dict[str, Any], type_: str | None = "MODIFIED") -> None:
    memo = kopf.Memo()
    memo.runtime = rt
    await handlers.on_node_event(
        type=cast(str, type_),
        body=cast(kopf.Body, body),
        name=body["metadata"]["name"],
        memo=memo,
    )


async def test_a_node_that_starts_going_away_moves_its_jobs_at_once(
    setup: tuple[Runtime, PodsByNode, list[tuple[str, str]]],
) -> None:
    rt, store, reconciled = setup
    await event(rt, node("n2"), None)  # kopf's first listing: an ordinary node
    assert (rt.rounds.due, store.asked, reconciled) == (False, [], [])

    await event(rt, node("n2", taints=[DISRUPTED]))
    assert rt.rounds.due, "a round at once: the node leaves the pool"
    assert store.asked == [("n2", "adl.dev/job")]
    assert reconciled == [("ns", "a"), ("other", "b")]  # not the unwatched namespace's
    assert rt.leaving == {"n2": "karpenter.sh/disrupted"}

    # its next updates (the drain, its status) with the same mark: nothing again
    rt.rounds.due = False
    await event(rt, node("n2", taints=[DISRUPTED], unschedulable=True))
    assert (rt.rounds.due, len(store.asked), len(reconciled)) == (False, 1, 2)

    # the node goes: forgotten, nothing to do (its pods go with it)
    await event(rt, node("n2", taints=[DISRUPTED]), "DELETED")
    assert rt.leaving == {} and not rt.rounds.due


async def test_an_uncordoned_node_is_offered_again_at_once(
    setup: tuple[Runtime, PodsByNode, list[tuple[str, str]]],
) -> None:
    rt, _, reconciled = setup
    await event(rt, node("n1", unschedulable=True))
    assert rt.leaving == {"n1": "cordoned: spec.unschedulable"} and reconciled == []
    rt.rounds.due = False
    await event(rt, node("n1"))
    assert rt.leaving == {} and rt.rounds.due


async def test_a_failed_look_is_tried_again_on_the_nodes_next_event(
    setup: tuple[Runtime, PodsByNode, list[tuple[str, str]]],
) -> None:
    rt, store, reconciled = setup

    def unreachable(node: str, selector: str) -> set[tuple[str, str]]:
        raise ConnectionError("the API server is away")

    store.jobs_on_node = unreachable  # type: ignore[method-assign]
    with pytest.raises(ConnectionError):
        await event(rt, node("n2", taints=[DISRUPTED]))
    assert rt.leaving == {} and rt.rounds.due  # the round still moves the jobs
    del store.jobs_on_node  # the class's again
    await event(rt, node("n2", taints=[DISRUPTED]))
    assert reconciled == [("ns", "a"), ("other", "b")]


async def test_a_reconcile_reads_the_marks_of_its_nodes_and_moves_the_job_off_them() -> None:
    """The backend reads each node of the job's pods, allocation and answer once: a cordoned
    one stops the group (its pods deleted with their grace), and no group starts on an
    answer that still names it; the round's answer without it starts the next group."""
    store = MemoryCluster('["n1", "n2"]', maxReplicas=2)
    events = EventRecorder()
    rt = Runtime(cast(KubeStore, store), NoPolicy(), events=events)
    await handlers._reconcile_job(rt, "ns", "j")
    assert sorted(p["metadata"]["name"] for p in store.pods) == ["j-g1-0", "j-g1-1"]

    store.nodes["n2"] = node("n2", unschedulable=True)
    await handlers._reconcile_job(rt, "ns", "j")
    st = store.job["status"]
    assert (st["phase"], st["reason"]) == ("Restarting", "NodeDisrupted")
    assert st["message"].startswith("node n2 is being disrupted (cordoned: spec.unschedulable)")
    assert st["restarts"] == {"preemption": 1}
    assert store.pods == []  # both asked to stop (the in-memory cluster removes them at once)
    assert "NodeDisrupted" in events.reasons()  # the job's event says why, as its status does

    await handlers._reconcile_job(rt, "ns", "j")  # the answer still names n2: nothing starts
    assert store.pods == [] and store.job["status"]["group"] == 1
    assert "waiting for the scheduler" in store.job["status"]["message"]

    store.job["metadata"]["annotations"]["adl.dev/allocation"] = '["n1"]'  # the next round's
    await handlers._reconcile_job(rt, "ns", "j")
    assert [p["metadata"]["name"] for p in store.pods] == ["j-g2-0"]
