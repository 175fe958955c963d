"""The driver hands a backend that can ask for capacity (``AsksForCapacity``) the round's asks,
and never asks one that cannot or has it turned off; one that can also empty nodes
(``EmptiesNodes``) has the nodes worth emptying held back from the jobs until new demand
wants them."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import UTC, datetime

from adl.controller.backend import AsksForCapacity, EmptiesNodes
from adl.controller.driver import Driver
from adl.controller.job_record import JobRecord
from adl.controller.memory import MemoryWorkerBackend
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus
from adl.sched.capacity import CapacityAsk, CapacityRule
from adl.sched.emptying import NodeToEmpty
from adl.sched.policy import AdlPolicy
from adl.sched.types import NodeInfo

NOW = datetime(2026, 1, 1, tzinfo=UTC)
TEMPLATE = {"spec": {"containers": [{"name": "t", "command": [sys.executable, "t.py"]}]}}


class AskingBackend(MemoryWorkerBackend):
    def __init__(
        self, jobs: Sequence[JobRecord], nodes: Sequence[NodeInfo], rule: CapacityRule | None
    ) -> None:
        super().__init__(jobs, nodes)
        self.rule = rule
        self.asked: list[list[CapacityAsk]] = []

    def capacity_rule(self) -> CapacityRule | None:
        return self.rule

    def ask_capacity(self, asks: Sequence[CapacityAsk]) -> None:
        self.asked.append(list(asks))


def _job(name: str, min_replicas: int) -> JobRecord:
    spec = AdaptiveJobSpec.model_validate(
        {"template": TEMPLATE, "minReplicas": min_replicas, "maxReplicas": 8}
    )
    return JobRecord(f"ns/{name}", spec, AdaptiveJobStatus(), NOW)


def test_jobs_on_a_cluster_without_gpus_ask_for_their_minimum() -> None:
    backend = AskingBackend([_job("a", 1), _job("b", 2)], [], CapacityRule())
    assert isinstance(backend, AsksForCapacity)
    Driver(backend, AdlPolicy()).run_round(NOW)
    (asks,) = backend.asked
    assert sorted((a.job, a.replicas) for a in asks) == [("ns/a", 1), ("ns/b", 2)]


def test_once_the_nodes_exist_the_asks_are_withdrawn() -> None:
    backend = AskingBackend([_job("a", 1)], [], CapacityRule())
    driver = Driver(backend, AdlPolicy())
    driver.run_round(NOW)
    backend.nodes = [NodeInfo("new", 4)]
    driver.run_round(NOW)
    assert [len(a) for a in backend.asked] == [1, 0]  # an empty ask withdraws the placeholders


def test_asking_is_off_unless_the_rule_is_set() -> None:
    backend = AskingBackend([_job("a", 1)], [], None)
    Driver(backend, AdlPolicy()).run_round(NOW)
    assert backend.asked == []
    assert not isinstance(MemoryWorkerBackend([], []), AsksForCapacity)


class EmptyingBackend(AskingBackend):
    """Asks for capacity and empties nodes; remembers what it was told."""

    def __init__(self, *args: object, kept: Sequence[str] = ()) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.kept = list(kept)
        self.told: list[tuple[list[str], list[str]]] = []

    def kept_by_others(self) -> Sequence[str]:
        return self.kept

    def nodes_emptied(self, chosen: Sequence[NodeToEmpty], released: Sequence[str]) -> None:
        self.told.append(([c.node for c in chosen], list(released)))


def test_an_idle_node_is_held_back_until_new_demand_wants_it() -> None:
    backend = EmptyingBackend(
        [_job("a", 1)], [NodeInfo("n1", 1), NodeInfo("n2", 1)], CapacityRule()
    )
    assert isinstance(backend, EmptiesNodes)
    driver = Driver(backend, AdlPolicy())
    driver.run_round(NOW)
    # a new job asks for one GPU: it runs where a does not, the other node is idle and goes
    held = set(backend.jobs["ns/a"].desired or [])
    (idle,) = {"n1", "n2"} - held
    assert backend.told == [([idle], [])]
    assert set(driver.emptying) == {idle}
    again = driver.run_round(NOW)  # held back: offered to no job, nothing more to empty
    assert idle not in again.allocation["ns/a"] and len(backend.told) == 1
    # a job that needs two GPUs arrives: the held-back node is offered again, not asked for
    backend.jobs["ns/b"] = _job("b", 2)
    driver.run_round(NOW)
    assert backend.told[-1] == ([], [idle]) and driver.emptying == {}
    assert sum(a.gpus for a in backend.asked[-1]) == 1  # b's 2 GPUs less the node offered


def test_emptying_is_off_with_its_bound_at_zero_and_spares_nodes_others_keep() -> None:
    nodes = [NodeInfo("n1", 1), NodeInfo("n2", 1)]
    off = EmptyingBackend([_job("a", 1)], nodes, CapacityRule(max_emptied_per_round=0))
    Driver(off, AdlPolicy()).run_round(NOW)
    assert off.told == []
    kept = EmptyingBackend([_job("a", 1)], nodes, CapacityRule(), kept=["n1", "n2"])
    Driver(kept, AdlPolicy()).run_round(NOW)
    assert kept.told == []


def test_a_held_back_node_that_leaves_the_listing_is_forgotten_and_never_chosen_again() -> None:
    backend = EmptyingBackend(
        [_job("a", 1)], [NodeInfo("n1", 1), NodeInfo("n2", 1)], CapacityRule()
    )
    driver = Driver(backend, AdlPolicy())
    driver.run_round(NOW)
    (idle,) = set(driver.emptying)
    # the autoscaler takes it (tainted, then deleted): the backend no longer lists it
    backend.nodes = [n for n in backend.nodes if n.name != idle]
    driver.run_round(NOW)
    assert driver.emptying == {}
    assert backend.told == [([idle], [])]  # the last node left is never emptied
