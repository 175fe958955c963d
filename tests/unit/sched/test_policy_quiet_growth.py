"""Issue 34's drain phase: GPUs that no one waits for do not stay idle behind the hysteresis.

With every job running and none arrived for hours, a running job's growth into free GPUs is
expected to last until the next arrival; ``quiet_growth`` prices its restart over that time
and shrinks the change margin in proportion."""

from policy_kit import counts, job, nodes_of

from adl.sched.policy import AdlPolicy
from adl.sched.types import JobInfo


def _long(name: str, order: int, age: float) -> JobInfo:
    """An imagenet-like job: a 250 s restart, a week of one-GPU work left."""
    return job(
        name,
        order,
        remaining_s=1_000_000.0,
        age_s=age,
        restart_cost_s=250.0,
        max_replicas=8,
        max_profiled_replicas=8,
    )


def _drain_round(policy: AdlPolicy, youngest_age: float) -> dict[str, int]:
    """12 GPUs: a long job on 6 (2 of its second node idle) and another job on a node of its
    own, which it cannot outgrow, submitted ``youngest_age`` seconds ago. Growing the long job
    6 -> 8 is worth 1.24x its speed: within the change margin."""
    other = job(
        "other",
        1,
        remaining_s=50_000.0,
        age_s=youngest_age,
        max_replicas=4,
        max_profiled_replicas=4,
    )
    prev = {"long": ["n0"] * 4 + ["n1"] * 2, "other": ["n2"] * 4}
    return counts(policy.optimize([_long("long", 0, 36_000.0), other], nodes_of(3), prev))


def test_by_default_idle_gpus_stay_idle_behind_the_margin() -> None:
    assert _drain_round(AdlPolicy(), youngest_age=20_000.0) == {"long": 6, "other": 4}


def test_in_a_quiet_round_the_long_job_grows_into_them() -> None:
    got = _drain_round(AdlPolicy(quiet_growth=True), youngest_age=20_000.0)
    assert got == {"long": 8, "other": 4}


def test_after_a_recent_arrival_the_round_is_not_quiet() -> None:
    # the other job arrived 10 minutes ago: the next arrival may come as soon, and take the
    # GPUs back, so growth pays as before (and does not)
    got = _drain_round(AdlPolicy(quiet_growth=True), youngest_age=600.0)
    assert got == {"long": 6, "other": 4}


def test_a_waiting_job_makes_the_round_not_quiet() -> None:
    waiting = job("waiting", 2, remaining_s=5_000.0, age_s=20_000.0, max_replicas=0)
    jobs = [
        _long("long", 0, 36_000.0),
        job("other", 1, age_s=20_000.0, max_replicas=4, max_profiled_replicas=4),
        waiting,
    ]
    prev = {"long": ["n0"] * 4 + ["n1"] * 2, "other": ["n2"] * 4}
    assert counts(AdlPolicy(quiet_growth=True).optimize(jobs, nodes_of(3), prev))["long"] == 6
