"""Estimating a job's speed on GPU types it never ran on from jobs of its kind
(``adl.sched.type_history.with_type_estimates``), as the operator's round and the simulator
both apply it."""

from __future__ import annotations

import pytest

from adl.sched.type_history import TypeSpeedHistory, with_type_estimates
from adl.sched.types import JobInfo

T4, A100 = "Tesla-T4", "NVIDIA-A100-SXM4-80GB"
TYPES = [T4, A100]


def test_an_unmeasured_type_is_filled_from_jobs_of_the_same_kind_and_named_estimated() -> None:
    history = TypeSpeedHistory()
    veteran = JobInfo("v", kind="bert", type_speed={T4: 1.0, A100: 3.0})
    newcomer = JobInfo("n", kind="bert", type_speed={T4: 1.0})
    stranger = JobInfo("s", kind="resnet", type_speed={T4: 1.0})
    out = with_type_estimates(history, [veteran, newcomer, stranger], TYPES)
    assert out[0] is veteran  # measured both: nothing to fill
    assert out[1].type_speed == {T4: 1.0, A100: pytest.approx(3.0)}
    assert out[1].estimated_types == (A100,)
    assert out[2] is stranger  # no job of its kind measured A100


def test_estimates_are_relative_to_the_type_the_job_runs_on() -> None:
    history = TypeSpeedHistory()
    veteran = JobInfo("v", kind="bert", type_speed={T4: 0.25, A100: 1.0})  # now on A100
    newcomer = JobInfo("n", kind="bert", type_speed={A100: 1.0})
    out = with_type_estimates(history, [veteran, newcomer], TYPES)
    assert out[1].type_speed[T4] == pytest.approx(0.25)


def test_a_uniform_cluster_and_ineligible_jobs_are_left_alone() -> None:
    history = TypeSpeedHistory()
    jobs = [
        JobInfo("v", kind="bert", type_speed={T4: 1.0, A100: 3.0}),
        JobInfo("n", kind="bert", type_speed={T4: 1.0}),
    ]
    assert with_type_estimates(history, jobs, ["", ""]) == jobs
    out = with_type_estimates(history, jobs, TYPES, eligible=lambda j: j.name != "n")
    assert out[1] is jobs[1]
