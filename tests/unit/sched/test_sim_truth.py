"""The simulator's what-if options: trace truth handed to the policy, and the restart delay."""

from __future__ import annotations

from pathlib import Path

import pytest
from sim_kit import Recorder, adaptive_job, fixed_job, write_app

from adl.sched.sim.simulator import SimConfig, Simulator
from adl.sched.sim.traces import load_app
from adl.sched.sim.truth import TrueGoodput, TrueSpeedup, spread
from adl.sched.sim.workload import WorkloadJob


def test_spread_places_replicas_as_evenly_as_possible() -> None:
    assert spread(2, 5) == (3, 2)
    assert spread(4, 2) == (1, 1)  # never an empty node
    assert spread(1, 4) == (4,)


def test_true_goodput_is_the_best_configuration_of_the_traces(tmp_path: Path) -> None:
    app = load_app(write_app(tmp_path))
    # one GPU: m=8 takes 1 s (B = B0, gain 1); m=16 takes 1.4 s and accumulating 2 s for the
    # same gain (no gradient noise), so the best is 1 step per second
    assert TrueGoodput(app, 0)(1, 1) == pytest.approx(1.0)
    # two GPUs on one node ("2" at m=8 follows the toy's linear law: 0.3+0.1+0.04+0.4 s)
    assert TrueGoodput(app, 0)(1, 2) == pytest.approx(1 / 0.84)


def test_truth_shows_the_policy_what_the_job_has_not_measured(tmp_path: Path) -> None:
    fast = load_app(write_app(tmp_path / "a"))
    slow = load_app(write_app(tmp_path / "b", overrides={"2": 20.0}))
    speedups = []
    for app in (fast, slow):
        job = adaptive_job(app)
        job.truth = lambda a, e: TrueSpeedup(TrueGoodput(a, e))
        info = job.job_info(0)
        assert info.max_profiled_replicas == job.max_replicas  # no ramp cap
        assert info.remaining_s == pytest.approx(app.total_progress / 1.0)
        speedups.append(float(info.speedup(1, 2)))
    assert speedups[1] < 0.1 * speedups[0]  # known before the job ever ran there


@pytest.mark.parametrize("hide", [False, True])
def test_oracle_info_reaches_the_policy_from_the_first_round(tmp_path: Path, hide: bool) -> None:
    app = load_app(write_app(tmp_path))
    policy = Recorder()
    work = [WorkloadJob("a", 0, "toy", 1, 8)]
    config = SimConfig(num_nodes=2, oracle_info=True, hide_remaining=hide)
    Simulator(work, policy, {"toy": app}, config).run()
    first = policy.seen[0][0]
    assert isinstance(first.speedup, TrueSpeedup)
    assert first.remaining_s == (None if hide else pytest.approx(app.total_progress))


@pytest.mark.parametrize("delay", [0, 10])
def test_restart_delay_is_a_simulator_option(tmp_path: Path, delay: int) -> None:
    app = load_app(write_app(tmp_path))
    job = fixed_job(app)
    job.restart_delay_s = delay
    job.reallocate((1,))
    job.advance(0, 60)
    assert job.progress == pytest.approx(60 - delay)
    sim = Simulator(
        [WorkloadJob("a", 0, "toy", 1, 8)],
        Recorder(),
        {"toy": app},
        SimConfig(restart_delay_s=delay),
    )
    assert sim.jobs[0].restart_delay_s == delay
    assert sim.jobs[0].job_info(0).restart_cost_s == delay
