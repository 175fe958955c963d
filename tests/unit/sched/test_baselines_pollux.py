"""Pollux's objective: equal treatment of job lengths, everyone running first, and the
re-allocation discount that keeps a job that restarted often where it is."""

from dataclasses import replace

from policy_kit import amdahl, counts, job, nodes_of, random_jobs

from adl.sched.baselines import PolluxObjectivePolicy
from adl.sched.placement import validate_allocation
from adl.sched.policy import AdlPolicy
from adl.sched.types import NodeInfo


def test_lengths_do_not_matter_to_pollux_but_do_to_adl() -> None:
    short, long = job("short", 0, remaining_s=600.0), job("long", 1, remaining_s=60_000.0)
    nodes = nodes_of(2)
    pollux = PolluxObjectivePolicy().optimize([short, long], nodes, {})
    assert counts(pollux) == {"short": 4, "long": 4}
    validate_allocation(pollux, nodes)
    adl = counts(AdlPolicy().optimize([short, long], nodes, {}))
    assert adl["short"] > adl["long"]


def test_every_job_runs_before_any_job_gets_a_second_gpu() -> None:
    # a job that scales perfectly would take the whole cluster under sum of speedups
    jobs = [job("linear", 0, speedup=amdahl(0.0))] + [
        job(f"flat{i}", i + 1, speedup=amdahl(0.9)) for i in range(3)
    ]
    got = counts(PolluxObjectivePolicy().optimize(jobs, [NodeInfo("n0", 4)], {}))
    assert got == {"linear": 1, "flat0": 1, "flat1": 1, "flat2": 1}


def test_a_job_that_restarted_often_for_its_age_is_not_moved() -> None:
    """Age 300 s, 9 restarts of 30 s: one more would leave it (300 - 270) / 330 of its speedup,
    so it keeps its GPU although a second one would nearly double its speed."""
    churned = job("churned", 0, age_s=300.0, restarts=9, restart_cost_s=30.0)
    fresh = job("fresh", 0, age_s=300.0, restarts=0, restart_cost_s=30.0)
    nodes = [NodeInfo("n0", 2)]
    assert counts(PolluxObjectivePolicy().optimize([churned], nodes, {"churned": ["n0"]})) == {
        "churned": 1
    }
    assert counts(PolluxObjectivePolicy().optimize([fresh], nodes, {"fresh": ["n0"]})) == {
        "fresh": 2
    }


def test_speedups_are_measured_against_each_jobs_fair_share() -> None:
    """Two jobs, 4 GPUs, fair share 2 each. Relative to it, 3 + 1 costs the saturating job
    less (1.25x from 2 GPUs to 1) than it gains the linear one; in raw speedups, 2 + 2 wins."""
    jobs = [job("linear", 0, speedup=amdahl(0.0)), job("saturating", 1, speedup=amdahl(0.6))]
    got = PolluxObjectivePolicy().optimize(jobs, [NodeInfo("n0", 4)], {})
    assert counts(got) == {"linear": 3, "saturating": 1}


def test_a_job_whose_next_restart_is_worth_nothing_still_runs() -> None:
    """10 restarts of 30 s at age 300 s: one more leaves nothing of its speedup, but when its
    old slots are gone, running somewhere still beats idle GPUs."""
    churned = job("churned", 0, age_s=300.0, restarts=10, restart_cost_s=30.0)
    nodes = [NodeInfo("n0", 2), NodeInfo("n1", 4)]
    got = PolluxObjectivePolicy().optimize([churned], nodes, {"churned": ["n0"] * 4})
    assert counts(got)["churned"] > 0


def test_remaining_work_is_not_used() -> None:
    declared = random_jobs(3, 12)
    hidden = [replace(j, remaining_s=None) for j in declared]
    nodes = nodes_of(4)
    got = PolluxObjectivePolicy().optimize(declared, nodes, {})
    validate_allocation(got, nodes)
    assert got == PolluxObjectivePolicy().optimize(hidden, nodes, {})
    assert sum(counts(got).values()) == 16
