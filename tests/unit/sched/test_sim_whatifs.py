"""The simulator's robustness what-ifs of issue 22: restart costs per application."""

from __future__ import annotations

from pathlib import Path

import pytest
from sim_kit import Recorder, write_app

from adl.sched.sim.simulator import SIA_RESTART_S, SimConfig, Simulator
from adl.sched.sim.traces import load_app
from adl.sched.sim.workload import WorkloadJob


def test_restart_delay_by_app_costs_and_reports_each_application_its_own_delay(
    tmp_path: Path,
) -> None:
    apps = {name: load_app(write_app(tmp_path, name)) for name in ("slow", "toy")}
    work = [WorkloadJob("a", 0, "slow", 1, 8), WorkloadJob("b", 0, "toy", 1, 8)]
    policy = Recorder()
    config = SimConfig(num_nodes=2, gpus_per_node=1, restart_delay_by_app=(("slow", 90),))
    jobs = {j.name: j for j in Simulator(work, policy, apps, config).run().jobs}
    reported = {i.name: i.restart_cost_s for seen in policy.seen for i in seen}
    assert reported == {"a": 90.0, "b": 30.0}  # unlisted applications keep restart_delay_s
    # both start at the first round (60 s) and need 150 s of work after their start delay
    assert jobs["a"].completion_s == 60 + 90 + 150
    assert jobs["b"].completion_s == 60 + 30 + 150


def test_sia_costs_are_the_published_ones_and_negative_delays_are_refused() -> None:
    assert dict(SIA_RESTART_S) == {
        "cifar10": 30,
        "deepspeech2": 25,
        "yolov3": 45,
        "bert": 120,
        "imagenet": 250,
    }
    with pytest.raises(ValueError):
        SimConfig(restart_delay_by_app=(("bert", -1),))
