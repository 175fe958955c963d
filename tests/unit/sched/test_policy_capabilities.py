"""One capability mechanism (issue 30): what a policy can do is what its registry entry declares.
A policy whose entry does not declare a capability is never asked for it, whatever methods it
has; one whose entry declares it is asked (the round, the simulator); every registered policy
has the methods its entry declares."""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sim_kit import write_app

from adl.controller.driver import Driver
from adl.controller.job_record import JobRecord
from adl.controller.memory import MemoryWorkerBackend
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus
from adl.sched import registry
from adl.sched.policy import AdlPolicy
from adl.sched.sim.job import JobMode
from adl.sched.sim.simulator import SimConfig, Simulator
from adl.sched.sim.traces import load_app
from adl.sched.sim.workload import WorkloadJob
from adl.sched.types import Allocation, JobInfo, NodeInfo

NOW = datetime(2026, 1, 1, tzinfo=UTC)
SPEC = AdaptiveJobSpec.model_validate(
    {"template": {"spec": {"containers": [{"name": "t", "command": ["x"]}]}}, "maxReplicas": 2}
)
SPY = f"{__name__}:CapableSpy"


class CapableSpy:
    """Has every capability's method, and records which were asked."""

    job_mode = JobMode.FIXED  # an attribute as the baselines once had: no longer read

    def __init__(self) -> None:
        self.asked: list[str] = []

    def optimize(
        self, jobs: Sequence[JobInfo], nodes: Sequence[NodeInfo], previous: Mapping[str, list[str]]
    ) -> Allocation:
        return {j.name: [nodes[0].name] for j in jobs}

    def ranks_by_predicted_remaining(self) -> bool:
        self.asked.append("ranks_by_predicted_remaining")
        return False

    def explain_holds(self, *args: Any) -> dict[str, Any]:
        self.asked.append("explain_holds")
        return {}

    def bind_oracle(self, oracle: Any) -> None:
        self.asked.append("bind_oracle")


def _round(policy: CapableSpy) -> None:
    job = JobRecord("ns/a", SPEC, AdaptiveJobStatus(), NOW)
    backend = MemoryWorkerBackend([job], [NodeInfo("n1", 4)])
    Driver(backend, policy).run_round(NOW)
    assert backend.jobs["ns/a"].desired == ["n1"]  # the round ran and answered


def _replay(policy: CapableSpy, tmp_path: Path) -> Simulator:
    toy = load_app(write_app(tmp_path))
    work = [WorkloadJob("a", 0, "toy", 1, 8)]
    return Simulator(work, policy, {"toy": toy}, SimConfig(num_nodes=1, gpus_per_node=1))


def test_a_policy_that_declares_nothing_is_never_asked(tmp_path: Path) -> None:
    spy = CapableSpy()
    assert registry.entry_of(spy).custom  # not registered: declares nothing
    _round(spy)
    sim = _replay(spy, tmp_path)
    assert spy.asked == []
    assert sim.jobs[0].mode is JobMode.ADAPTIVE  # its job_mode attribute is not read


def test_a_policy_that_declares_its_capabilities_is_asked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    declared = registry.PolicyEntry(
        "spy",
        SPY,
        binds_oracle=True,
        job_mode=JobMode.FIXED_BATCH,
        ranks_by_prediction=True,
        explains_holds=True,
    )
    monkeypatch.setitem(registry._REGISTRY, "spy", declared)
    spy = CapableSpy()
    assert registry.entry_of(spy) is declared
    _round(spy)
    assert spy.asked == ["ranks_by_predicted_remaining", "explain_holds"]
    sim = _replay(spy, tmp_path)
    assert "bind_oracle" in spy.asked
    assert sim.jobs[0].mode is JobMode.FIXED_BATCH


def test_a_subclass_of_a_registered_policy_has_its_entry() -> None:
    class Tuned(AdlPolicy):
        pass

    assert registry.entry_of(Tuned()) is registry.entry("adl")


@pytest.mark.parametrize("name", registry.names())
def test_every_registered_policy_has_the_methods_its_entry_declares(name: str) -> None:
    entry = registry.entry(name)
    module, _, attr = entry.target.partition(":")
    cls = getattr(importlib.import_module(module), attr)
    # the target names the class's own module: entry_of knows an instance by it
    assert f"{cls.__module__}:{cls.__qualname__}" == entry.target
    needed = {
        "ranks_by_predicted_remaining": entry.ranks_by_prediction,
        "explain_holds": entry.explains_holds,
        "bind_oracle": entry.binds_oracle,
    }
    for method, declared in needed.items():
        if declared:
            assert callable(getattr(cls, method, None)), f"{name} declares {method}"
    assert registry.entry_of(entry.build()) is entry


def test_an_unknown_name_is_a_clear_error() -> None:
    message = r"unknown policy 'nope'; choose one of adl, .*module:Class"
    with pytest.raises(ValueError, match=message):
        registry.make_policy("nope")
