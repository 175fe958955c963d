"""Issue 34's tail protection: a bound on how long a job may stay behind an equal share.

Shortest-first weights leave a long job without GPUs for as long as shorter work keeps the
cluster busy; ``starve_bound_s`` gives a job that has been behind an equal share for longer
than the bound its first GPUs, up to that share, at a boosted weight."""

import pytest
from policy_kit import counts, job, nodes_of

from adl.sched.policy import AdlPolicy
from adl.sched.policy_starvation import boosted_weight, deficit_s
from adl.sched.types import JobInfo


def _busy_round(policy: AdlPolicy, long_age: float) -> dict[str, int]:
    """8 GPUs; a long job that has had nothing for ``long_age`` seconds beside three short
    jobs that could use every GPU."""
    long = job(
        "long",
        0,
        remaining_s=1_000_000.0,
        age_s=long_age,
        max_replicas=8,
        max_profiled_replicas=8,
    )
    shorts: list[JobInfo] = [
        job(
            f"s{i}", i + 1, remaining_s=3_000.0, age_s=60.0, max_replicas=8, max_profiled_replicas=8
        )
        for i in range(3)
    ]
    return counts(policy.optimize([long, *shorts], nodes_of(2), {}))


def test_the_default_policy_starves_a_long_job_behind_short_ones() -> None:
    assert _busy_round(AdlPolicy(), long_age=36_000.0).get("long", 0) == 0


def test_a_long_job_past_the_bound_gets_an_equal_share() -> None:
    got = _busy_round(AdlPolicy(starve_bound_s=1_800.0), long_age=36_000.0)
    assert got.get("long", 0) >= 2  # 8 GPUs over 4 jobs
    assert sum(got.values()) == 8  # the short jobs keep the rest


def test_within_the_bound_nothing_changes() -> None:
    policy = AdlPolicy(starve_bound_s=1_800.0)
    assert _busy_round(policy, long_age=1_200.0) == _busy_round(AdlPolicy(), long_age=1_200.0)


def test_a_job_that_had_its_share_is_not_behind() -> None:
    # 2 GPUs for all of its 3600 s at an equal share of 2: no deficit, no boost
    assert deficit_s(3_600.0, 2 * 3_600.0, 2) == 0.0
    assert deficit_s(3_600.0, 3_600.0, 2) == pytest.approx(1_800.0)
    with pytest.raises(ValueError, match="positive GPU count"):
        deficit_s(1.0, 0.0, 0)


def test_the_boost_grows_with_the_deficit_up_to_the_top_weight() -> None:
    assert boosted_weight(1.0, 1_800.0, 1_800.0, 50.0) == 1.0  # at the bound: none yet
    assert boosted_weight(1.0, 5_400.0, 1_800.0, 50.0) == pytest.approx(3.0)
    assert boosted_weight(1.0, 1e9, 1_800.0, 50.0) == 50.0  # never above the tier's top
    assert boosted_weight(2.0, 1e9, 1_800.0, 1.0) == 2.0  # never below its own
    assert boosted_weight(1.0, 1e9, 0.0, 50.0) == 1.0  # off
