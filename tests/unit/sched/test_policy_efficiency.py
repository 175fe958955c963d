"""The opt-in efficiency floor of adl.sched.policy_efficiency: GPU-time goes to efficient replica
counts first, and to a job's inefficient ones only when no other job can use it."""

import numpy as np
import pytest
from policy_kit import counts, job, nodes_of

from adl.sched.policy import AdlPolicy
from adl.sched.policy_efficiency import beyond_efficient, efficient_count


def knee(n, k):
    """Linear to 4 replicas, then a fifth of a replica's speedup per extra replica."""
    k = np.asarray(k, dtype=float)
    return np.where(k <= 4, k, 4.0 + 0.2 * (k - 4.0))


def test_the_efficient_count_is_the_most_replicas_that_meet_the_floor():
    # 4 + 0.2 (k - 4) >= 0.5 k  <=>  k <= 10.67
    assert efficient_count(lambda k: float(knee(1, k)), 32, 0.5) == 10
    assert efficient_count(lambda k: float(knee(1, k)), 8, 0.5) == 8  # the cap meets it
    assert efficient_count(lambda k: 0.1, 16, 0.5) == 1


def test_a_dip_at_a_node_boundary_does_not_hide_the_counts_above_it():
    # slow on 5..7 replicas (two nodes, half full), efficient again on 8 (two full nodes)
    curve = {k: (k if k <= 4 or k == 8 else 1.0) for k in range(1, 9)}
    assert efficient_count(curve.__getitem__, 8, 0.9) == 8


def test_a_bad_floor_is_refused():
    with pytest.raises(ValueError, match="efficiency floor"):
        efficient_count(lambda k: 1.0, 4, 1.0)


def test_above_the_efficient_count_a_speedup_is_worth_a_hundredth():
    assert beyond_efficient(6.0, 4.0) == pytest.approx(4.02)
    assert beyond_efficient(3.0, 4.0) == pytest.approx(4.0)  # never below the efficient one


def test_a_short_job_stops_at_its_efficient_count_while_a_long_one_can_use_the_rest():
    # One 16-GPU node. Without the floor the short job's weight makes even its fifth-of-a-GPU
    # speedups worth more than the long job's linear ones; with it, the rest go to the long job.
    jobs = [
        job("short", 0, speedup=knee, remaining_s=600.0, max_replicas=16),
        job("long", 1, speedup=lambda n, k: np.asarray(k, float), remaining_s=1e6),
    ]
    nodes = nodes_of(1, gpus=16)
    plain = counts(AdlPolicy().optimize(jobs, nodes, {}))
    floored = counts(AdlPolicy(efficiency_floor=0.5).optimize(jobs, nodes, {}))
    assert plain["short"] > 10
    assert floored == {"short": 10, "long": 6}


def test_alone_a_job_still_takes_the_gpus_beyond_its_efficient_count():
    jobs = [job("short", 0, speedup=knee, remaining_s=600.0, max_replicas=16)]
    floored = counts(AdlPolicy(efficiency_floor=0.5).optimize(jobs, nodes_of(1, gpus=16), {}))
    assert floored == {"short": 16}
