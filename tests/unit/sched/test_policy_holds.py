"""Why the adl policy left a job at its size with GPUs free beside it (``explain_holds``)."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from adl.sched import registry
from adl.sched.decisions import HELD_MARGIN, HELD_NO_FASTER, HELD_RESTART
from adl.sched.policy import AdlPolicy
from adl.sched.types import JobInfo, NodeInfo

NODES = [NodeInfo("n0", 4)]


def power(p: float) -> Any:
    def fn(nodes: ArrayLike, replicas: ArrayLike) -> NDArray[np.float64]:
        del nodes
        return np.asarray(replicas, dtype=np.float64) ** p

    return fn


def job(speedup: Any, remaining_s: float, restart_cost_s: float) -> JobInfo:
    return JobInfo(
        "a",
        speedup=speedup,
        min_replicas=1,
        max_replicas=4,
        remaining_s=remaining_s,
        restart_cost_s=restart_cost_s,
        max_profiled_replicas=4,
        age_s=3600.0,
    )


def held(info: JobInfo) -> Any:
    policy = AdlPolicy()
    explainer = registry.holds_explainer(policy)
    assert explainer is not None  # the adl policy declares the capability
    previous = {"a": ["n0"]}
    answer = policy.optimize([info], NODES, previous)
    assert answer == previous  # it stays at 1 replica, 3 GPUs left free
    return explainer.explain_holds([info], NODES, previous, answer)["a"]


def test_a_short_remaining_does_not_repay_the_restart() -> None:
    hold = held(job(power(1.0), remaining_s=60.0, restart_cost_s=20.0))
    assert hold.cause == HELD_RESTART
    assert hold.message.startswith("not grown: the remaining 60 s do not repay a 20 s restart")


def test_a_small_gain_is_within_the_change_margin() -> None:
    hold = held(job(power(0.1), remaining_s=1e6, restart_cost_s=1.0))
    assert hold.cause == HELD_MARGIN
    assert "within the 25% change margin" in hold.message


def test_a_job_no_faster_on_more_gpus_says_so() -> None:
    hold = held(job(power(0.0), remaining_s=1e6, restart_cost_s=1.0))
    assert hold.cause == HELD_NO_FASTER
    assert "is no better than at 1 (1.00)" in hold.message


def test_nothing_to_explain_without_free_gpus_or_when_the_job_moved() -> None:
    policy, info = AdlPolicy(), job(power(1.0), remaining_s=80.0, restart_cost_s=20.0)
    assert policy.explain_holds([info], NODES, {"a": ["n0"]}, {"a": ["n0"] * 4}) == {}
    assert policy.explain_holds([info], NODES, {"a": ["n0"]}, {"a": ["n0"] * 2}) == {}
