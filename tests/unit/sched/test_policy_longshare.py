"""Issue 34's tail: a steady efficient share for long jobs (``long_job_mult``).

Shortest-first weights leave a long job on no GPUs while short jobs take GPUs whose extra
speedup is small; the floor keeps the long job at its efficient scale (capped by its part of
``long_floor_share`` of the cluster) instead."""

import pytest
from policy_kit import amdahl, counts, job, nodes_of

from adl.sched.policy import AdlPolicy
from adl.sched.policy_longshare import (
    behind_floor,
    efficient_scale,
    floor_count,
    floor_weight,
    long_job_indices,
)


def _busy_round(
    policy: AdlPolicy,
    attained_s: float = 0.0,
    prev: dict[str, list[str]] | None = None,
    longs: int = 1,
    shorts: int = 4,
) -> dict[str, int]:
    """16 GPUs; a long job (``longs`` of them) that scales well (1% serial) beside
    ``shorts`` short jobs that scale poorly (15% serial) and could use every GPU between
    them."""
    long_jobs = [
        job(
            "long" if k == 0 else f"long{k}",
            k,
            remaining_s=1_000_000.0,
            age_s=7_200.0,
            attained_service_s=attained_s,
            max_replicas=16,
            max_profiled_replicas=16,
            speedup=amdahl(0.01),
        )
        for k in range(longs)
    ]
    short_jobs = [
        job(
            f"s{i}",
            longs + i,
            remaining_s=3_000.0,
            age_s=60.0,
            max_replicas=16,
            max_profiled_replicas=16,
            speedup=amdahl(0.15),
        )
        for i in range(shorts)
    ]
    return counts(policy.optimize([*long_jobs, *short_jobs], nodes_of(4), prev or {}))


def test_the_default_policy_leaves_the_long_job_without_gpus() -> None:
    got = _busy_round(AdlPolicy())
    assert got.get("long", 0) == 0
    assert sum(got.values()) == 16  # the short jobs take the 3rd and 4th GPUs of a node


@pytest.mark.parametrize("weight", [1.0, 100.0])
def test_the_long_job_is_kept_at_its_floor(weight: float) -> None:
    # the floor: its efficient scale capped at half of the 16 GPUs (the only long job)
    got = _busy_round(AdlPolicy(long_job_mult=4, long_floor_weight=weight))
    assert got["long"] == 8
    assert sum(got.values()) == 16
    assert all(got[f"s{i}"] >= 1 for i in range(4))  # short jobs still run


def test_the_share_caps_the_floor() -> None:
    assert _busy_round(AdlPolicy(long_job_mult=4, long_floor_share=0.25))["long"] == 4


def test_the_catch_up_floor_acts_only_while_the_job_is_behind_it() -> None:
    policy = AdlPolicy(long_job_mult=4, long_floor_catchup=True)
    # 8 GPUs x 7,200 s would have given it 57,600 GPU-seconds
    assert _busy_round(policy, attained_s=10_000.0)["long"] == 8
    assert _busy_round(policy, attained_s=60_000.0).get("long", 0) == 0
    assert behind_floor(10.0, 10.0, 2) and not behind_floor(20.0, 10.0, 2)


def test_no_floor_weight_means_no_floor() -> None:
    assert _busy_round(AdlPolicy(long_job_mult=4, long_floor_weight=0)).get("long", 0) == 0


def test_long_jobs_are_the_longest_class_far_above_the_median() -> None:
    assert long_job_indices([1, 2, 3, 100, 80, 5], 4) == [3, 4]
    assert long_job_indices([100, 80, 30], 4) == []  # a drain of one size: none is long
    assert long_job_indices([1, 100], 0) == []  # off


def test_the_long_class_stays_long_when_it_is_half_the_jobs() -> None:
    # Two long jobs beside two short ones (a quiet spell of the busy hours): the median of all
    # four is a long job's, and a test against it found no long job, so the floor went off
    # for that round and its job was preempted by the next arrival (workload-4 under the peer
    # conditions: imagenet-57's class was empty in 130 of 419 rounds of hours 3.2-10.2)
    assert long_job_indices([1, 2, 100, 80], 4) == [2, 3]
    assert long_job_indices([3, 100, 90, 80], 4) == [1, 2, 3]


def test_two_long_jobs_beside_two_short_ones_keep_their_floors() -> None:
    policy = AdlPolicy(long_job_mult=4, long_floor_share=0.5)
    got = _busy_round(policy, longs=2, shorts=2)
    assert got["long"] == 4 and got["long1"] == 4  # half of 16 GPUs, split between two
    assert _busy_round(AdlPolicy(), longs=2, shorts=2).get("long", 0) == 0


def test_a_held_floor_stays_on_until_the_job_is_its_hold_ahead() -> None:
    # 8 GPUs x 7,200 s would have given it 57,600 GPU-seconds; it has 60,000, so it is even
    # with its floor: the catch-up alone takes its GPUs (to be given back the round it falls
    # behind again, a restart each way); with a one-hour hold it keeps them
    held = {"long": ["n0"] * 4 + ["n1"] * 4}
    alone = AdlPolicy(long_job_mult=4, long_floor_catchup=True)
    assert _busy_round(alone, attained_s=60_000.0, prev=held).get("long", 0) < 8
    hold = AdlPolicy(long_job_mult=4, long_floor_catchup=True, long_floor_hold_s=3_600.0)
    assert _busy_round(hold, attained_s=60_000.0, prev=held)["long"] == 8
    # ... but not a floor it is not on: a job that holds none waits until it is behind
    assert _busy_round(hold, attained_s=60_000.0).get("long", 0) == 0
    # and a job a whole hold ahead lets it go
    assert _busy_round(hold, attained_s=8 * 10_900.0, prev=held).get("long", 0) < 8
    assert behind_floor(20.0, 10.0, 2, hold_s=1.0) and not behind_floor(22.0, 10.0, 2, 1.0)


def test_the_efficient_scale_is_the_highest_step_that_still_pays() -> None:
    def linear(k: int) -> float:
        return float(k)

    assert efficient_scale(linear, 16, 4, 0.5) == 16

    def flat_after_two(k: int) -> float:
        return float(min(k, 2))

    assert efficient_scale(flat_after_two, 16, 4, 0.5) == 2

    def dip_then_recover(k: int) -> float:
        # slower on 5 (a second node, one replica on it), fast again on whole nodes
        return {5: 3.0}.get(k, 0.9 * k)

    assert efficient_scale(dip_then_recover, 12, 4, 0.5) == 12
    with pytest.raises(ValueError, match="long_floor_gain"):
        efficient_scale(linear, 4, 4, 0.0)


def test_the_floor_and_its_weight() -> None:
    assert floor_count(16, 64, 0.5, 2, 1) == 16
    assert floor_count(40, 64, 0.5, 2, 1) == 16  # half the cluster over two long jobs
    assert floor_count(40, 64, 0.5, 2, 4) == 4  # in replicas of 4 GPUs
    assert floor_count(40, 4, 0.1, 3, 1) == 1  # at least one replica
    with pytest.raises(ValueError, match="one long job"):
        floor_count(4, 64, 0.5, 0, 1)
    assert floor_weight(0.1, 2.0, 1.0) == 2.0
    assert floor_weight(3.0, 2.0, 1.0) == 3.0  # never below its own
