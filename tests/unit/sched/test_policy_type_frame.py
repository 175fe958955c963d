"""Issue 33: a job's weight does not depend on the GPU type it runs on now.

A job restates its remaining work and per-type speeds on the type it runs on; the policy puts
every job on its fastest type's frame (:mod:`adl.sched.policy_type_frame`), so two like jobs,
one on the fast type and one on the slow, do not swap types every round."""

import numpy as np
import pytest
from policy_kit import job

from adl.sched.decisions import HELD_NO_FASTER
from adl.sched.policy import AdlPolicy
from adl.sched.policy_type_frame import frame_scale
from adl.sched.types import JobInfo, NodeInfo

FAST, SLOW = "Tesla-V100", "Tesla-K80"
#: the fast type runs the job this many times as fast as the slow one (imagenet: about 6)
RATIO = 6.0
#: the job's remaining work in seconds on one fast GPU
WORK_FAST_S = 300_000.0


def _cluster() -> list[NodeInfo]:
    return [NodeInfo("v0", 4, gpu_type=FAST), NodeInfo("k0", 4, gpu_type=SLOW)]


def _as_reported(name: str, order: int, on: str | None) -> JobInfo:
    """A long job as it reports itself while running on ``on``: its work in seconds on one GPU
    of that type, its speeds relative to it (a job that runs nowhere states the slow type's)."""
    here = on or SLOW
    speed = {FAST: RATIO, SLOW: 1.0}  # on one absolute scale
    return job(
        name,
        order,
        max_replicas=4,
        max_profiled_replicas=4,
        age_s=3_600.0,
        restarts=2,
        remaining_s=WORK_FAST_S * RATIO / speed[here],
        type_speed={t: s / speed[here] for t, s in speed.items()},
    )


def _type_of(nodes: list[str]) -> str | None:
    return {"v0": FAST, "k0": SLOW}[nodes[0]] if nodes else None


def test_two_like_jobs_on_a_fast_and_a_slow_type_keep_their_types_round_after_round() -> None:
    # The old frame: the job on the K80 stated 6x the remaining seconds, so with the
    # shortest-first exponent 1/2 it weighed itself sqrt(6) x higher, took the V100s, and lost
    # them back the next round, for as long as both ran.
    nodes = _cluster()
    policy = AdlPolicy()
    previous = {"a": ["v0"] * 4, "b": ["k0"] * 4}
    changes = 0
    for _ in range(6):
        jobs = [
            _as_reported(name, order, _type_of(previous[name]))
            for order, name in enumerate(("a", "b"))
        ]
        got = policy.optimize(jobs, nodes, previous)
        changes += sum(_type_of(got[n]) != _type_of(previous[n]) for n in ("a", "b"))
        previous = {n: got[n] for n in ("a", "b")}
    assert changes == 0
    assert previous == {"a": ["v0"] * 4, "b": ["k0"] * 4}


def test_a_jobs_value_is_the_same_whichever_type_it_states_itself_on() -> None:
    nodes = _cluster()
    policy = AdlPolicy()
    for placement in (["v0"] * 4, ["k0"] * 2):
        values = {
            on: policy.objective(
                [_as_reported("a", 0, on)], nodes, {"a": placement}, {"a": placement}
            )
            for on in (FAST, SLOW)
        }
        assert values[FAST] > 0
        assert abs(values[FAST] - values[SLOW]) <= 1e-9 * values[FAST]


def test_the_frame_is_the_fastest_measured_type_and_one_on_a_cluster_of_one_type() -> None:
    assert frame_scale({FAST: 6.0, SLOW: 1.0}) == 6.0
    assert frame_scale({FAST: 1.0, SLOW: 1 / 6}) == 1.0
    assert frame_scale({"": 1.0}) == 1.0
    assert frame_scale({}) == 1.0
    # a type only being tried is optimistic, not measured: it sets no frame
    assert frame_scale({FAST: 1.5, SLOW: 1.0}, exploring=(FAST,)) == 1.0
    assert frame_scale({FAST: float("nan"), SLOW: 1.0}) == 1.0


def test_a_hold_on_the_slow_type_names_the_speedups_the_job_states() -> None:
    # The frame is the policy's own: what it tells the user of a job held on K80s is the
    # speedup the job states on its K80s, not that speedup over the V100s' 6x.
    nodes = _cluster()
    flat = job(
        "flat",
        0,
        speedup=lambda n, k: np.minimum(np.asarray(k, dtype=float), 2.0),  # no faster beyond 2
        max_replicas=4,
        max_profiled_replicas=4,
        type_speed={SLOW: 1.0, FAST: RATIO},
    )
    other = job("other", 1, max_replicas=4, preemptible=False)
    previous = {"flat": ["k0"] * 2, "other": ["v0"] * 4}
    holds = AdlPolicy().explain_holds([flat, other], nodes, previous, previous)
    assert holds["flat"].cause == HELD_NO_FASTER
    assert holds["flat"].speedup_now == pytest.approx(2.0)
    assert holds["flat"].speedup_target == pytest.approx(2.0)
