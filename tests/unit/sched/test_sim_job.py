"""Simulated job physics: 30 s restart delay, epochs and completion to the second, and an adaptive
job that knows only the configurations it has run."""

from __future__ import annotations

from pathlib import Path

import pytest
from sim_kit import Recorder, adaptive_job, fixed_job, write_app

from adl.sched.baselines import FifoPolicy
from adl.sched.sim.job import RESTART_DELAY_S
from adl.sched.sim.simulator import SimConfig, Simulator
from adl.sched.sim.traces import AppTrace, load_app
from adl.sched.sim.workload import WorkloadJob
from adl.sched.speedup import SpeedupFunction
from adl.sched.types import linear_speedup


@pytest.fixture
def toy(tmp_path: Path) -> AppTrace:
    # 1 GPU at micro-batch 8: 1 s per step, no noise (gain 1) -> 1 progress unit per second;
    # epochs end at progress 45, 100, 150.
    return load_app(write_app(tmp_path))


def test_first_start_and_every_move_cost_30_seconds_of_progress(toy: AppTrace) -> None:
    job = fixed_job(toy)
    job.reallocate((1,))
    assert job.restarts == 0  # the first start is not counted as a restart ...
    job.advance(0, 60)
    assert job.progress == pytest.approx(60 - RESTART_DELAY_S)  # ... but it does cost 30 s
    job.reallocate((1,))  # moved to another node: same shape, still a restart
    job.advance(60, 60)
    assert job.restarts == 1
    assert job.progress == pytest.approx(2 * (60 - RESTART_DELAY_S))
    job.advance(120, 60)  # undisturbed round: full progress
    assert job.progress == pytest.approx(2 * 30 + 45 + 15)  # epoch 1 ended at exactly 45
    # the GPU is held (and attained) during the restart delays too
    assert job.attained_service == pytest.approx(180)


def test_waiting_job_makes_no_progress_and_no_restart(toy: AppTrace) -> None:
    job = fixed_job(toy)
    job.reallocate((1,))
    job.advance(0, 60)
    job.reallocate(())  # preempted: waits
    job.advance(60, 60)
    assert job.progress == pytest.approx(30) and job.restarts == 0
    assert job.attained_service == pytest.approx(60)


def test_epochs_and_completion_are_accounted_to_the_second(tmp_path: Path) -> None:
    # 0.8 s per step -> 1.25 progress per second
    app = load_app(write_app(tmp_path, single_step=0.8))
    job = fixed_job(app)
    job.reallocate((1,))
    job.advance(0, 60)  # 30 s delay, then 37.5
    assert job.epoch == 0 and job.progress == pytest.approx(37.5)
    job.advance(60, 60)  # epoch 1 ends at 45 (6 s in), epoch 2 at 100 (50 s in)
    assert job.epoch == 2
    assert job.progress == pytest.approx(100 + 1.25 * 10)
    job.advance(120, 60)  # 150 reached at 120 + (150 - 112.5) / 1.25 = 150, mid-round
    assert job.epoch == 3 and job.completion_time == 150
    assert isinstance(job.completion_time, int)
    assert job.attained_service == pytest.approx(150)


def test_simulated_jct_includes_waiting_for_the_round_and_the_restart(toy: AppTrace) -> None:
    work = [WorkloadJob("a", 10, "toy", 1, 8), WorkloadJob("b", 70, "toy", 1, 8)]
    sim = Simulator(work, FifoPolicy(), {"toy": toy}, SimConfig(num_nodes=1, gpus_per_node=1))
    result = sim.run()
    a, b = result.jobs
    # a: scheduled at the end of the first round (60), runs from 90, needs 150 s of progress
    assert a.completion_s == 60 + 30 + 150 and a.jct_s == 230
    # b waits for the only GPU: a finishes at 240, b gets it at the round end 240
    assert b.completion_s == 240 + 30 + 150 and b.restarts == 0
    assert result.total_gpus == 1


def test_rounds_on_events_start_a_new_job_at_once_and_reuse_a_finished_jobs_gpu(
    toy: AppTrace,
) -> None:
    """adl's operator runs a round when a job arrives and when one finishes: no wait for the
    next 60 s boundary (the same workload as above)."""
    work = [WorkloadJob("a", 10, "toy", 1, 8), WorkloadJob("b", 70, "toy", 1, 8)]
    config = SimConfig(num_nodes=1, gpus_per_node=1, rounds_on_events=True, event_tick_s=5)
    result = Simulator(work, FifoPolicy(), {"toy": toy}, config).run()
    a, b = result.jobs
    assert a.completion_s == 10 + 30 + 150  # scheduled on arrival
    assert b.completion_s == 190 + 30 + 150  # the round at a's finish gives b the GPU
    rounds = [t for t, _ in result.timeline]
    assert {10, 60, 70, 120, 180, 190} <= set(rounds) and rounds == sorted(rounds)


def test_a_finish_between_ticks_is_noticed_at_the_next_tick(toy: AppTrace) -> None:
    work = [WorkloadJob("a", 10, "toy", 1, 8), WorkloadJob("b", 70, "toy", 1, 8)]
    config = SimConfig(num_nodes=1, gpus_per_node=1, rounds_on_events=True, event_tick_s=7)
    a, b = Simulator(work, FifoPolicy(), {"toy": toy}, config).run().jobs
    # a finishes at 190; ticks from the round at 180 end at 187, 194: b starts at 194
    assert a.completion_s == 190 and b.completion_s == 194 + 30 + 150


def test_with_rounds_on_events_a_job_submitted_at_zero_starts_at_zero(toy: AppTrace) -> None:
    config = SimConfig(num_nodes=1, gpus_per_node=1, rounds_on_events=True)
    result = Simulator([WorkloadJob("a", 0, "toy", 1, 8)], FifoPolicy(), {"toy": toy}, config).run()
    assert result.jobs[0].completion_s == 0 + 30 + 150
    assert result.timeline[0] == (0, {"a": 1})


def test_sim_config_rejects_a_zero_round_or_tick_and_a_negative_restart_delay() -> None:
    with pytest.raises(ValueError, match="at least 1 second"):
        SimConfig(event_tick_s=0)
    with pytest.raises(ValueError, match="at least 1 second"):
        SimConfig(round_s=0)
    with pytest.raises(ValueError, match="at least 0 seconds"):
        SimConfig(reported_restart_s=-1)
    with pytest.raises(ValueError, match="at least 0 seconds"):
        SimConfig(restart_delay_s=-30)


@pytest.mark.parametrize(("delay", "reported"), [(30, None), (0, 30), (30, 0)])
def test_reported_restart_cost_is_what_the_policy_sees_and_the_delay_what_the_job_loses(
    toy: AppTrace, delay: int, reported: int | None
) -> None:
    """The what-if that splits a restart's cost: the progress lost (the delay) and the policy's
    caution (the cost it is told)."""
    policy = Recorder()
    config = SimConfig(
        num_nodes=1, gpus_per_node=1, restart_delay_s=delay, reported_restart_s=reported
    )
    a = Simulator([WorkloadJob("a", 0, "toy", 1, 8)], policy, {"toy": toy}, config).run().jobs[0]
    assert {info.restart_cost_s for infos in policy.seen for info in infos} == {
        delay if reported is None else reported
    }
    assert a.completion_s == 60 + delay + 150  # started at the first round, 150 s of work


@pytest.mark.parametrize("hide", [False, True])
def test_hide_remaining_hides_job_length_from_the_policy(toy: AppTrace, hide: bool) -> None:
    policy = Recorder()
    work = [WorkloadJob("a", 0, "toy", 1, 8), WorkloadJob("b", 0, "toy", 1, 8)]
    Simulator(work, policy, {"toy": toy}, SimConfig(num_nodes=2, hide_remaining=hide)).run()
    remaining = [info.remaining_s for infos in policy.seen for info in infos]
    assert remaining[:2] == [None, None]  # nothing measured before the first run
    if hide:
        assert all(r is None for r in remaining)
    else:
        assert any(r is not None and r > 0 for r in remaining[2:])


def test_adaptive_job_knows_only_the_configurations_it_has_run(tmp_path: Path) -> None:
    # Two applications identical except for placement "2" (2 GPUs on one node), 10x slower in
    # the second. Until a job runs there, it cannot know, so it reports the same model.
    fast = load_app(write_app(tmp_path / "a"))
    slow = load_app(write_app(tmp_path / "b", overrides={"2": 20.0}))
    jobs = [adaptive_job(fast), adaptive_job(slow)]
    for job in jobs:
        info = job.job_info(0)
        assert info.speedup is linear_speedup and info.remaining_s is None
        assert info.max_profiled_replicas == 0  # before the first profile: linear scaling
        job.reallocate((1,))
        job.advance(0, 120)
        assert {key[:2] for key in job.profile} == {(1, 1)}
        assert job.job_info(120).max_profiled_replicas == 1
    infos = [job.job_info(120) for job in jobs]
    assert all(isinstance(i.speedup, SpeedupFunction) for i in infos)
    same = [float(i.speedup(1, 2)) for i in infos]
    assert same[0] == pytest.approx(same[1])
    assert infos[0].remaining_s == pytest.approx(infos[1].remaining_s)

    for job in jobs:
        job.reallocate((2,))
        job.advance(120, 120)
        assert {key[:2] for key in job.profile} == {(1, 1), (1, 2)}
    after = [float(job.job_info(240).speedup(1, 2)) for job in jobs]
    assert after[1] < 0.5 * after[0]  # the slow placement is now known, and only to its job
