"""The driver hands a backend that can ask for capacity (``AsksForCapacity``) the round's asks,
and never asks one that cannot or has it turned off."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from datetime import UTC, datetime

from adl.controller.backend import AsksForCapacity
from adl.controller.driver import Driver
from adl.controller.job_record import JobRecord
from adl.controller.memory import MemoryWorkerBackend
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus
from adl.sched.capacity import CapacityAsk, CapacityRule
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
