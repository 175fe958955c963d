"""The opt-in weights of adl.sched.policy_weights: heSRPT's rank shares and aging on the time
a job needs at its cap."""

import itertools

import numpy as np
import pytest
from policy_kit import counts, job, nodes_of

from adl.sched.policy import AdlPolicy
from adl.sched.policy_weights import aging, rank_shares, rank_weights


@pytest.mark.parametrize("m", [1, 2, 5, 40])
@pytest.mark.parametrize("p", [0.2, 0.5, 0.9])
def test_rank_shares_sum_to_one_and_grow_toward_the_smallest_job(m, p):
    shares = rank_shares(m, p)
    assert sum(shares) == pytest.approx(1.0)
    assert all(a < b for a, b in itertools.pairwise(shares))


def test_rank_shares_are_hesrpt_closed_form():
    # p = 1/2 (c = 2): the i-th largest of m gets (2i - 1) / m^2
    assert rank_shares(3, 0.5) == pytest.approx([1 / 9, 3 / 9, 5 / 9])


def test_rank_weights_depend_on_the_order_of_sizes_not_their_magnitude():
    near = rank_weights([1000.0, 1001.0, 999.0], 0.5)
    far = rank_weights([1e6, 1e7, 10.0], 0.5)
    assert near == pytest.approx(far)
    assert near[2] > near[0] > near[1]  # smallest job, middle, largest


def test_rank_weights_make_the_optimum_of_the_objective_the_hesrpt_shares():
    # sum_j w_j k_j^p is maximised where w_j p k_j^(p-1) is equal for all jobs; at the
    # heSRPT shares that holds exactly for these weights.
    p = 0.5
    sizes = [5.0, 1.0, 3.0, 8.0]
    w = np.array(rank_weights(sizes, p))
    order = np.argsort([-s for s in sizes], kind="stable")
    shares = np.empty(len(sizes))
    shares[order] = rank_shares(len(sizes), p)
    marginal = w * p * shares ** (p - 1)
    assert marginal == pytest.approx(np.full(len(sizes), marginal[0]))


def test_rank_power_range_is_checked():
    with pytest.raises(ValueError):
        rank_shares(3, 1.0)
    with pytest.raises(ValueError):
        AdlPolicy(rank_power=0.99)


def _power(p):
    def fn(n, k):
        return np.asarray(k, dtype=float) ** p

    return fn


def test_rank_power_policy_gives_the_smallest_job_the_biggest_share_not_all_of_it():
    # speedup k^0.5 on 16 single-GPU "nodes" so placement does not matter; three jobs of very
    # different sizes: heSRPT gives them 1/9, 3/9, 5/9 of the GPUs (about 2, 5, 9).
    nodes = nodes_of(16, gpus=1)
    jobs = [
        job(name, i, remaining_s=size, speedup=_power(0.5), max_profiled_replicas=16)
        for i, (name, size) in enumerate([("big", 1e8), ("mid", 1e7), ("small", 1e6)])
    ]
    got = counts(AdlPolicy(rank_power=0.5, fairness=0.0, dp=0).optimize(jobs, nodes, {}))
    assert got["small"] > got["mid"] > got["big"] >= 1
    assert abs(got["small"] - 9) <= 1 and abs(got["big"] - 2) <= 1
    # the default weights (1 / R^0.5) starve the big job here
    default = counts(AdlPolicy(fairness=0.0, dp=0).optimize(jobs, nodes, {}))
    assert default["big"] < got["big"]


def test_aging_on_best_time_lets_a_long_scalable_job_age():
    # a long job that scales waits as long as a short one: on its one-GPU seconds it has
    # barely aged; on the time it needs at its cap (16x faster) it has.
    assert aging(3600.0, 1e6, 1.0) == pytest.approx(1.0036)
    assert aging(3600.0, 1e6 / 16, 1.0) == pytest.approx(1.0576)
    nodes = nodes_of(1, gpus=16)
    linear = _power(1.0)
    jobs = [
        job("long", 0, remaining_s=4e5, age_s=60_000.0, speedup=linear, max_profiled_replicas=16),
        job("short", 1, remaining_s=4e4, age_s=0.0, speedup=linear, max_profiled_replicas=16),
    ]
    plain = counts(AdlPolicy(dp=0).optimize(jobs, nodes, {}))
    best = counts(AdlPolicy(aging_best=1, dp=0).optimize(jobs, nodes, {}))
    assert plain["short"] > plain["long"]
    assert best["long"] > best["short"]
