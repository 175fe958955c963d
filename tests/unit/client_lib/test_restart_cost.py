"""What a restart costs, as the library measures it for the scheduler's restart penalty."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from adl.client_lib import checkpoint
from adl.client_lib.env import read_worker_env
from adl.client_lib.restart_cost import RestartClock, process_start_time
from adl.controller.actions import CreateGroup, SetStatus
from adl.controller.env import WorkerSite
from adl.controller.lifecycle import ObservedWorkers, ReplicaPhase, ReplicaState, step
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, Phase


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_after_a_restore_it_is_the_gap_from_the_save_to_the_first_step() -> None:
    clock = Clock(1000.0)
    rc = RestartClock(started=990.0, clock=clock)
    rc.restored(saved_at=985.5)  # the old group began its checkpoint then
    assert rc.estimate_s() is None  # nothing trained yet
    clock.t = 1004.0
    rc.training()
    clock.t = 1100.0
    rc.training()  # only the first step counts
    assert rc.estimate_s() == 1004.0 - 985.5


def test_before_any_restart_it_is_the_start_up_plus_the_last_save() -> None:
    clock = Clock(100.0)
    rc = RestartClock(started=95.0, clock=clock)
    rc.training()
    assert rc.estimate_s() == 5.0
    clock.t = 200.0
    rc.saving()
    clock.t = 202.5
    rc.saved()
    assert rc.estimate_s() == 5.0 + 2.5


def test_a_checkpoint_from_before_saved_at_was_stored_falls_back_to_start_up() -> None:
    clock = Clock(100.0)
    rc = RestartClock(started=97.0, clock=clock)
    rc.restored(None)
    rc.training()
    assert rc.estimate_s() == 3.0


def test_this_process_start_is_read_from_proc() -> None:
    started = process_start_time()
    assert started is not None and 0 <= time.time() - started < 24 * 3600
    assert os.getpid() > 0


def test_a_checkpoint_keeps_when_its_save_began(tmp_path: Path) -> None:
    checkpoint.write(tmp_path, {"a": {"x": 1}}, saved_at=1234.5)
    states, saved_at = checkpoint.load_timed(tmp_path)
    assert states == {"a": {"x": 1}} and saved_at == 1234.5
    checkpoint.write(tmp_path, {"a": {"x": 2}})
    assert checkpoint.load_timed(tmp_path) == ({"a": {"x": 2}}, None)
    assert checkpoint.load(tmp_path) == {"a": {"x": 2}}


def test_the_hints_carry_the_measured_restart_cost() -> None:
    import torch
    from torch import nn

    from adl.client_lib.env import init_process_group, shutdown
    from adl.client_lib.parallel import AdaptiveDataParallel

    ctx = init_process_group()  # standalone: this process is the whole job
    try:
        model = nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        adp = AdaptiveDataParallel(model, opt)
        before = adp.hints()
        assert before is None or before.restart_cost_s is None  # nothing trained yet
        x, y = torch.randn(8, 4), torch.randn(8, 1)
        nn.functional.mse_loss(adp(x), y).backward()
        opt.step()
        hints = adp.hints()
        assert hints is not None and hints.restart_cost_s is not None
        # this process's start-up so far: positive, and no longer than it has lived
        started = process_start_time()
        assert started is not None
        assert 0 < hints.restart_cost_s <= time.time() - started
        assert ctx.restart.estimate_s() == hints.restart_cost_s
    finally:
        shutdown()


T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
SITE = WorkerSite("127.0.0.1", 29500, "/ckpt")


class Job:
    """One job driven through the lifecycle as a backend would, on a fake clock (seconds after
    ``T0``); every group it starts is kept with the environment its rank 0 would get."""

    def __init__(self) -> None:
        self.spec = AdaptiveJobSpec(
            template={"spec": {"containers": [{"name": "t", "command": ["python", "t.py"]}]}}
        )
        self.status = AdaptiveJobStatus()
        self.groups: dict[int, CreateGroup] = {}

    def step(self, t: float, desired: list[str], *replicas: ReplicaState, **spec: Any) -> None:
        self.spec = self.spec.model_copy(update=spec)
        now = T0 + timedelta(seconds=t)
        for action in step("ns/j", self.spec, self.status, ObservedWorkers(replicas), desired, now):
            if isinstance(action, SetStatus):
                self.status = action.status
            elif isinstance(action, CreateGroup):
                self.groups[action.group] = action

    def measured(self, group: int, saved_at: float, saved_until: float, first_step: float) -> float:
        """restartCostS of rank 0 of ``group``, which restored the checkpoint saved from
        ``saved_at`` to ``saved_until`` and trained its first step at ``first_step``."""
        env = read_worker_env(self.groups[group].env(0, SITE))
        clock = Clock(T0.timestamp() + first_step)
        rc = RestartClock(started=clock.t - 1.0, clock=clock)
        rc.scheduled(env.scheduled_since)
        rc.restored(T0.timestamp() + saved_at, T0.timestamp() + saved_until)
        rc.training()
        cost = rc.estimate_s()
        assert cost is not None
        return cost


def test_a_job_suspended_for_a_minute_costs_what_a_resize_costs() -> None:
    """restartCostS of a job suspended for a minute stays within 20% of its resize cost: the
    time between the suspend's stop and the resume's start is no restart cost."""
    run, stopped = ReplicaPhase.RUNNING, ReplicaPhase.STOPPED

    def rank0(group: int, phase: ReplicaPhase) -> ReplicaState:
        return ReplicaState(group, 0, phase, exit_code=143 if phase == stopped else None)

    job = Job()
    job.step(0, ["n0"])
    job.step(1, ["n0"], rank0(1, run))
    assert job.status.phase == Phase.RUNNING
    # a resize at t=100: the group saves for 0.5 s and exits, the next starts at once and
    # trains its first step 18.5 s later
    job.step(100, ["n0", "n0"], rank0(1, run))
    job.step(101, ["n0", "n0"], rank0(1, stopped))
    resize = job.measured(2, saved_at=100.0, saved_until=100.5, first_step=119.5)
    assert resize == 19.5
    # suspended at t=200 (the same save), resumed a minute later, started as fast as before
    job.step(120, ["n0", "n0"], *[ReplicaState(2, r, run) for r in range(2)])
    job.step(200, ["n0", "n0"], *[ReplicaState(2, r, run) for r in range(2)], suspend=True)
    job.step(201, [], *[ReplicaState(2, r, stopped, exit_code=143) for r in range(2)])
    assert job.status.phase == Phase.SUSPENDED
    job.step(
        261,
        ["n0", "n0"],
        *[ReplicaState(2, r, stopped, exit_code=143) for r in range(2)],
        suspend=False,
    )
    assert 3 in job.groups
    resumed = job.measured(3, saved_at=200.0, saved_until=200.5, first_step=279.5)
    assert abs(resumed - resize) <= 0.2 * resize, (resumed, resize)
