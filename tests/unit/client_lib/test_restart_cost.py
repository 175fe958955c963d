"""What a restart costs, as the library measures it for the scheduler's restart penalty."""

from __future__ import annotations

import os
import time
from pathlib import Path

from adl.client_lib import checkpoint
from adl.client_lib.restart_cost import RestartClock, process_start_time


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
