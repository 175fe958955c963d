"""Remaining work predicted from completed jobs of the same kind (the hidden-length predictor),
and the simulator feeding it as a driver would."""

from __future__ import annotations

from pathlib import Path

import pytest
from sim_kit import Recorder, write_app

from adl.sched.policy import AdlPolicy
from adl.sched.sim.simulator import SimConfig, Simulator
from adl.sched.sim.traces import load_app
from adl.sched.sim.workload import WorkloadJob
from adl.sched.types import JobInfo, NodeInfo
from adl.sched.work_history import HistoryConfig, WorkHistory


def test_prediction_is_the_mean_residual_work_of_longer_completed_jobs() -> None:
    history = WorkHistory()
    for total in (100.0, 200.0, 600.0):
        assert history.record("bert", total)
    assert history.expected_remaining_s("bert", 0.0) == pytest.approx(300.0)
    # a job past 150 s can only be one of the two longer ones: mean(200, 600) - 150
    assert history.expected_remaining_s("bert", 150.0) == pytest.approx(250.0)
    assert history.expected_remaining_s("bert", 599.0) == pytest.approx(1.0)


def test_a_prediction_says_how_many_completed_jobs_it_averages() -> None:
    history = WorkHistory()
    for total in (100.0, 200.0, 600.0):
        history.record("bert", total)
    assert history.predict("bert", 0.0) == (pytest.approx(300.0), 3)
    assert history.predict("bert", 150.0) == (pytest.approx(250.0), 2)  # 100 s is behind it
    assert history.predict("bert", 600.0) is None


def test_no_prediction_without_history_of_the_kind_or_beyond_every_completed_job() -> None:
    history = WorkHistory()
    history.record("bert", 100.0)
    assert history.expected_remaining_s("yolov3", 0.0) is None  # never seen complete
    assert history.expected_remaining_s("bert", 100.0) is None  # as long as the longest
    assert history.expected_remaining_s("bert", float("nan")) is None


def test_min_samples_withholds_a_prediction_from_too_few_jobs() -> None:
    history = WorkHistory(HistoryConfig(min_samples=2))
    history.record("bert", 100.0)
    assert history.expected_remaining_s("bert", 0.0) is None
    history.record("bert", 300.0)
    assert history.expected_remaining_s("bert", 0.0) == pytest.approx(200.0)


@pytest.mark.parametrize("bad", [0.0, -5.0, float("inf"), float("nan"), 1e12])
def test_rejects_totals_that_are_not_plausible_work(bad: float) -> None:
    history = WorkHistory()
    assert not history.record("bert", bad)
    assert not history.record("", 100.0)  # a job without a kind says nothing about others
    assert history.totals("bert") == ()


def test_memory_is_bounded_by_the_most_recent_jobs_and_kinds() -> None:
    history = WorkHistory(HistoryConfig(max_per_kind=3, max_kinds=2))
    for total in (10.0, 20.0, 30.0, 40.0):
        history.record("a", total)
    assert history.totals("a") == (20.0, 30.0, 40.0)  # the oldest (10) dropped
    history.record("b", 1.0)
    history.record("a", 50.0)  # a completed most recently ...
    history.record("c", 2.0)  # ... so b, the least recent kind, goes
    assert history.totals("b") == () and history.totals("c") == (2.0,)
    assert history.totals("a") == (30.0, 40.0, 50.0)


def test_bad_config_fails_at_construction() -> None:
    with pytest.raises(ValueError):
        HistoryConfig(max_per_kind=0)
    with pytest.raises(ValueError):
        HistoryConfig(max_total_s=float("inf"))


def test_policy_ranks_by_the_prediction_when_the_length_is_hidden() -> None:
    # Two hidden-length jobs with the same attained service: LAS cannot tell them apart, the
    # prediction can. The job predicted shorter gets the single GPU.
    long = JobInfo(name="long", expected_remaining_s=50_000.0, submit_order=0)
    short = JobInfo(name="short", expected_remaining_s=500.0, submit_order=1)
    nodes = [NodeInfo("n", 1)]
    assert AdlPolicy().optimize([long, short], nodes, {}) == {"long": [], "short": ["n"]}
    # a declared length wins over the prediction; the knob turns predictions off
    assert AdlPolicy().priority(JobInfo("x", remaining_s=100.0, expected_remaining_s=1e6)) == (
        AdlPolicy().priority(JobInfo("x", remaining_s=100.0))
    )
    off = AdlPolicy(use_predicted_remaining=0)
    assert off.priority(long) == off.priority(short)


def test_simulator_predicts_a_hidden_length_from_a_completed_job_of_the_same_kind(
    tmp_path: Path,
) -> None:
    toy = load_app(write_app(tmp_path))  # 150 progress units, about 150 s on one GPU
    work = [WorkloadJob("a", 0, "toy", 1, 8), WorkloadJob("b", 400, "toy", 1, 8)]
    policy = Recorder()
    sim = Simulator(work, policy, {"toy": toy}, SimConfig(num_nodes=2, hide_remaining=True))
    sim.run()
    a_total = sim.by_name["a"].done_work_s()
    assert a_total == pytest.approx(150.0, rel=0.1)
    b_seen = [
        (i.remaining_s, i.expected_remaining_s) for s in policy.seen for i in s if i.name == "b"
    ]
    # before a finished nothing predicts; b arrives after, so from its first round it has one
    assert all(r is None for r, _ in b_seen)
    guesses = [g for _, g in b_seen]
    assert guesses[0] == pytest.approx(a_total)
    # and the guess shrinks as b progresses (its own progress, reported each round)
    assert guesses[-1] < guesses[0] - 30
    a_seen = [i.expected_remaining_s for s in policy.seen for i in s if i.name == "a"]
    assert a_seen and all(g is None for g in a_seen)


@pytest.mark.parametrize(("hide", "predict"), [(False, True), (True, False)])
def test_no_prediction_when_lengths_are_declared_or_prediction_is_off(
    tmp_path: Path, hide: bool, predict: bool
) -> None:
    toy = load_app(write_app(tmp_path))
    work = [WorkloadJob("a", 0, "toy", 1, 8), WorkloadJob("b", 400, "toy", 1, 8)]
    policy = Recorder()
    config = SimConfig(num_nodes=2, hide_remaining=hide, predict_remaining=predict)
    Simulator(work, policy, {"toy": toy}, config).run()
    assert all(i.expected_remaining_s is None for s in policy.seen for i in s)
