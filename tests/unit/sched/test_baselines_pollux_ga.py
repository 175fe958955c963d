"""Pollux's policy with its genetic search: the objective, the operators' constraints, the
restart factor, and a short replay (the full reproduction is the slow fidelity test)."""

from dataclasses import replace

import numpy as np
import pytest
from policy_kit import amdahl, counts, job, nodes_of, random_jobs
from sim_kit import TRACES, WORKLOADS

from adl.sched.baselines import PolluxPolicy, PolluxSettings
from adl.sched.baselines.pollux_ga import first_fit, restart_factor
from adl.sched.baselines.pollux_genetic import PolluxProblem, crossover, evolve, mutate, repair
from adl.sched.placement import validate_allocation
from adl.sched.sim.metrics import summarize
from adl.sched.sim.simulator import simulate
from adl.sched.sim.traces import load_traces
from adl.sched.sim.workload import load_workload
from adl.sched.types import NodeInfo

FAST = PolluxSettings(population=40, generations=40)
#: an hour old and never restarted: a move keeps 3600 / 3630 of a job's speedup (a job of
#: age 0 would keep nothing of any new allocation, so every choice would tie)
AGED = {"age_s": 3600.0}


def test_every_job_runs_before_any_job_gets_a_second_gpu() -> None:
    # p = -1: a job without GPUs drags the power mean to ~0, whatever the others' speedups
    jobs = [job("linear", 0, speedup=amdahl(0.0), **AGED)] + [
        job(f"flat{i}", i + 1, speedup=amdahl(0.9), **AGED) for i in range(3)
    ]
    got = counts(PolluxPolicy(settings=FAST).optimize(jobs, [NodeInfo("n0", 4)], {}))
    assert got == {"linear": 1, "flat0": 1, "flat1": 1, "flat2": 1}


def test_speedups_are_measured_against_each_jobs_fair_share() -> None:
    """Two jobs, 4 GPUs, fair share 2 each: relative to it, 3 + 1 costs the saturating job
    less than it gains the linear one (the p = -1 mean of 1.5 and 0.8 beats 1 and 1)."""
    jobs = [
        job("linear", 0, speedup=amdahl(0.0), **AGED),
        job("saturating", 1, speedup=amdahl(0.6), **AGED),
    ]
    got = PolluxPolicy(settings=FAST).optimize(jobs, [NodeInfo("n0", 4)], {})
    assert counts(got) == {"linear": 3, "saturating": 1}


def test_the_restart_factor_keeps_a_job_that_restarted_often_where_it_is() -> None:
    """Age 300 s, restarts of 30 s: one more leaves (300 - 30 S) / 330 of the new speedup, so
    a fresh job moves to 2 GPUs (2 x 0.91) and one with 9 restarts stays (2 x 0.09 < 1)."""
    churned = job("churned", 0, age_s=300.0, restarts=9, restart_cost_s=30.0)
    fresh = job("fresh", 0, age_s=300.0, restarts=0, restart_cost_s=30.0)
    assert restart_factor(churned) == pytest.approx(30 / 330)
    nodes = [NodeInfo("n0", 2)]
    stay = PolluxPolicy(settings=FAST).optimize([churned], nodes, {"churned": ["n0"]})
    grow = PolluxPolicy(settings=FAST).optimize([fresh], nodes, {"fresh": ["n0"]})
    assert counts(stay) == {"churned": 1}
    assert counts(grow) == {"fresh": 2}


def test_a_job_gets_at_most_twice_the_replicas_it_profiled() -> None:
    lone = job("lone", 0, speedup=amdahl(0.0), max_profiled_replicas=2, **AGED)
    got = PolluxPolicy(settings=FAST).optimize([lone], nodes_of(4), {})
    assert counts(got) == {"lone": 4}


def test_allocations_respect_capacity_caps_and_distributed_exclusivity() -> None:
    nodes = nodes_of(4)
    policy = PolluxPolicy(seed=3, settings=FAST)
    previous: dict[str, list[str]] = {}
    for seed in range(4):
        jobs = [replace(j, min_replicas=0) for j in random_jobs(seed, 9)]
        got = policy.optimize(jobs, nodes, previous)
        assert validate_allocation(got, nodes) == []  # capacity, one distributed job a node
        caps = {j.name: min(j.max_replicas, max(2 * j.max_profiled_replicas, 1)) for j in jobs}
        assert all(len(v) <= caps[k] for k, v in got.items())
        assert sum(map(len, got.values())) == 16  # nobody leaves a GPU idle here
        previous = got


def test_the_search_improves_on_its_start_and_its_operators_keep_the_constraints() -> None:
    rng = np.random.default_rng(0)
    jobs, nodes = 6, 3
    grids = np.zeros((jobs, nodes + 1, 13))
    k = np.arange(13)
    for j in range(jobs):
        serial = 0.05 * j
        grids[j, 1:, 1:] = (k[1:] / (1 + serial * (k[1:] - 1)))[None, :]
    problem = PolluxProblem(
        base=np.zeros((jobs, nodes), dtype=np.int64),
        per_node_max=np.full((jobs, nodes), 4),
        node_gpus=np.full(nodes, 4),
        gpus_per_replica=np.ones(jobs, dtype=np.int64),
        cap=np.array([12, 8, 4, 4, 2, 1]),
        min_replicas=np.zeros(jobs, dtype=np.int64),
        pinned=np.zeros(jobs, dtype=bool),
        grids=grids,
        fair_speedup=np.full(jobs, 2.0),
        restart_factor=np.full(jobs, 0.9),
        scale=0.25,
    )
    start = problem.base[None]
    pop, fit = evolve(start, problem, rng, population=30, generations=30)
    assert fit[0] > problem.fitness(start)[0] * 10  # from nobody running to everyone
    assert np.all(np.diff(fit) <= 0)  # sorted best first
    children = repair(mutate(crossover(pop[:15], pop[15:30], rng), problem, rng), problem, rng)
    for individual in np.concatenate([pop, children]):
        assert np.all(individual.sum(axis=0) <= 4)  # node capacity
        assert np.all(individual.sum(axis=1) <= problem.cap)
        distributed = np.count_nonzero(individual, axis=1) > 1
        assert np.all(((individual > 0) & distributed[:, None]).sum(axis=0) <= 1)


def test_the_same_seed_gives_the_same_allocations() -> None:
    jobs, nodes = random_jobs(5, 10), nodes_of(4)
    a = PolluxPolicy(seed=7, settings=FAST).optimize(jobs, nodes, {})
    b = PolluxPolicy(seed=7, settings=FAST).optimize(jobs, nodes, {})
    assert a == b


def test_first_fit_places_an_arrival_on_the_first_node_with_room() -> None:
    nodes = [NodeInfo("a", 4), NodeInfo("b", 4), NodeInfo("c", 4, preemptible=True)]
    new = job("new", 0, min_replicas=2)
    assert first_fit(new, nodes, {"a": 1, "b": 3, "c": 4}) == ["b", "b"]
    assert first_fit(new, nodes, {"a": 1, "b": 1, "c": 2}) == ["c", "c"]
    assert first_fit(new, nodes, {"a": 1, "b": 1, "c": 1}) == []
    # With first fit on, an arrival starts where first fit put it (node a, the first with
    # room), and staying there costs no restart; without it any free GPU is as good.
    old = job("old", 0, speedup=amdahl(0.9), max_replicas=1, **AGED)
    arrival = job("arrival", 1, speedup=amdahl(0.9), max_profiled_replicas=0, age_s=10.0)
    two = [NodeInfo("a", 2), NodeInfo("b", 2)]
    with_ff = PolluxPolicy(settings=replace(FAST, first_fit_arrivals=True))
    assert with_ff.optimize([old, arrival], two, {"old": ["a"]}) == {
        "old": ["a"],
        "arrival": ["a"],
    }
    without = PolluxPolicy(settings=FAST).optimize([old, arrival], two, {"old": ["a"]})
    assert without["old"] == ["a"] and len(without["arrival"]) == 1


def test_a_short_replay_finishes_every_job_and_respects_the_cluster() -> None:
    """CI smoke test: the first 12 jobs of workload-1, few generations."""
    jobs = load_workload(WORKLOADS / "workload-1.csv")[:12]
    policy = PolluxPolicy(settings=PolluxSettings(population=16, generations=4))
    result = simulate(jobs, policy, traces=load_traces(TRACES))
    summary = summarize(result)
    assert summary["finished"] == summary["jobs"] == 12
    assert max(sum(t.values()) for _, t in result.timeline) <= 64
    assert summary["avg_jct_s"] > 0
