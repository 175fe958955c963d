"""Fidelity: the baselines reproduce the published average JCTs within 5%.

This is the check that our simulator implements the traces README's semantics (rounds, restart
delay, interpolation, epoch accounting) the way the published figures assume. Pollux's objective
(solved by adl's optimizer) checks the adaptive side too:
goodput, batch-size co-adaptation and the jobs' learned models, against the figure adl is
measured by.

These are whole replays of the published workloads (160 jobs each; the Pollux-objective ones take
about a minute apiece), so they live in ``tests/replays`` beside the unit suite rather than in it:
the one pytest run of the README and ``.ci/run`` collects them all the same."""

from __future__ import annotations

import pytest

from adl.sched.sim.metrics import summarize
from adl.sched.sim.policies import make_policy
from adl.sched.sim.published import PUBLISHED_AVG_JCT_S, published_avg_jct
from adl.sched.sim.simulator import simulate
from adl.sched.sim.traces import load_traces
from tests.unit.sched.sim_kit import TRACES, WORKLOADS


@pytest.mark.parametrize("workload", ["workload-1", "workload-2", "workload-3", "workload-4"])
@pytest.mark.parametrize(
    "policy",
    [
        "tiresias",
        "optimus",
        pytest.param("pollux-objective", marks=pytest.mark.slow),
        # ``pollux`` (the genetic search) takes minutes a replay: benchmarks/sched_replay.py
        # checks it against the published figures, CI runs its short smoke replay only
    ],
)
def test_baseline_matches_published_average_jct(policy: str, workload: str) -> None:
    result = simulate(
        WORKLOADS / f"{workload}.csv", make_policy(policy), traces=load_traces(TRACES)
    )
    summary = summarize(result)
    assert summary["finished"] == summary["jobs"] == 160
    published = published_avg_jct(workload, policy)
    assert published is not None
    assert summary["avg_jct_s"] == pytest.approx(published, rel=0.05)


def test_fifo_is_never_better_than_tiresias_on_the_published_workloads() -> None:
    # Sanity anchor for the third baseline: head-of-line blocking costs FIFO dearly.
    apps = load_traces(TRACES)
    for w in ("workload-1", "workload-2"):
        fifo = summarize(simulate(WORKLOADS / f"{w}.csv", make_policy("fifo"), traces=apps))
        assert fifo["avg_jct_s"] > PUBLISHED_AVG_JCT_S[w]["tiresias"]
        assert fifo["restarts_per_job"] == 0
