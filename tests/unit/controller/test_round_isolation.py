"""One job's data cannot fail the scheduling round for the others.

A job whose report the models would refuse today (stored by an older version, or built around
validation) or whose speedup function raises is left out of the round: it keeps what it holds,
the round says why (``RoundResult.faults``), and every other job is scheduled. The driver turns
a fault into one Warning event and a ``Schedulable=False`` condition on the job."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime

import numpy as np
import pytest
from numpy.typing import ArrayLike, NDArray

from adl.controller.driver import Driver
from adl.controller.job_record import JobRecord
from adl.controller.memory import MemoryWorkerBackend
from adl.controller.rounds import SpeedupCache, plan_round
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, Hints, Phase
from adl.sched.policy import AdlPolicy
from adl.sched.types import Allocation, JobInfo, NodeInfo, SpeedupFn
from tests.unit.controller.test_driver import NOW as SCENARIO_NOW
from tests.unit.controller.test_driver import RUNNING, running
from tests.unit.controller.test_driver import SPEC as SCENARIO_SPEC
from tests.unit.controller.test_driver import hints as good_hints

NOW = datetime(2026, 1, 1, tzinfo=UTC)
TEMPLATE = {"spec": {"containers": [{"name": "t", "command": ["python"]}]}}
SPEC = AdaptiveJobSpec(template=TEMPLATE, min_replicas=1, max_replicas=4)
NODES = [NodeInfo("n1", 8)]


def hostile_hints() -> Hints:
    """The report of the issue, as if stored before the bounds (validation bypassed)."""
    h = good_hints()
    return h.model_copy(update={"local_bsz_bounds": (1, 10**20)})


def rec(name: str, hints: Hints | None, allocation: list[str] | None = None) -> JobRecord:
    alloc = allocation or []
    phase = Phase.RUNNING if alloc else Phase.PENDING
    status = AdaptiveJobStatus(
        phase=phase, group=1 if alloc else 0, replicas=len(alloc), allocation=alloc, hints=hints
    )
    return JobRecord(f"ns/{name}", SPEC, status, NOW, desired=alloc or None)


def test_a_job_whose_model_cannot_be_built_is_left_out_and_the_others_are_scheduled() -> None:
    jobs = [
        rec("bad", hostile_hints(), ["n1", "n1"]),
        rec("good", good_hints()),
        rec("new", None),
    ]
    result = plan_round(AdlPolicy(), jobs, NODES, NOW, SpeedupCache())
    assert set(result.faults) == {"ns/bad"}
    assert "hints" in result.faults["ns/bad"]
    # the faulty job keeps what it holds (its workers are not killed for it), gets nothing more
    assert result.allocation["ns/bad"] == ["n1", "n1"]
    assert result.allocation["ns/good"] and result.allocation["ns/new"]
    held = sum(len(v) for v in result.allocation.values())
    assert held <= 8  # the policy shared out only what the faulty job does not hold
    assert "ns/bad" not in result.decisions


class _Raising:
    """A speedup function that fails only at one replica count (a probe of a few sizes passes)."""

    def __init__(self, bad_k: int) -> None:
        self.bad_k = bad_k

    def __call__(self, num_nodes: ArrayLike, num_replicas: ArrayLike) -> NDArray[np.float64]:
        k = np.asarray(num_replicas, dtype=np.float64)
        if np.any(k == self.bad_k):
            raise FloatingPointError("model blew up at 3 replicas")
        return k


class _Rigged(SpeedupCache):
    def __init__(self, rigged: Mapping[str, SpeedupFn]) -> None:
        super().__init__()
        self.rigged = rigged

    def get(self, job: str, hints: Hints | None) -> SpeedupFn:
        return self.rigged.get(job) or super().get(job, hints)


class _AskEverySize:
    """A policy that reads every job's speedup at every size it may give it (as real ones do)
    and then gives each its maximum."""

    def optimize(
        self, jobs: Sequence[JobInfo], nodes: Sequence[NodeInfo], previous: Mapping[str, list[str]]
    ) -> Allocation:
        free = [n.name for n in nodes for _ in range(n.gpus)]
        out: Allocation = {}
        for j in jobs:
            for k in range(1, j.max_replicas + 1):
                j.speedup(1, k)
            out[j.name], free = free[: j.max_replicas], free[j.max_replicas :]
        return out


def test_a_policy_failure_caused_by_one_jobs_speedup_leaves_out_that_job_alone() -> None:
    jobs = [rec("a", None), rec("b", None, ["n1"]), rec("c", None)]
    speedups = _Rigged({"ns/b": _Raising(bad_k=3)})
    result = plan_round(_AskEverySize(), jobs, NODES, NOW, speedups)
    assert list(result.faults) == ["ns/b"] and "3 replicas" in result.faults["ns/b"]
    assert result.allocation == {"ns/a": ["n1"] * 4, "ns/b": ["n1"], "ns/c": ["n1"] * 3}


def test_a_speedup_that_is_not_a_number_is_a_fault() -> None:
    nan = lambda n, k: np.full(np.broadcast(n, k).shape, np.nan)  # noqa: E731
    result = plan_round(_AskEverySize(), [rec("a", None)], NODES, NOW, _Rigged({"ns/a": nan}))
    assert "ns/a" in result.faults and result.allocation == {"ns/a": []}


def test_a_policy_failure_no_single_job_explains_still_fails_the_round() -> None:
    class Broken:
        def optimize(self, jobs, nodes, previous):  # type: ignore[no-untyped-def]
            raise RuntimeError("a bug in the policy")

    with pytest.raises(RuntimeError, match="a bug in the policy"):
        plan_round(Broken(), [rec("a", None), rec("b", None)], NODES, NOW)


def test_the_driver_warns_once_marks_the_job_and_clears_the_mark() -> None:
    # ns/a (2 replicas) and ns/b (1), both with good hints
    jobs = [JobRecord(k, SCENARIO_SPEC, running(n), SCENARIO_NOW) for k, n in RUNNING.items()]
    backend = MemoryWorkerBackend(jobs, [NodeInfo("n1", 4)])
    a = backend.jobs["ns/a"]
    backend.jobs["ns/a"] = replace(a, status=a.status.model_copy(update={"hints": hostile_hints()}))
    driver = Driver(backend, AdlPolicy())
    for _ in range(3):
        result = driver.run_round(NOW)
        assert set(result.faults) == {"ns/a"}
    warnings = [e for job, e in backend.events if e.type == "Warning"]
    assert len(warnings) == 1 and warnings[0].reason == "UnusableHints"
    assert backend.events[[e for _, e in backend.events].index(warnings[0])][0] == "ns/a"
    cond = next(c for c in backend.jobs["ns/a"].status.conditions if c.type == "Schedulable")
    assert cond.status == "False" and cond.reason == "UnusableHints" and "hints" in cond.message
    assert backend.jobs["ns/b"].desired  # the other job was scheduled all along
    # the job reports a usable model again: the mark is cleared, it takes part again
    a = backend.jobs["ns/a"]
    backend.jobs["ns/a"] = replace(a, status=a.status.model_copy(update={"hints": good_hints()}))
    assert driver.run_round(NOW).faults == {}
    cond = next(c for c in backend.jobs["ns/a"].status.conditions if c.type == "Schedulable")
    assert cond.status == "True"
