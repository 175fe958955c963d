"""Preemption in one process: SIGTERM and stop file detection, checkpoint and exit 143."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from torch.utils.data import TensorDataset

import adl
from adl.client_lib import checkpoint
from adl.client_lib.context import JobContext
from adl.client_lib.preemption import (
    CHECKPOINT,
    EXIT_CODE,
    NONE,
    STOP,
    PreemptionMonitor,
    check_preemption,
    checkpoint_interval_from_env,
)
from tests.waiting import wait_for

MakeContext = Callable[..., JobContext]


def test_sigterm_requests_a_stop_and_the_handler_is_restored() -> None:
    before = signal.getsignal(signal.SIGTERM)
    monitor = PreemptionMonitor(grace_s=0)
    monitor.install()
    try:
        assert not monitor.poll()
        os.kill(os.getpid(), signal.SIGTERM)
        wait_for(lambda: monitor.stop_requested, 5, "the stop requested")
        assert monitor.poll()
    finally:
        monitor.uninstall()
    assert signal.getsignal(signal.SIGTERM) == before


def test_only_a_stop_file_written_after_the_start_counts(tmp_path: Path) -> None:
    stop = tmp_path / "stop"
    stop.write_text("")
    old = time.time() - 3600
    os.utime(stop, (old, old))  # left over from an earlier run
    monitor = PreemptionMonitor(grace_s=0, stop_file=stop, file_poll_s=0)
    assert not monitor.poll()
    stop.write_text("now")
    assert monitor.poll()


def test_the_watchdog_exits_143_when_the_clean_stop_hangs() -> None:
    code = (
        "import signal\n"
        "from adl.client_lib.preemption import PreemptionMonitor\n"
        "PreemptionMonitor(grace_s=0.5).request_stop()\n"
        "signal.pause()  # a clean stop that never comes: only the watchdog ends this\n"
    )
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], timeout=60, check=False)
    assert done.returncode == EXIT_CODE
    assert time.monotonic() - start < 50


def _loader(n: int = 30) -> adl.AdaptiveDataLoader:
    data = TensorDataset(torch.arange(n))
    return adl.AdaptiveDataLoader(data, batch_size=4, name="data")


def test_a_stop_file_makes_the_loader_checkpoint_and_exit_143(
    make_context: MakeContext, tmp_path: Path
) -> None:
    ctx = make_context(ADL_GRACE_PERIOD_S="0")
    assert ctx.preemption is not None
    ctx.preemption.file_poll_s = 0.0
    loader = _loader()
    metrics = adl.Accumulator("metrics")
    taken = 0
    with pytest.raises(SystemExit) as stopped:
        for batch in loader:
            taken += 1
            metrics["samples"] += len(batch[0])
            if taken == 3:
                (tmp_path / "stop").write_text("")
    assert stopped.value.code == EXIT_CODE
    assert taken == 3  # stopped at the next step boundary, not later
    states = checkpoint.load(tmp_path / "ckpt")
    assert states is not None
    assert states["data"]["offset"] == 12
    assert states["adl.accumulators"]["entries"]["before/metrics#0"]["total"] == {"samples": 12}


def test_check_preemption_for_custom_loops(make_context: MakeContext, tmp_path: Path) -> None:
    ctx = make_context(ADL_GRACE_PERIOD_S="0")
    check_preemption()  # nothing requested: returns
    assert ctx.preemption is not None
    ctx.preemption.request_stop()
    with pytest.raises(SystemExit) as stopped:
        check_preemption()
    assert stopped.value.code == EXIT_CODE
    assert (tmp_path / "ckpt" / checkpoint.FILENAME).exists()


def test_a_periodic_checkpoint_is_due_after_its_interval_then_again_after_the_next() -> None:
    now = [0.0]
    monitor = PreemptionMonitor(checkpoint_interval_s=10.0, clock=lambda: now[0])
    assert monitor.next_action() == NONE
    now[0] = 10.0
    assert monitor.next_action() == CHECKPOINT
    monitor.checkpointed(took_s=0.5)
    now[0] = 19.0
    assert monitor.next_action() == NONE
    now[0] = 20.0
    assert monitor.next_action() == CHECKPOINT
    monitor.request_stop()
    assert monitor.next_action() == STOP  # a stop wins over a due checkpoint
    monitor.uninstall()


def test_the_default_interval_keeps_saving_within_its_budget() -> None:
    """Unset: every 5 minutes, or 50 save durations apart when saving is slow (2%)."""
    monitor = PreemptionMonitor()
    assert monitor.checkpoint_interval() == 300.0
    monitor.checkpointed(took_s=12.0)
    assert monitor.checkpoint_interval() == pytest.approx(600.0)
    off = PreemptionMonitor(checkpoint_interval_s=0.0, clock=lambda: 1e9)
    assert off.next_action() == NONE


@pytest.mark.parametrize(
    ("raw", "want"), [(None, None), ("", None), ("0", 0.0), ("1", 1.0), ("3600", 3600.0)]
)
def test_the_interval_from_the_environment(raw: str | None, want: float | None) -> None:
    environ = {} if raw is None else {"ADL_CHECKPOINT_INTERVAL_S": raw}
    assert checkpoint_interval_from_env(environ) == want


@pytest.mark.parametrize("raw", ["0.5", "-1", "1e9", "nan", "inf", "soon"])
def test_a_bad_interval_is_refused_with_its_bounds(raw: str) -> None:
    with pytest.raises(ValueError, match="ADL_CHECKPOINT_INTERVAL_S must be"):
        checkpoint_interval_from_env({"ADL_CHECKPOINT_INTERVAL_S": raw})


@pytest.mark.parametrize("background", ["1", "0"])
def test_the_loader_takes_a_periodic_checkpoint_and_goes_on(
    make_context: MakeContext, tmp_path: Path, background: str
) -> None:
    """At the step boundary where it is due: the checkpoint holds every step before it, and the
    iteration continues (no exit); the hooks (the profile's pause) run after the save. Written
    in the background (the default) it holds the same: the loader's state at the save, not the
    later one."""
    ctx = make_context(ADL_CHECKPOINT_INTERVAL_S="1", ADL_CHECKPOINT_ASYNC=background)
    assert ctx.preemption is not None
    now = [0.0]
    ctx.preemption._clock = lambda: now[0]
    ctx.preemption.checkpointed(0.0)
    hooked: list[int] = []
    taken = 0
    ctx.checkpoint_hooks.append(lambda: hooked.append(taken))
    loader = _loader()
    for _batch in loader:
        taken += 1
        if taken == 3:
            now[0] = 1.0  # the interval has passed: the next boundary saves
    assert taken == 8 and hooked == [3]  # 30 samples in batches of 4: all 8, one save
    assert (ctx.checkpoint_writer is not None) == (background == "1")
    if ctx.checkpoint_writer is not None:
        ctx.checkpoint_writer.wait()  # what a restart reads is the committed file
    states = checkpoint.load(tmp_path / "ckpt")
    assert states is not None and states["data"]["offset"] == 12  # 3 batches of 4 consumed
