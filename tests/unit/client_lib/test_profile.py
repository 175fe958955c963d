"""Step-time profile: interval bookkeeping and the throughput-model fit through adl.sched."""

from __future__ import annotations

import numpy as np
import pytest

from adl.client_lib.profile import Profile
from adl.sched.goodput import BatchBounds, GoodputFunction, GradParams, PerfParams, step_time

TRUE = PerfParams(
    alpha_c=0.02, beta_c=0.001, alpha_n=0.05, beta_n=0.01, alpha_r=0.01, beta_r=0.002, gamma=2.0
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _run(profile: Profile, clock: FakeClock, cfg: tuple[int, int, int], accum: int, steps: int):
    """Drive ``tick`` like AdaptiveDataParallel.forward, advancing the clock by the model."""
    nodes, replicas, bsz = cfg
    tc = float(step_time(TRUE, nodes, 1, bsz))
    ts = float(step_time(TRUE, nodes, replicas, bsz))
    for _ in range(steps):
        for micro in range(accum + 1):
            sync = micro == accum
            profile.tick(cfg, sync)
            clock.now += ts if sync else tc


def test_warmup_intervals_are_not_recorded() -> None:
    clock = FakeClock()
    profile = Profile(warmup_intervals=3, clock=clock)
    _run(profile, clock, (1, 1, 32), accum=0, steps=5)
    obs = profile.observations()
    assert obs is not None
    # 5 ticks -> 4 intervals, 3 of them warm-up.
    assert profile.state_dict()["times"] == [[1, 1, 32, 0.0, 0, pytest.approx(0.052), 1]]


def test_pause_drops_the_running_interval() -> None:
    clock = FakeClock()
    profile = Profile(warmup_intervals=0, clock=clock)
    profile.tick((1, 1, 8), True)
    profile.pause()
    clock.now += 100.0  # an evaluation pass: not a step
    profile.tick((1, 1, 8), True)
    clock.now += 1.0
    profile.tick((1, 1, 8), True)
    obs = profile.observations()
    assert obs is not None
    assert obs.step_time.tolist() == [1.0]


def test_accumulation_and_sync_steps_are_kept_apart() -> None:
    clock = FakeClock()
    profile = Profile(warmup_intervals=0, clock=clock)
    _run(profile, clock, (1, 2, 16), accum=2, steps=10)
    obs = profile.observations()
    assert obs is not None
    assert obs.compute_time[0] == pytest.approx(float(step_time(TRUE, 1, 1, 16)))
    assert obs.step_time[0] == pytest.approx(float(step_time(TRUE, 1, 2, 16)))


def test_fit_recovers_the_step_times_of_the_generating_model() -> None:
    clock = FakeClock()
    profile = Profile(warmup_intervals=1, clock=clock)
    for cfg in [(1, 1, 16), (1, 1, 64), (1, 2, 32), (1, 4, 32), (2, 4, 32), (2, 8, 64)]:
        _run(profile, clock, cfg, accum=1, steps=6)
    assert profile.max_profiled_replicas() == 8
    fitted = profile.perf_params()
    assert fitted is not None
    for nodes, replicas, bsz in [(1, 1, 48), (1, 3, 32), (2, 6, 48)]:
        got = float(step_time(fitted, nodes, replicas, bsz))
        want = float(step_time(TRUE, nodes, replicas, bsz))
        assert got == pytest.approx(want, rel=0.05)


def test_fit_is_cached_until_new_measurements_arrive() -> None:
    clock = FakeClock()
    profile = Profile(warmup_intervals=0, clock=clock)
    assert profile.perf_params() is None
    _run(profile, clock, (1, 1, 16), accum=0, steps=4)
    first = profile.perf_params()
    assert profile.perf_params() is first
    _run(profile, clock, (1, 1, 64), accum=0, steps=4)
    assert profile.perf_params() is not first


def test_multi_replica_compute_time_is_borrowed_from_a_single_replica_row() -> None:
    clock = FakeClock()
    profile = Profile(warmup_intervals=0, clock=clock)
    _run(profile, clock, (1, 1, 32), accum=0, steps=4)
    _run(profile, clock, (1, 2, 32), accum=0, steps=4)
    obs = profile.observations()
    assert obs is not None
    assert obs.compute_time.tolist() == pytest.approx([0.052, 0.052])
    assert obs.step_time[1] > obs.compute_time[1]


def test_goodput_provider() -> None:
    clock = FakeClock()
    profile = Profile(warmup_intervals=0, clock=clock)
    bounds = BatchBounds(32, 1024, (8, 128))
    grad = GradParams(sqr=1.0, var=4.0)
    assert profile.goodput_fn(grad, bounds) is None
    for bsz in (16, 64):
        _run(profile, clock, (1, 1, bsz), accum=1, steps=4)
    fn = profile.goodput_fn(grad, bounds)
    assert isinstance(fn, GoodputFunction)
    assert profile.goodput_fn(None, bounds) is None
    # a degenerate estimate is no estimate: the loader keeps its batch (B0) instead of taking
    # the largest one, which sqr == 0 makes look free
    assert profile.goodput_fn(GradParams(sqr=0.0, var=4.0), bounds) is None
    assert profile.goodput_fn(GradParams(sqr=float("nan"), var=4.0), bounds) is None
    choice = fn.optimize(1, 1)
    assert np.all(choice.goodput > 0)


def test_state_round_trip() -> None:
    clock = FakeClock()
    profile = Profile(warmup_intervals=0, clock=clock)
    _run(profile, clock, (1, 2, 16), accum=1, steps=4)
    other = Profile()
    other.load_state_dict(profile.state_dict())
    a, b = profile.observations(), other.observations()
    assert a is not None and b is not None
    assert a.step_time.tolist() == b.step_time.tolist()
    assert other.perf_params() is not None
