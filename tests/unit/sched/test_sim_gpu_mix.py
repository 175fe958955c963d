"""The simulator on mixed GPU-type clusters: per-type step times, the slowest type pacing a
mixed placement, per-type models a job learns, and speeds estimated from jobs of its kind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sim_kit import adaptive_job, fixed_job, write_app, write_workload

from adl.sched.sim.gpu_mix import (
    THREE_TYPES,
    TWO_TYPES,
    TYPE_SPEEDS_FILE,
    load_type_speeds,
    mixed_config,
)
from adl.sched.sim.simulator import SimConfig, Simulator
from adl.sched.sim.traces import AppTrace, load_app
from adl.sched.sim.workload import load_workload
from adl.sched.type_history import TypeSpeedHistory
from adl.sched.types import Allocation, JobInfo, NodeInfo


@pytest.fixture
def toy(tmp_path: Path) -> AppTrace:
    # 1 GPU at micro-batch 8: 1 s per step of which 0.2 s is sync
    return load_app(write_app(tmp_path, single_step=1.0, single_sync=0.2))


def test_a_faster_type_shortens_the_compute_only(toy: AppTrace) -> None:
    assert toy.step_sync_on((1,), 8, 1.0) == pytest.approx((1.0, 0.2))
    step, sync = toy.step_sync_on((1,), 8, 4.0)
    assert (step, sync) == pytest.approx((0.2 + 0.8 / 4, 0.2))
    assert toy.rate((1,), 8, 0, 0, speed=4.0) == pytest.approx(1 / 0.4)
    with pytest.raises(ValueError, match="positive"):
        toy.step_sync_on((1,), 8, 0.0)


def test_a_fixed_job_runs_at_its_types_speed(toy: AppTrace) -> None:
    job = fixed_job(toy)
    job.reallocate((1,), 0, "fast", 4.0)
    job.advance(0, 30 + 40)  # 30 s restart, then 40 s at 0.4 s per unit of progress
    assert job.progress == pytest.approx(40 / 0.4)
    assert job.service_by_type == {"fast": pytest.approx(70.0)}  # the restart holds it too


def test_a_job_learns_one_model_per_type_and_compares_them(toy: AppTrace) -> None:
    job = adaptive_job(toy)
    job.reallocate((1,), 0, "slow", 1.0)
    job.advance(0, 120)
    assert job.measured_type_speeds() == {"slow": 1.0}
    job.reallocate((1,), 120, "fast", 4.0)
    job.advance(120, 120)
    speeds = job.measured_type_speeds()
    # the compute of one micro-batch is 4x faster on "fast"; each type's model is fitted from
    # one measured step only here, so the fitter's prior splits it into a fixed and a
    # per-sample part and the ratio comes out near, not at, 0.25
    assert speeds["fast"] == 1.0
    assert 0.2 < speeds["slow"] < 0.4
    assert job.job_info(240).type_speed == speeds
    # back on the slow type: its own model is taken up again, not refitted from scratch
    job.reallocate((1,), 240, "slow", 1.0)
    assert job.measured_type_speeds()["fast"] == pytest.approx(1 / speeds["slow"])


def test_history_fills_types_a_job_has_not_measured() -> None:
    history = TypeSpeedHistory()
    history.observe("cifar", "a", {"K80": 1.0, "V100": 4.0})
    history.observe("cifar", "b", {"K80": 0.5, "V100": 4.0})  # 8x: the mean of logs is 5.66x
    history.observe("cifar", "c", {"V100": 1.0})  # one type: no ratio
    history.observe("bert", "d", {"K80": 1.0, "V100": 2.0})
    assert history.ratio("cifar", "K80", "V100") == pytest.approx(32**0.5)
    # measured speeds win; unmeasured ones scale from the job's current type
    filled = history.fill("cifar", {"K80": 1.0, "P100": 1.5}, ("V100", "P100", "K80"))
    assert filled == pytest.approx({"K80": 1.0, "P100": 1.5, "V100": 32**0.5})
    # a job that never ran: relative to the first type its kind compared
    assert history.fill("bert", {}, ("V100", "K80")) == pytest.approx({"V100": 1.0, "K80": 0.5})
    assert history.fill("unknown", {}, ("V100", "K80")) == {}


def test_the_shipped_speeds_cover_every_application_and_type() -> None:
    speeds = load_type_speeds()
    data = json.loads(TYPE_SPEEDS_FILE.read_text())
    assert set(speeds) == {"bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"}
    for app, row in speeds.items():
        assert set(row) == set(data["types"]), app
        assert row[data["anchor"]] == 1.0
    assert (TYPE_SPEEDS_FILE.parent / "LICENSE").read_text().startswith("MIT License")
    assert THREE_TYPES.gpus == TWO_TYPES.gpus == 64
    nodes = mixed_config(THREE_TYPES).build_nodes()
    assert [n.gpu_type for n in nodes].count("Tesla-V100") == 4
    assert len({n.name for n in nodes}) == 16


class _Mixer:
    """Puts the one job on one GPU of each of the first two nodes (two types)."""

    def __init__(self) -> None:
        self.seen: list[JobInfo] = []

    def optimize(
        self, jobs: list[JobInfo], nodes: list[NodeInfo], previous: dict[str, list[str]]
    ) -> Allocation:
        self.seen += jobs
        return {jobs[0].name: [nodes[0].name, nodes[1].name]}


def test_a_mixed_placement_runs_at_the_slowest_types_pace(tmp_path: Path, toy: AppTrace) -> None:
    workload = load_workload(write_workload(tmp_path / "w.csv", [("j", 0, "toy", 2, 16)]))
    config = SimConfig(
        gpus_per_node=1,
        node_types=(("fast", 1), ("slow", 1)),
        type_speeds={"toy": {"fast": 4.0, "slow": 2.0}},
    )
    sim = Simulator(workload, _Mixer(), {"toy": toy}, config)
    sim.step()
    job = sim.by_name["j"]
    assert (job.gpu_type, job.speed) == ("slow", 2.0)


def test_mixed_clusters_refuse_what_they_cannot_replay() -> None:
    with pytest.raises(ValueError, match="at least one node"):
        SimConfig(node_types=(("V100", 0),))
    with pytest.raises(ValueError, match=r"\(0, 100\]"):
        SimConfig(type_speeds={"cifar10": {"V100": 0.0}})
    with pytest.raises(ValueError, match="uniform"):
        SimConfig(node_types=(("V100", 1),), oracle_info=True)


class _OneTypeCheck:
    """Wraps a policy; fails the replay the moment an answer puts a job on two types."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.rounds = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def optimize(
        self, jobs: list[JobInfo], nodes: list[NodeInfo], previous: dict[str, list[str]]
    ) -> Allocation:
        answer: Allocation = self.inner.optimize(jobs, nodes, previous)  # type: ignore[attr-defined]
        kind = {n.name: n.gpu_type for n in nodes}
        for name, held in answer.items():
            assert len({kind[n] for n in held}) <= 1, (name, held)
        self.rounds += 1
        return answer


@pytest.mark.parametrize("name", ["adl", "sia", "gavel"])
def test_a_short_mixed_replay_never_mixes_types(name: str) -> None:
    from adl.sched.sim.policies import make_policy, rounds_on_events
    from adl.sched.sim.simulator import simulate
    from adl.sched.sim.traces import default_traces_dir

    jobs = load_workload(default_traces_dir() / "workloads" / "workload-1.csv")[:6]
    policy = _OneTypeCheck(make_policy(name))
    config = mixed_config(THREE_TYPES, rounds_on_events=rounds_on_events(name))
    result = simulate(jobs, policy, config=config)  # type: ignore[arg-type]
    assert policy.rounds > 0
    assert all(j.completion_s is not None for j in result.jobs)


def test_a_job_profiled_on_arrival_knows_every_types_speed(toy: AppTrace) -> None:
    job = adaptive_job(toy)
    job.profile_types({"slow": 1.0, "fast": 4.0})
    before = job.job_info(0).type_speed
    assert set(before) == {"slow", "fast"} and before["fast"] > 2 * before["slow"]
    job.reallocate((1,), 0, "fast", 4.0)  # its one-GPU step on "fast" is its first measurement
    assert job.profile == {(1, 1, 8): toy.step_sync_on((1,), 8, 4.0)}
    assert job.measured_type_speeds()["slow"] < 0.5


@pytest.mark.parametrize("explore", [False, True])
def test_with_type_tries_a_job_leaves_the_slow_type_it_started_on(explore: bool) -> None:
    """Production adl (no profiling on arrival) in the simulator: a long cifar10 job starts on
    the slow GPU because the fast one is taken; once it is free, the job tries it (the
    operator's rule, ``SimConfig.explore_types``) and finishes there, about 4x faster. Without
    the try it stays where it started, the fast GPU idle beside it."""
    from dataclasses import replace

    from adl.sched.sim.policies import make_policy
    from adl.sched.sim.simulator import simulate
    from adl.sched.sim.traces import default_traces_dir

    jobs = load_workload(default_traces_dir() / "workloads" / "workload-1.csv")
    ncf = next(j for j in jobs if j.application == "ncf")
    cifar = next(j for j in jobs if j.application == "cifar10")
    workload = [
        replace(ncf, name="short", submit_time=0),
        replace(cifar, name="long", submit_time=0, num_replicas=1),
    ]
    config = SimConfig(
        gpus_per_node=1,
        node_types=(("slow", 1), ("fast", 1)),
        type_speeds={"cifar10": {"fast": 4.0, "slow": 1.0}, "ncf": {"fast": 1.0, "slow": 1.0}},
        profile_types=False,
        learn_type_speeds=False,
        explore_types=explore,
        explain=True,
    )
    result = simulate(workload, make_policy("adl"), config=config)
    long = next(j for j in result.jobs if j.name == "long")
    by_type = dict(long.gpu_seconds_by_type)
    tries = [d.message for _, d in result.decisions if d.job == "long" and d.exploring]
    if explore:
        assert by_type["fast"] > 5 * by_type["slow"]  # it finished on the fast GPU
        assert len(tries) == 1 and "trying fast: not measured there yet" in tries[0]
    else:
        assert set(by_type) == {"slow"} and not tries
