"""Fewer allocation changes per job: hysteresis on running jobs' changes and how far a job may
jump past what it has profiled (the ramp)."""

from __future__ import annotations

import pytest
from policy_kit import amdahl, job, nodes_of

from adl.sched.policy import AdlPolicy

#: the policy before issue 22 (the former defaults): the 1, 2, 4, ... ramp and no hysteresis
OLD = {"ramp_factor": 2.0, "bootstrap_replicas": 1.0, "change_margin": 0.0}
#: issue 22's node-first variant, the defaults (see docs/results.md)
NODE_FIRST = {"ramp_factor": 4.0, "bootstrap_replicas": 4.0, "change_margin": 0.25}


def test_the_defaults_are_the_node_first_variant() -> None:
    knobs = AdlPolicy().knobs
    assert {name: getattr(knobs, name) for name in NODE_FIRST} == NODE_FIRST


def _big_running_job():
    # 11 of 12 GPUs; the 12th adds 9 % speedup, the restart costs 5.8 % of the new value
    # (lifetime 3600 / (10 - 4 ramp restarts + 1) = 514 s, one restart counted: grow_restarts=1)
    nodes = nodes_of(3)
    prev = {"big": ["n0"] * 4 + ["n1"] * 4 + ["n2"] * 3}
    big = job(
        "big",
        speedup=amdahl(0.0, 1.0),
        max_replicas=12,
        max_profiled_replicas=16,
        restarts=10,
        age_s=3600.0,
        remaining_s=1e6,
    )
    return big, nodes, prev


def test_change_margin_keeps_a_running_job_whose_gain_is_within_the_margin() -> None:
    big, nodes, prev = _big_running_job()
    ramp = {"ramp_factor": 2.0, "bootstrap_replicas": 1.0}  # 4 ramp restarts, as described
    assert len(AdlPolicy(grow_restarts=1.0, **OLD).optimize([big], nodes, prev)["big"]) == 12
    # 1.09 x (1 - 0.058) = 1.027: a 5 % margin leaves it where it is
    kept = AdlPolicy(grow_restarts=1.0, change_margin=0.05, **ramp).optimize([big], nodes, prev)
    assert sorted(kept["big"]) == sorted(prev["big"])
    # a 2 % margin is below the net gain: it still grows
    grown = AdlPolicy(grow_restarts=1.0, change_margin=0.02, **ramp).optimize([big], nodes, prev)
    assert len(grown["big"]) == 12


def test_change_margin_does_not_hold_back_a_first_start() -> None:
    queued = job("new", speedup=amdahl(0.0, 1.0), max_replicas=4, max_profiled_replicas=4)
    alloc = AdlPolicy(change_margin=0.5).optimize([queued], nodes_of(1), {})
    assert len(alloc["new"]) == 4


def test_change_margin_makes_a_newcomer_wait_rather_than_shrink_a_job_for_a_small_gain() -> None:
    # "run" holds the whole node; "new" is a little less urgent. Sharing the node 2/2 is worth
    # 13 % more than leaving run whole (sublinear speedups), a gain a 40 % margin on run's
    # restart swallows; new alone on 4 GPUs is worth less than run there.
    nodes = nodes_of(1)
    prev = {"run": ["n0"] * 4}
    run = job("run", 0, speedup=amdahl(0.1), remaining_s=4000.0, age_s=600.0)
    new = job("new", 1, speedup=amdahl(0.1), remaining_s=4400.0)
    plain = AdlPolicy(srpt_power=0.5, fairness=0, change_margin=0).optimize([run, new], nodes, prev)
    assert plain["new"]  # without a margin the newcomer gets GPUs from run
    held = AdlPolicy(srpt_power=0.5, fairness=0, change_margin=0.4).optimize(
        [run, new], nodes, prev
    )
    assert sorted(held["run"]) == ["n0"] * 4 and not held.get("new")


def test_bootstrap_replicas_sets_the_first_start_and_the_ramp_takes_over_after() -> None:
    nodes = nodes_of(4)
    fresh = job("fresh", speedup=amdahl(0.0), max_profiled_replicas=0, max_replicas=16)
    assert len(AdlPolicy(**OLD).optimize([fresh], nodes, {})["fresh"]) == 1  # the 1, 2, 4 ramp
    assert len(AdlPolicy().optimize([fresh], nodes, {})["fresh"]) == 4  # the defaults: a node
    seen = job("seen", speedup=amdahl(0.0), max_profiled_replicas=4, max_replicas=16)
    # once it has measured 4, the bootstrap no longer matters: ramp_factor x 4
    assert (
        len(AdlPolicy(bootstrap_replicas=16, ramp_factor=2).optimize([seen], nodes, {})["seen"])
        == 8
    )
    assert len(AdlPolicy().optimize([seen], nodes, {})["seen"]) == 16


def test_the_bootstrap_is_at_most_one_node_of_the_cluster() -> None:
    # On 1-GPU nodes a job that has measured nothing starts on one replica (its prior knows
    # nothing of cross-node sync); on 2-GPU nodes on two; its first report lifts the cap.
    policy = AdlPolicy(bootstrap_replicas=4, ramp_factor=4)
    fresh = job("fresh", speedup=amdahl(0.0), max_profiled_replicas=0, max_replicas=8)
    assert len(policy.optimize([fresh], nodes_of(4, gpus=1), {})["fresh"]) == 1
    assert len(policy.optimize([fresh], nodes_of(4, gpus=2), {})["fresh"]) == 2
    assert len(policy.optimize([fresh], nodes_of(4, gpus=8), {})["fresh"]) == 4  # the knob's
    two_gpus = job("two", speedup=amdahl(0.0), max_profiled_replicas=0, gpus_per_replica=2)
    assert len(policy.optimize([two_gpus], nodes_of(4, gpus=4), {})["two"]) == 2
    seen = job("seen", speedup=amdahl(0.0), max_profiled_replicas=1, max_replicas=8)
    assert len(policy.optimize([seen], nodes_of(4, gpus=1), {})["seen"]) == 4


def test_speedup_power_below_one_shares_with_the_less_urgent_job() -> None:
    # Linear speedups: shortest-first alone gives the urgent job the whole node; a power mean
    # over normalised speedups values the other job's first GPU more than its fourth.
    nodes = nodes_of(1)
    urgent = job("urgent", 0, speedup=amdahl(0.0), remaining_s=900.0)
    other = job("other", 1, speedup=amdahl(0.0), remaining_s=3600.0)
    plain = AdlPolicy(fairness=0).optimize([urgent, other], nodes, {})
    assert len(plain["urgent"]) == 4 and not plain.get("other")
    shared = AdlPolicy(fairness=0, speedup_power=0.5).optimize([urgent, other], nodes, {})
    assert len(shared["urgent"]) == 3 and len(shared["other"]) == 1


def test_churn_power_makes_a_job_that_keeps_moving_costlier_to_move_again() -> None:
    # 5 restarts beyond the ramp in 1800 s: its configurations lasted 300 s on average, a sixth
    # of the horizon. Linear: the 30 s restart costs 6 x 30 s; squared: 36 x 30 s.
    churner = job("c", restarts=5, age_s=1800.0, max_profiled_replicas=1, remaining_s=1e6)
    assert AdlPolicy(**OLD).restart_penalty(churner) == pytest.approx(180.0 / 1800.0)
    assert AdlPolicy(churn_power=2).restart_penalty(churner) == pytest.approx(1080.0 / 1800.0)
    calm = job("q", restarts=0, age_s=1800.0, max_profiled_replicas=1, remaining_s=1e6)
    # a job that has not churned pays its plain restart either way
    assert AdlPolicy(churn_power=2).restart_penalty(calm) == pytest.approx(30.0 / 1800.0)


def test_restarts_of_the_ramp_from_the_bootstrap_width_are_not_churn() -> None:
    # Profiled 16: from 1 GPU doubling that is 4 ramp restarts; from a 4-GPU bootstrap, 1 (4 x 4).
    ramped = job("r", restarts=4, age_s=1800.0, max_profiled_replicas=16, remaining_s=1e6)
    assert AdlPolicy(**OLD).restart_penalty(ramped) == pytest.approx(30.0 / 1800.0)
    quick = AdlPolicy(bootstrap_replicas=4, ramp_factor=4)
    # 3 of its 4 restarts were churn: configurations lasted 1800 / 4 s
    assert quick.restart_penalty(ramped) == pytest.approx(4 * 30.0 / 1800.0)
