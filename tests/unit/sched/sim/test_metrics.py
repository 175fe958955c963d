"""The GPU-hour account of a replay: held by application plus idle is the makespan's."""

import pytest

from adl.sched.sim.metrics import gpu_hours
from adl.sched.sim.simulator import JobOutcome, SimResult


def test_held_plus_idle_is_the_makespan_times_the_gpus() -> None:
    jobs = [
        JobOutcome("a", "cifar10", submit_s=0, completion_s=3600, restarts=0, gpu_seconds=4 * 3600),
        JobOutcome("b", "imagenet", submit_s=1800, completion_s=7200, restarts=1, gpu_seconds=9e3),
        JobOutcome("c", "cifar10", submit_s=60, completion_s=600, restarts=0, gpu_seconds=540.0),
    ]
    got = gpu_hours(SimResult(jobs=jobs, total_gpus=8))
    assert got["makespan_s"] == 7200.0  # first submission to last completion
    assert got["held_by_app"] == {"cifar10": pytest.approx(4.15), "imagenet": pytest.approx(2.5)}
    assert got["held"] == pytest.approx(6.65)
    assert got["held"] + got["idle"] == pytest.approx(8 * 2.0)  # 8 GPUs for 2 hours
