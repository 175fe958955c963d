"""Sia's configuration program on a homogeneous cluster: its configurations, optimality of the
HiGHS solution, lambda_n, the restart factor, bootstrapping and placement."""

import itertools
from dataclasses import replace

import numpy as np
import pytest
from policy_kit import amdahl, counts, job, nodes_of, random_jobs
from sim_kit import TRACES, WORKLOADS

from adl.sched.baselines import SiaPolicy, SiaSettings
from adl.sched.baselines.sia import configurations, restart_factor
from adl.sched.baselines.sia_placement import place
from adl.sched.placement import validate_allocation
from adl.sched.sim.metrics import summarize
from adl.sched.sim.simulator import simulate
from adl.sched.sim.traces import load_traces
from adl.sched.sim.workload import load_workload
from adl.sched.types import NodeInfo, linear_speedup


def test_configurations_are_partial_single_nodes_or_whole_nodes() -> None:
    assert configurations(4, 3) == [(1, 1), (1, 2), (1, 4), (2, 8), (3, 12)]
    assert configurations(8, 2) == [(1, 1), (1, 2), (1, 4), (1, 8), (2, 16)]


def test_costs_are_row_normalized_goodputs_raised_to_p() -> None:
    """amdahl(0.6) on 1, 2, 4 GPUs: 1, 1.25, 1.4286; to the power -0.5: 1, 0.894, 0.837;
    3 GPUs is no configuration and 8 exceeds the job's cap (twice 2 profiled)."""
    j = job("j", 0, speedup=amdahl(0.6), max_profiled_replicas=2, age_s=10.0)
    cost = SiaPolicy().costs(j, configurations(4, 2), current=None)
    assert cost[:3] == pytest.approx([1.0, 1.25**-0.5, (4 / 2.8) ** -0.5])
    assert np.isinf(cost[3])


def _brute_force(policy: SiaPolicy, jobs, nodes) -> float:
    configs = configurations(nodes[0].gpus, len(nodes))
    rows = [policy.costs(j, configs, None) for j in jobs]
    total, lam, best = sum(n.gpus for n in nodes), policy.settings.lambda_n, np.inf
    for choice in itertools.product(range(-1, len(configs)), repeat=len(jobs)):
        gpus = sum(configs[c][1] for c in choice if c >= 0)
        value = sum(rows[j][c] if c >= 0 else lam for j, c in enumerate(choice))
        if gpus <= total and np.isfinite(value):
            best = min(best, value)
    return best


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_program_is_solved_to_optimality(seed: int) -> None:
    jobs = [replace(j, min_replicas=0, age_s=5.0) for j in random_jobs(seed, 4)]
    nodes = nodes_of(2)
    policy = SiaPolicy()
    got = policy.optimize(jobs, nodes, {})
    assert validate_allocation(got, nodes) == []
    assert policy.last_objective == pytest.approx(_brute_force(policy, jobs, nodes), rel=1e-4)


def test_a_hand_checked_program() -> None:
    """Three jobs of amdahl(0.1) on one 4-GPU node: 1, 1.818, 3.077 at 1, 2, 4 GPUs, costs
    1, 0.742, 0.570. With lambda_n = 1.1, two jobs on 2 GPUs each (2 x 0.742 + 1.1 = 2.58)
    beat everyone running (0.742 + 1 + 1 = 2.74) and one job on 4 (0.570 + 2.2 = 2.77)."""
    jobs = [job(f"j{i}", i, speedup=amdahl(0.1), age_s=5.0) for i in range(3)]
    got = counts(SiaPolicy().optimize(jobs, [NodeInfo("n0", 4)], {}))
    assert sorted(got.values()) == [2, 2]


def test_lambda_n_keeps_jobs_running() -> None:
    jobs = [job(f"j{i}", i, speedup=amdahl(0.1), age_s=5.0) for i in range(3)]
    node = [NodeInfo("n0", 4)]
    strict = counts(SiaPolicy(settings=SiaSettings(lambda_n=3.0)).optimize(jobs, node, {}))
    loose = counts(SiaPolicy(settings=SiaSettings(lambda_n=0.8)).optimize(jobs, node, {}))
    idle = counts(SiaPolicy(settings=SiaSettings(lambda_n=0.5)).optimize(jobs, node, {}))
    assert sorted(strict.values()) == [1, 1, 2]  # everyone runs
    # 0.570 + 2 x 0.8 beats 2 x 0.742 + 0.8: one job on the whole node
    assert list(loose.values()) == [4]
    assert idle == {}  # below every configuration's cost (>= 0.570), waiting is cheapest


def test_the_restart_factor_keeps_a_job_that_restarted_often_where_it_is() -> None:
    """Doubling a linear job's GPUs: a fresh job (factor 300/330) moves, one that restarted 9
    times (factor 30/330: 2 x 0.09 < 1) stays; a job younger than one restart is not
    penalized at all. The factor uses the job's own restart cost."""
    churned = job("c", 0, speedup=amdahl(0.0), age_s=300.0, restarts=9, restart_cost_s=30.0)
    fresh = replace(churned, restarts=0)
    assert restart_factor(churned) == pytest.approx(30 / 330)
    assert restart_factor(replace(churned, age_s=20.0)) == 1.0
    assert restart_factor(replace(churned, restart_cost_s=250.0)) == 0.0
    node = [NodeInfo("n0", 2)]
    assert counts(SiaPolicy().optimize([churned], node, {"c": ["n0"]})) == {"c": 1}
    assert counts(SiaPolicy().optimize([fresh], node, {"c": ["n0"]})) == {"c": 2}


def test_a_job_without_a_model_bootstraps_on_one_gpu() -> None:
    new = job("new", 0, speedup=linear_speedup, max_profiled_replicas=8, age_s=5.0)
    assert counts(SiaPolicy().optimize([new], nodes_of(4), {})) == {"new": 1}


def test_unchanged_jobs_keep_their_nodes_and_the_cluster_is_respected() -> None:
    nodes = nodes_of(4)
    policy = SiaPolicy()
    previous: dict[str, list[str]] = {}
    for seed in range(4):
        jobs = [replace(j, min_replicas=0) for j in random_jobs(seed, 10)]
        got = policy.optimize(jobs, nodes, previous)
        assert validate_allocation(got, nodes) == []
        for name, held in got.items():
            if len(previous.get(name, [])) == len(held):
                assert sorted(previous[name]) == sorted(held)
        previous = got


def test_placement_reclaims_a_fragmented_node_when_it_must() -> None:
    """Four 1-GPU jobs kept on four nodes leave no empty node for a 2-node job: the kept
    jobs on the emptiest nodes move, everything fits, and the rest stay."""
    nodes = nodes_of(4)
    previous = {f"s{i}": [f"n{i}"] for i in range(4)}
    want = {**{f"s{i}": 1 for i in range(4)}, "big": 8}
    got = place(want, previous, nodes)
    assert validate_allocation(got, nodes) == []
    assert {k: len(v) for k, v in got.items()} == want
    assert sum(got[f"s{i}"] == previous[f"s{i}"] for i in range(4)) == 2


def test_a_short_replay_finishes_every_job() -> None:
    jobs = load_workload(WORKLOADS / "workload-3.csv")[:16]
    result = simulate(jobs, SiaPolicy(), traces=load_traces(TRACES))
    summary = summarize(result)
    assert summary["finished"] == summary["jobs"] == 16
    assert max(sum(t.values()) for _, t in result.timeline) <= 64


def test_a_job_without_gpus_is_started_whatever_its_restart_history() -> None:
    """The restart factor discounts moving away from the configuration a job holds; a job
    that holds none (waiting, or preempted after many restarts) has nothing to lose, so Sia
    does not discount it: a factor of 0 must not keep it waiting forever."""
    waiting = job("w", 0, speedup=amdahl(0.0), age_s=300.0, restarts=10, restart_cost_s=30.0)
    assert restart_factor(waiting) == 0.0
    assert counts(SiaPolicy().optimize([waiting], [NodeInfo("n0", 2)], {})) == {"w": 2}
