from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from policy_kit import amdahl, counts, job, nodes_of, random_jobs

from adl.sched.placement import Cluster, validate_allocation
from adl.sched.policy import AdlPolicy
from adl.sched.types import JobInfo, NodeInfo

# --------------------------------------------------------------------------- validity


@pytest.mark.parametrize("seed", range(6))
def test_allocations_are_valid_and_respect_bounds(seed):
    nodes = [*nodes_of(7), NodeInfo("big", 8), NodeInfo("small", 2)]
    jobs = random_jobs(seed, 25)
    policy = AdlPolicy(seed=seed)
    previous: dict[str, list[str]] = {}
    for _ in range(4):
        alloc = policy.optimize(jobs, nodes, previous)
        assert validate_allocation(alloc, nodes) == []
        assert set(alloc) == {j.name for j in jobs}
        for j in jobs:
            k = len(alloc[j.name])
            assert k == 0 or j.min_replicas <= k <= j.max_replicas
            knobs, profiled = policy.knobs, j.max_profiled_replicas
            reach = knobs.ramp_factor * profiled if profiled else knobs.bootstrap_replicas
            assert k <= max(reach, 1, j.min_replicas)
        previous = alloc
        jobs = [replace(j, max_profiled_replicas=max(j.max_profiled_replicas, 1)) for j in jobs]


def test_fills_the_cluster_when_jobs_can_use_it():
    nodes = nodes_of(4)
    jobs = [job(f"j{i}", i, remaining_s=1000.0 * (i + 1)) for i in range(6)]
    alloc = AdlPolicy().optimize(jobs, nodes, {})
    assert sum(counts(alloc).values()) == 16


def test_deterministic_for_a_seed():
    nodes = nodes_of(8)
    jobs = random_jobs(3, 30)
    a = AdlPolicy(seed=1).optimize(jobs, nodes, {})
    b = AdlPolicy(seed=1).optimize(list(reversed(jobs)), nodes, {})
    assert a == b


def test_never_overallocates_a_node_and_no_two_distributed_jobs_share_one():
    nodes = nodes_of(5)
    # Jobs that scale well want many GPUs, forcing multi-node placements.
    jobs = [job(f"j{i}", i, speedup=amdahl(0.0, 0.99), max_replicas=6) for i in range(3)]
    alloc = AdlPolicy().optimize(jobs, nodes, {})
    assert validate_allocation(alloc, nodes) == []
    multi = [set(v) for v in alloc.values() if len(set(v)) > 1]
    assert len(multi) >= 2, "test should exercise several distributed jobs"
    for i, a in enumerate(multi):
        for b in multi[i + 1 :]:
            assert not a & b
    used = Counter(n for v in alloc.values() for n in v)
    assert all(used[n.name] <= n.gpus for n in nodes)


def test_packs_small_jobs_onto_single_nodes():
    nodes = nodes_of(4)
    jobs = [job(f"j{i}", i, max_replicas=2) for i in range(8)]
    alloc = AdlPolicy().optimize(jobs, nodes, {})
    for names in alloc.values():
        assert len(set(names)) <= 1
    assert sum(counts(alloc).values()) == 16


def test_large_job_spans_the_fewest_nodes():
    nodes = nodes_of(6)
    jobs = [job("big", speedup=amdahl(0.0, 0.99), max_replicas=8)]
    alloc = AdlPolicy().optimize(jobs, nodes, {})
    assert len(alloc["big"]) == 8
    assert len(set(alloc["big"])) == 2


def test_ramp_cap_twice_profiled_replicas():
    # the 1, 2, 4, ... ramp (the former defaults; bootstrap and ramp: the planning tests)
    nodes = nodes_of(4)
    doubling = AdlPolicy(ramp_factor=2, bootstrap_replicas=1)
    fresh = doubling.optimize([job("a", max_profiled_replicas=0)], nodes, {})
    assert len(fresh["a"]) == 1
    ramped = doubling.optimize([job("a", max_profiled_replicas=3)], nodes, {})
    assert len(ramped["a"]) == 6
    # the defaults (issue 22's node-first start): one node first, then 4 x what was measured
    assert len(AdlPolicy().optimize([job("a", max_profiled_replicas=0)], nodes, {})["a"]) == 4
    assert len(AdlPolicy().optimize([job("a", max_profiled_replicas=3)], nodes, {})["a"]) == 12


def test_min_replicas_all_or_nothing():
    nodes = nodes_of(1)
    jobs = [job("hog", 0, min_replicas=3, max_replicas=4), job("gang", 1, min_replicas=3)]
    alloc = AdlPolicy().optimize(jobs, nodes, {})
    ks = sorted(counts(alloc).values())
    assert ks in ([0, 3], [0, 4])


def test_gpus_per_replica_respected():
    nodes = nodes_of(2, gpus=4)
    jobs = [job("wide", gpus_per_replica=2, max_replicas=8, speedup=amdahl(0.0, 0.99))]
    alloc = AdlPolicy().optimize(jobs, nodes, {})
    assert len(alloc["wide"]) == 4
    assert validate_allocation(alloc, nodes, {"wide": 2}) == []


# --------------------------------------------------------------------------- preferences


def test_prefers_job_with_higher_marginal_speedup():
    nodes = nodes_of(1, gpus=2)
    jobs = [
        job("scales", 0, speedup=amdahl(0.0)),
        job("flat", 1, speedup=amdahl(1.0)),  # a second GPU adds nothing
    ]
    prev = {"scales": ["n0"], "flat": ["n0"]}
    alloc = AdlPolicy().optimize(jobs, nodes, {})
    assert counts(alloc) == {"scales": 2, "flat": 0} or counts(alloc) == {"scales": 1, "flat": 1}
    # With one GPU each already running, giving the second to the scaling job is never worse.
    nodes3 = nodes_of(1, gpus=3)
    alloc = AdlPolicy().optimize(jobs, nodes3, prev)
    assert counts(alloc)["scales"] == 2
    assert counts(alloc)["flat"] == 1


def test_shorter_remaining_work_first():
    nodes = nodes_of(1, gpus=1)
    jobs = [job("long", 0, remaining_s=50_000.0), job("short", 1, remaining_s=500.0)]
    assert counts(AdlPolicy().optimize(jobs, nodes, {})) == {"long": 0, "short": 1}


def test_unknown_length_falls_back_to_least_attained_service():
    nodes = nodes_of(1, gpus=1)
    jobs = [
        job("veteran", 0, remaining_s=None, attained_service_s=40_000.0),
        job("newcomer", 1, remaining_s=None, attained_service_s=100.0),
    ]
    assert counts(AdlPolicy().optimize(jobs, nodes, {})) == {"veteran": 0, "newcomer": 1}


def test_fairness_knob_lets_a_long_waiting_job_in():
    nodes = nodes_of(1, gpus=1)
    jobs = [
        job("starved", 0, remaining_s=20_000.0, age_s=200_000.0),
        job("fresh", 1, remaining_s=5_000.0, age_s=0.0),
    ]
    assert counts(AdlPolicy(fairness=0.0).optimize(jobs, nodes, {}))["fresh"] == 1
    assert counts(AdlPolicy(fairness=1.0).optimize(jobs, nodes, {}))["starved"] == 1


# --------------------------------------------------------------------------- warm start


def test_warm_start_is_a_fixed_point():
    nodes = nodes_of(8)
    jobs = random_jobs(7, 20)
    policy = AdlPolicy()
    first = policy.optimize(jobs, nodes, {})
    second = policy.optimize(jobs, nodes, first)
    assert second == first


def test_small_changes_do_not_reshuffle_running_jobs():
    nodes = nodes_of(8)
    jobs = random_jobs(11, 20)
    policy = AdlPolicy()
    first = policy.optimize(jobs, nodes, {})
    # A minute later: everyone made a little progress.
    later = [
        replace(
            j,
            age_s=j.age_s + 60,
            remaining_s=None
            if j.remaining_s is None
            else max(j.remaining_s - 60 * len(first[j.name]), 60.0),
        )
        for j in jobs
    ]
    second = policy.optimize(later, nodes, first)
    moved = [n for n in first if first[n] and second[n] != first[n]]
    assert len(moved) <= 2


def test_restart_penalty_keeps_a_running_job_against_a_marginally_better_one():
    nodes = nodes_of(1, gpus=1)
    running = job("running", 0, remaining_s=1000.0, restart_cost_s=60.0)
    newcomer = job("newcomer", 1, remaining_s=980.0)
    prev = {"running": ["n0"]}
    assert counts(AdlPolicy().optimize([running, newcomer], nodes, prev))["running"] == 1
    # ... but a much shorter job does take the GPU.
    short = job("newcomer", 1, remaining_s=100.0)
    assert counts(AdlPolicy().optimize([running, short], nodes, prev))["newcomer"] == 1


def test_previous_allocation_on_a_vanished_node_is_dropped():
    nodes = nodes_of(2)
    jobs = [job("a", max_replicas=2)]
    alloc = AdlPolicy().optimize(jobs, nodes, {"a": ["gone", "gone"]})
    assert validate_allocation(alloc, nodes) == []
    assert len(alloc["a"]) == 2


def test_non_preemptible_job_keeps_its_gpus():
    nodes = nodes_of(1, gpus=1)
    jobs = [
        job("pinned", 0, remaining_s=1e6, preemptible=False),
        job("urgent", 1, remaining_s=10.0),
    ]
    alloc = AdlPolicy().optimize(jobs, nodes, {"pinned": ["n0"]})
    assert counts(alloc) == {"pinned": 1, "urgent": 0}


# --------------------------------------------------------------------------- priority tiers


def test_a_higher_priority_job_takes_gpus_first_and_a_lower_tier_gets_what_is_left():
    # The short job is worth far more to the mean JCT and already runs on all four GPUs; in one
    # tier it keeps them. One tier up, the long job takes what it can use (at most 3) and the
    # short job keeps the rest.
    nodes, prev = nodes_of(1), {"short": ["n0"] * 4}
    short = job("short", 0, remaining_s=600.0, max_replicas=4)
    long = job("long", 1, remaining_s=1e6, max_replicas=3)
    assert counts(AdlPolicy().optimize([short, long], nodes, prev)) == {"short": 4, "long": 0}
    raised = replace(long, priority=10)
    assert counts(AdlPolicy().optimize([short, raised], nodes, prev)) == {"short": 1, "long": 3}
    lowered = replace(short, priority=-10)  # the same tiers, told the other way
    assert counts(AdlPolicy().optimize([lowered, long], nodes, prev)) == {"short": 1, "long": 3}


def test_a_lower_tier_job_that_may_not_be_preempted_keeps_its_gpus():
    nodes, prev = nodes_of(1), {"pinned": ["n0"] * 2}
    pinned = job("pinned", 0, remaining_s=1e6, max_replicas=2, preemptible=False)
    urgent = job("urgent", 1, remaining_s=3600.0, max_replicas=4, priority=5)
    assert counts(AdlPolicy().optimize([pinned, urgent], nodes, prev)) == {"pinned": 2, "urgent": 2}


@pytest.mark.parametrize(
    ("nodes", "old"),
    [
        ([NodeInfo("n0", 4)], ["gone"] * 2),  # its node left the cluster
        ([NodeInfo("n0", 2), NodeInfo("n1", 4)], ["n0"] * 4),  # its node shrank
    ],
)
def test_a_lower_tier_job_whose_old_placement_is_gone_does_not_compete_above(
    nodes: list[NodeInfo], old: list[str]
) -> None:
    hi = job("hi", 1, remaining_s=1e6, max_replicas=4, priority=5)
    lo = job("lo", 0, remaining_s=3600.0, max_replicas=4, preemptible=False)
    alloc = AdlPolicy().optimize([lo, hi], nodes, {"lo": old})
    assert len(alloc["hi"]) == 4
    assert validate_allocation(alloc, nodes) == []


def test_tiers_keep_the_placement_rules_across_tiers():
    # Random jobs in three tiers: every answer is valid (no node over-full, no node shared by two
    # distributed jobs), and no job of a lower tier holds GPUs while a higher-tier job that could
    # use more is below its cap and left waiting.
    nodes = nodes_of(6)
    for seed in range(6):
        jobs = [replace(j, priority=i % 3) for i, j in enumerate(random_jobs(seed, 18))]
        previous = AdlPolicy(seed=0).optimize(jobs[:10], nodes, {})
        alloc = AdlPolicy(seed=0).optimize(jobs, nodes, previous)
        assert validate_allocation(alloc, nodes) == []
        lowest_served = min((j.priority for j in jobs if alloc.get(j.name)), default=0)
        top = [j for j in jobs if j.priority == 2]
        if lowest_served < 2:
            # a lower tier got GPUs, so the top tier took all it would
            alone = AdlPolicy(seed=0).optimize(
                top, nodes, {j.name: previous.get(j.name, []) for j in top}
            )
            assert counts({j.name: alloc[j.name] for j in top}) == counts(alone)


# --------------------------------------------------------------------------- placement helper


def test_cluster_best_fit_and_release_roundtrip():
    cluster = Cluster(nodes_of(3))
    cluster.take("x", {0: 3})
    # best fit: a 1-replica job goes into the hole on node 0, not an empty node
    assert cluster.place(1) == {0: 1}
    spread = cluster.place(6)
    assert spread is not None and sum(spread.values()) == 6 and 0 not in spread
    cluster.take("y", spread)
    assert not cluster.fits({0: 1, 1: 1})  # node 1 belongs to distributed job y
    cluster.release("y", spread)
    cluster.release("x", {0: 3})
    assert cluster.free == [4, 4, 4] and cluster.owner == [None, None, None]


# --------------------------------------------------------------------------- growth and restarts


def test_growth_looks_past_a_dip_in_the_speedup_curve():
    """Slow on 2 nodes, fast on 4: one-GPU steps would stop at 4 GPUs; geometric steps do not."""

    def dip(n, k):
        k = np.asarray(k, dtype=float)
        return np.where(k <= 4, k, np.where(k <= 8, 3.0, 0.75 * k))

    nodes = nodes_of(4)
    jobs = [job("a", speedup=dip, max_profiled_replicas=8, max_replicas=16)]
    alloc = AdlPolicy().optimize(jobs, nodes, {"a": ["n0"] * 4})
    assert len(alloc["a"]) == 16


def test_running_job_grows_only_when_the_gain_pays_for_two_restarts():
    nodes = nodes_of(3)
    prev = {"big": ["n0"] * 4 + ["n1"] * 4 + ["n2"] * 3}  # 11 of 12 GPUs, one free
    big = job(
        "big",
        speedup=amdahl(0.0, 1.0),
        max_replicas=12,
        max_profiled_replicas=16,
        restarts=10,
        age_s=3600.0,
        remaining_s=1e6,
    )
    # Lifetime 3600 / (10 - 4 ramp restarts + 1) = 514 s: one restart costs 5.8 %, two 11.7 %;
    # the 12th GPU adds 9 %. (The 1, 2, 4, ... ramp and no hysteresis margin, so that only
    # the restart count decides; the margin has its own tests in test_policy_planning.)
    plain = {"ramp_factor": 2.0, "bootstrap_replicas": 1.0, "change_margin": 0.0}
    assert len(AdlPolicy(**plain).optimize([big], nodes, prev)["big"]) == 11
    grown = AdlPolicy(grow_restarts=1.0, **plain).optimize([big], nodes, prev)
    assert len(grown["big"]) == 12


def test_restart_penalty_counts_the_time_left_at_the_new_speed():
    policy = AdlPolicy()
    short = job("s", remaining_s=600.0, restart_cost_s=30.0)
    assert policy.restart_penalty(short, 1.0) == pytest.approx(30.0 / 600.0)
    assert policy.restart_penalty(short, 8.0) == pytest.approx(30.0 / 75.0)
    long = job("l", remaining_s=1e6, restart_cost_s=30.0)
    assert policy.restart_penalty(long, 8.0) == pytest.approx(30.0 / 1800.0)  # the horizon
    churned = job(
        "c", remaining_s=1e6, restart_cost_s=30.0, restarts=9, age_s=9000.0, max_profiled_replicas=1
    )
    assert policy.restart_penalty(churned, 8.0) == pytest.approx(30.0 / 900.0)


# --------------------------------------------------------------------------- local search


def _big_and_newcomer(newcomer_remaining_s: float) -> list[JobInfo]:
    # "big" ran on both nodes last round; its restart is expensive (300 s); the newcomer wants
    # one GPU, with a per-GPU gain above big's average but, when its remaining work is long, a
    # total gain below big's loss from restarting all eight GPUs to hand it one.
    return [
        job("big", 0, remaining_s=200_000.0, speedup=amdahl(0.0), restart_cost_s=300.0),
        job("new", 1, remaining_s=newcomer_remaining_s, max_replicas=1, speedup=amdahl(0.0)),
    ]


def test_local_search_keeps_a_big_job_whole_when_its_restart_costs_more():
    nodes, prev = nodes_of(2), {"big": ["n0"] * 4 + ["n1"] * 4}
    jobs = _big_and_newcomer(150_000.0)
    # the greedy alone hands the newcomer a GPU first and restarts big on seven
    greedy = AdlPolicy(local_search=0, dp=0).optimize(jobs, nodes, prev)
    assert counts(greedy) == {"big": 7, "new": 1}
    assert counts(AdlPolicy(dp=0).optimize(jobs, nodes, prev)) == {"big": 8, "new": 0}
    # bounded: with more active jobs than local_search_max_jobs, only the greedy runs
    capped = AdlPolicy(local_search_max_jobs=1, dp=0).optimize(jobs, nodes, prev)
    assert counts(capped) == {"big": 7, "new": 1}
    # the exact counts see the same: keeping big's placement is worth more than the newcomer
    assert counts(AdlPolicy(local_search=0).optimize(jobs, nodes, prev)) == {"big": 8, "new": 0}
    # ... and are bounded by the size of their table
    small = AdlPolicy(local_search=0, dp_max_cells=2).optimize(jobs, nodes, prev)
    assert counts(small) == {"big": 7, "new": 1}


def test_local_search_still_lets_an_urgent_newcomer_in():
    nodes, prev = nodes_of(2), {"big": ["n0"] * 4 + ["n1"] * 4}
    alloc = AdlPolicy().optimize(_big_and_newcomer(3_600.0), nodes, prev)
    assert counts(alloc) == {"big": 7, "new": 1}


# --------------------------------------------------------------------------- exact counts


def table_speedup(values: dict[int, float]):
    """A speedup given per replica count (one node; counts not listed are 0)."""

    def fn(n, k):
        k = np.asarray(k)
        return np.vectorize(lambda x: values.get(int(x), 0.0), otypes=[float])(k)

    return fn


def test_exact_counts_beat_the_greedy_on_a_knapsack() -> None:
    # One node of 4 GPUs. Per GPU, B on 2 GPUs (1.4) beats A on 3 (1.3), so the greedy gives B
    # two GPUs and A the other two (2.8 + 1.2 = 4.0); A on 3 and B on 1 is worth 3.9 + 1 = 4.9.
    jobs = [
        job("a", 0, speedup=table_speedup({1: 1.0, 2: 1.2, 3: 3.9}), max_replicas=3),
        job("b", 1, speedup=table_speedup({1: 1.0, 2: 2.8}), max_replicas=2),
    ]
    nodes = nodes_of(1)
    assert counts(AdlPolicy(seed=0, dp=0).optimize(jobs, nodes, {})) == {"a": 2, "b": 2}
    assert counts(AdlPolicy(seed=0).optimize(jobs, nodes, {})) == {"a": 3, "b": 1}


def test_exact_counts_cover_jobs_with_several_gpus_per_replica() -> None:
    # One node of 4 GPUs. A needs 2 GPUs per replica and is worth 3.9 on two replicas (all four
    # GPUs), 1.0 on one; B is worth 2.8 on two GPUs. Per GPU B comes first (1.4), so the greedy
    # gives B two GPUs and A the other two (2.8 + 1.0); A alone on all four is worth 3.9.
    jobs = [
        job("a", 0, speedup=table_speedup({1: 1.0, 2: 3.9}), max_replicas=2, gpus_per_replica=2),
        job("b", 1, speedup=table_speedup({1: 1.0, 2: 2.8}), max_replicas=2),
    ]
    nodes = nodes_of(1)
    assert counts(AdlPolicy(seed=0, dp=0).optimize(jobs, nodes, {})) == {"a": 1, "b": 2}
    alloc = AdlPolicy(seed=0).optimize(jobs, nodes, {})
    assert counts(alloc) == {"a": 2, "b": 0}
    assert validate_allocation(alloc, nodes, {"a": 2, "b": 1}) == []


def test_exact_counts_never_place_a_job_below_its_minimum() -> None:
    # Three nodes of 4 GPUs; a job that may not be preempted holds one GPU on each (and so owns
    # their network). Nine GPUs are free, so the knapsack counts A in at 4 replicas x 2 GPUs,
    # which cannot be placed: spread over nodes it would share them with another distributed
    # job. One replica would fit on one node, but A may not run below its minimum of four.
    held = job("held", 0, max_replicas=3, preemptible=False)
    a = job(
        "a",
        1,
        speedup=table_speedup({1: 1.0, 4: 9.0}),
        min_replicas=4,
        max_replicas=4,
        gpus_per_replica=2,
    )
    nodes = nodes_of(3)
    alloc = AdlPolicy(seed=0).optimize([held, a], nodes, {"held": ["n0", "n1", "n2"]})
    assert alloc["a"] == []
    assert counts(alloc) == {"held": 3, "a": 0}


def test_exact_counts_never_lower_the_objective_and_often_raise_it() -> None:
    nodes = nodes_of(6)
    gains = []
    for seed in range(8):
        jobs = random_jobs(seed, 24)
        previous = AdlPolicy(seed=0, dp=0).optimize(jobs[:16], nodes, {})
        greedy, exact = AdlPolicy(seed=0, dp=0), AdlPolicy(seed=0)
        values = []
        for policy in (greedy, exact):
            alloc = policy.optimize(jobs, nodes, previous)
            assert validate_allocation(alloc, nodes) == []
            values.append(policy.objective(jobs, nodes, previous, alloc))
        assert values[1] >= values[0] * (1 - 1e-12)
        gains.append(values[1] / values[0] - 1)
    assert max(gains) > 0.005  # the knapsack finds better counts on some of these clusters


def test_a_job_confined_to_a_node_pool_runs_only_there_and_others_use_the_rest():
    """``JobInfo.nodes`` (Kueue: the admitted flavor's nodes): the confined job gets only
    GPUs of its pool, however well it would scale elsewhere, and a job free to go anywhere
    still fills the nodes outside it."""
    nodes = nodes_of(4)
    pool = frozenset({"n2", "n3"})
    jobs = [
        job("confined", 0, speedup=amdahl(0.0, 0.99), max_replicas=16, nodes=pool),
        job("free", 1, speedup=amdahl(0.0, 0.99), max_replicas=16),
    ]
    alloc = AdlPolicy().optimize(jobs, nodes, {})
    assert set(alloc["confined"]) <= pool
    assert len(alloc["confined"]) >= 4
    assert validate_allocation(alloc, nodes) == []
    assert sum(counts(alloc).values()) == 16  # nothing left idle


def test_a_confined_job_placed_outside_its_pool_is_moved_into_it():
    """Its pool changed (evicted, admitted again on another flavor): last round's placement
    outside it is no placement to keep."""
    nodes = nodes_of(2)
    jobs = [job("j", max_replicas=4, nodes=frozenset({"n1"}))]
    alloc = AdlPolicy().optimize(jobs, nodes, {"j": ["n0"] * 4})
    assert alloc["j"] == ["n1"] * 4


def test_a_job_whose_pool_is_gone_gets_nothing():
    alloc = AdlPolicy().optimize([job("j", nodes=frozenset({"gone"}))], nodes_of(2), {})
    assert alloc.get("j", []) == []
