"""Issue 34's makespan: the end phase (``end_phase_mult``).

When only long jobs are left, shortest-first weights keep ranking them against each other:
the shortest takes most of the cluster and the longest crawls on a few GPUs, so they finish
one after another and the last sets the makespan alone. The end phase balances their
predicted JCTs instead."""

import pytest
from policy_kit import amdahl, counts, job, nodes_of

from adl.sched.policy import AdlPolicy
from adl.sched.policy_endphase import balanced_counts, in_end_phase, shared_weight

SPEEDUP = amdahl(0.02)


def _long_jobs() -> list:
    """Three long jobs of different remaining work on 64 GPUs, no arrival for hours (the
    youngest is 6,000 s old), restarting costs 250 s (imagenet's under the peer conditions)."""
    spec = [("a", 400_000.0, 20_000.0), ("b", 800_000.0, 19_000.0), ("c", 1_200_000.0, 6_000.0)]
    return [
        job(
            name,
            i,
            remaining_s=remaining,
            age_s=age,
            attained_service_s=8 * age,
            max_replicas=64,
            max_profiled_replicas=64,
            speedup=SPEEDUP,
            restart_cost_s=250.0,
        )
        for i, (name, remaining, age) in enumerate(spec)
    ]


def _predicted_jcts(policy: AdlPolicy) -> tuple[dict[str, int], dict[str, float]]:
    """Three rounds from the shortest-first state (the shortest job on 40 GPUs, the longest on
    8): the counts, and each job's predicted JCT (age + remaining work / speedup) at them."""
    nodes = nodes_of(16)

    def on(lo: int, hi: int) -> list[str]:
        return [f"n{i}" for i in range(lo, hi) for _ in range(4)]

    answer = {"a": on(0, 10), "b": on(10, 14), "c": on(14, 16)}
    for _ in range(3):
        answer = policy.optimize(_long_jobs(), nodes, answer)
    got = counts(answer)
    jct = {}
    for j in _long_jobs():
        n = got.get(j.name, 0)
        assert n > 0, f"{j.name} was left without GPUs"
        jct[j.name] = j.age_s + j.remaining_s / float(SPEEDUP(-(-n // 4), n))
    return got, jct


def test_shortest_first_leaves_the_longest_job_far_behind() -> None:
    got, jct = _predicted_jcts(AdlPolicy(quiet_growth=True))
    assert got == {"a": 40, "b": 16, "c": 8}
    assert max(jct.values()) > 2.0 * min(jct.values())  # c: 196,000 s, a: 40,000 s


def test_the_end_phase_balances_the_predicted_jcts() -> None:
    got, jct = _predicted_jcts(AdlPolicy(quiet_growth=True, end_phase_mult=4))
    assert sum(got.values()) == 64
    assert got["c"] > got["b"] > got["a"]  # the most to the job predicted to end last
    assert max(jct.values()) < 1.3 * min(jct.values())
    assert max(jct.values()) < 0.5 * 196_000.0


def test_the_end_phase_holds_only_when_no_job_waits_or_is_short_or_young() -> None:
    ages = [7_200.0, 7_200.0, 7_200.0]
    assert in_end_phase([100.0, 80.0, 30.0], [True] * 3, ages, 4, 1_800.0)
    assert not in_end_phase([100.0, 80.0, 20.0], [True] * 3, ages, 4, 1_800.0)  # a short one
    assert not in_end_phase([100.0, 80.0, 30.0], [True, False, True], ages, 4, 1_800.0)
    young = [7_200.0, 600.0, 7_200.0]  # an arrival 600 s ago
    assert not in_end_phase([100.0, 80.0, 30.0], [True] * 3, young, 4, 1_800.0)
    assert not in_end_phase([100.0], [True], [7_200.0], 4, 1_800.0)  # alone: nothing to balance
    assert not in_end_phase([100.0, 80.0], [True] * 2, ages[:2], 0, 1_800.0)  # off


def _linear(k: int) -> float:
    return float(k)


def test_water_filling_gives_each_next_node_to_the_job_predicted_to_end_last() -> None:
    # linear speedups, no age: counts in proportion to the remaining work, in whole nodes
    got = balanced_counts([1.0, 2.0, 5.0], [_linear] * 3, [64] * 3, [4] * 3, [1] * 3, 32, [0.0] * 3)
    assert got == [4, 8, 20]
    # an older job counts its age: equal work, the older gets more
    got = balanced_counts([8.0, 8.0], [_linear] * 2, [64] * 2, [4] * 2, [1] * 2, 16, [4.0, 0.0])
    assert got == [12, 4]
    # a cap, and a job that is no faster beyond 4 replicas, leave the rest to the others
    flat = [lambda k: float(min(k, 4)), _linear]
    assert balanced_counts([9.0, 1.0], flat, [64, 8], [4, 4], [1, 1], 32, [0.0, 0.0]) == [4, 8]
    # replicas of 2 GPUs on nodes of 2 replicas; jobs that cannot all hold one replica: None
    pairs = dict(caps=[8] * 2, gprs=[2] * 2, ages=[0.0] * 2)
    got = balanced_counts([1.0, 1.0], [_linear] * 2, per_node=[2] * 2, total_gpus=8, **pairs)
    assert got == [2, 2]
    assert (
        balanced_counts([1.0, 1.0], [_linear] * 2, per_node=[2] * 2, total_gpus=2, **pairs) is None
    )
    with pytest.raises(ValueError, match="one remaining"):
        balanced_counts([1.0], [_linear] * 2, [4], [4], [1], 4, [0.0])


def test_the_shared_weight_keeps_the_users_weights() -> None:
    assert shared_weight([0.5, 0.1, 0.3], [1.0, 1.0, 2.0]) == [0.5, 0.5, 1.0]
    assert shared_weight([0.5, 0.2], [1.0, 0.0]) == [0.5, 0.0]
    with pytest.raises(ValueError, match="one own weight"):
        shared_weight([1.0], [])
