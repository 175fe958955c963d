"""Preemption and periodic checkpoints: every rank acts at the same step.

Stop: checkpoint, exit 143.

A stop request reaches one rank: SIGTERM (Kubernetes, the local daemon, the launcher) or a stop
file for launchers that are not PID 1 (``ADL_STOP_FILE``, default ``$ADL_CHECKPOINT_DIR/../stop``;
only files written after this process started count, so a leftover file does not stop the next
run). At every step boundary each rank contributes its local flag to an asynchronous MAX
all-reduce on a dedicated CPU group and reads the result of the previous boundary's reduction:
all ranks see the same agreed value at the same step, without a blocking host sync per step.
If the checkpoint does not complete within the grace period, a watchdog exits 143 anyway and the
previous checkpoint stays in place.

Periodic checkpoints ride on the same reduction: a rank whose clock says a checkpoint is due
contributes CHECKPOINT (below STOP), and at the boundary where that value is agreed every rank
saves and goes on training. So a hard failure (kill -9, a lost node, an OOM kill) loses at most
the interval, not everything since the last resize. The interval is ``$ADL_CHECKPOINT_INTERVAL_S``
(0: none), else a budget: every 5 minutes, or less often when a save is slow, so that saving
takes at most 2% of the training time (50 save durations apart). Periodic saves are written in
the background (:mod:`adl.client_lib.checkpoint_async`; ``$ADL_CHECKPOINT_ASYNC=0`` turns that
off): the ranks pause only while rank 0 copies the states to host memory, and that pause is what
the budget counts. A stop's checkpoint is always written before the process exits.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

import torch
import torch.distributed as dist

from adl.client_lib.checkpoint_async import background_saves_from_env
from adl.client_lib.heartbeat import StepClock
from adl.contract import (
    ENV_CHECKPOINT_INTERVAL_S,
    ENV_GRACE_PERIOD_S,
    ENV_STOP_FILE,
    EXIT_STOPPED,
)

if TYPE_CHECKING:
    from adl.client_lib.context import JobContext, WorkerEnv

log = logging.getLogger(__name__)

EXIT_CODE = EXIT_STOPPED  # the public name of this module; the value is the contract's
DEFAULT_GRACE_S = 25.0  # under Kubernetes' default terminationGracePeriodSeconds of 30
_FILE_POLL_S = 1.0

#: what the ranks agree on at a step boundary (the highest any rank asks for wins)
NONE, CHECKPOINT, STOP = 0, 1, 2
#: the periodic checkpoints' default interval, and the share of training time saving may take
DEFAULT_CHECKPOINT_INTERVAL_S = 300.0
CHECKPOINT_BUDGET = 0.02
#: bounds of ``$ADL_CHECKPOINT_INTERVAL_S`` (0 turns periodic checkpoints off)
MIN_CHECKPOINT_INTERVAL_S, MAX_CHECKPOINT_INTERVAL_S = 1.0, 7 * 86400.0


def checkpoint_interval_from_env(environ: Mapping[str, str]) -> float | None:
    """``$ADL_CHECKPOINT_INTERVAL_S`` in seconds; None when unset (the default budget)."""
    raw = environ.get(ENV_CHECKPOINT_INTERVAL_S)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(
            f"{ENV_CHECKPOINT_INTERVAL_S} must be a number of seconds, got {raw!r}"
        ) from None
    if value != 0 and not MIN_CHECKPOINT_INTERVAL_S <= value <= MAX_CHECKPOINT_INTERVAL_S:
        raise ValueError(
            f"{ENV_CHECKPOINT_INTERVAL_S} must be 0 (off) or in [{MIN_CHECKPOINT_INTERVAL_S:.0f}, "
            f"{MAX_CHECKPOINT_INTERVAL_S:.0f}] seconds, got {raw}"
        )
    return value


class PreemptionMonitor:
    """Local stop detection plus the per-step agreement across ranks."""

    def __init__(
        self,
        group: Any | None = None,
        grace_s: float = DEFAULT_GRACE_S,
        stop_file: Path | None = None,
        file_poll_s: float = _FILE_POLL_S,
        checkpoint_interval_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        background_saves: bool = True,
    ) -> None:
        self.group = group
        self.grace_s = grace_s
        self.stop_file = stop_file
        self.file_poll_s = file_poll_s
        #: seconds between periodic checkpoints; None: the default budget; 0: none
        self.checkpoint_interval_s = checkpoint_interval_s
        #: periodic saves written on rank 0's writer thread (adl.client_lib.checkpoint_async)
        self.background_saves = background_saves
        self._clock = clock
        self._last_save = clock()  # this process's start counts as the last save
        self._save_s = 0.0  # how long the last periodic save took
        self._started = time.time()
        self._requested = threading.Event()
        self._agreed = False
        self._buf: torch.Tensor | None = None
        self._work: Any | None = None
        self._next_file_check = 0.0
        self._previous_handler: Any = None
        self._installed = False
        self._watchdog: threading.Timer | None = None
        #: this rank's step count and step time, for its heartbeat (hung-rank detection)
        self.progress = StepClock()

    @classmethod
    def from_env(
        cls, env: WorkerEnv, group: Any | None = None, environ: Mapping[str, str] | None = None
    ) -> PreemptionMonitor:
        e = os.environ if environ is None else environ
        raw = e.get(ENV_STOP_FILE)
        stop_file = Path(raw) if raw else None
        if stop_file is None and env.checkpoint_dir is not None:
            stop_file = env.checkpoint_dir.parent / "stop"
        grace = float(e.get(ENV_GRACE_PERIOD_S) or DEFAULT_GRACE_S)
        interval = checkpoint_interval_from_env(e)
        if env.checkpoint_dir is None:
            interval = 0.0  # nowhere to save
        return cls(
            group=group,
            grace_s=grace,
            stop_file=stop_file,
            checkpoint_interval_s=interval,
            background_saves=background_saves_from_env(e),
        )

    # ------------------------------------------------------------------ local detection

    def install(self) -> None:
        """Catch SIGTERM (only possible from the main thread; elsewhere rely on the stop file)."""
        if self._installed or threading.current_thread() is not threading.main_thread():
            return
        self._previous_handler = signal.signal(signal.SIGTERM, self._on_signal)
        self._installed = True

    def uninstall(self) -> None:
        if self._installed:
            signal.signal(signal.SIGTERM, self._previous_handler or signal.SIG_DFL)
            self._installed = False
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        self.drain()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        log.warning("SIGTERM received: stopping at the next step boundary")
        self.request_stop()

    def request_stop(self) -> None:
        """Ask this rank to stop; the watchdog bounds how long the clean stop may take."""
        if self._requested.is_set():
            return
        self._requested.set()
        if self.grace_s > 0 and self._watchdog is None:
            self._watchdog = threading.Timer(self.grace_s, self._grace_expired)
            self._watchdog.daemon = True
            self._watchdog.start()

    def _grace_expired(self) -> None:
        log.error("grace period of %.0fs expired before the checkpoint completed", self.grace_s)
        sys.stderr.flush()
        os._exit(EXIT_CODE)

    def _stop_file_present(self) -> bool:
        if self.stop_file is None:
            return False
        now = time.monotonic()
        if now < self._next_file_check:
            return False
        self._next_file_check = now + self.file_poll_s
        try:
            mtime = self.stop_file.stat().st_mtime
        except OSError:
            return False
        return mtime >= self._started - 1.0

    def local_stop_requested(self) -> bool:
        if not self._requested.is_set() and self._stop_file_present():
            log.warning("stop file %s found: stopping at the next step boundary", self.stop_file)
            self.request_stop()
        return self._requested.is_set()

    # ------------------------------------------------------------------ periodic checkpoints

    def checkpoint_interval(self) -> float:
        """Seconds between periodic checkpoints now (0: none)."""
        if self.checkpoint_interval_s is not None:
            return self.checkpoint_interval_s
        return max(DEFAULT_CHECKPOINT_INTERVAL_S, self._save_s / CHECKPOINT_BUDGET)

    def checkpoint_due(self) -> bool:
        interval = self.checkpoint_interval()
        return interval > 0 and self._clock() - self._last_save >= interval

    def checkpointed(self, took_s: float) -> None:
        """A checkpoint was just written (periodic or not); it took ``took_s`` seconds."""
        self._last_save = self._clock()
        self._save_s = max(took_s, 0.0)

    # ------------------------------------------------------------------ agreement

    def _resolve(self, timeout_s: float | None = None) -> int:
        """The value agreed at the previous boundary (NONE when none is outstanding)."""
        if self._work is None:
            return NONE
        if timeout_s is None:
            self._work.wait()
        else:
            self._work.wait(timeout=timedelta(seconds=timeout_s))
        assert self._buf is not None
        value = int(self._buf.item())
        self._agreed = self._agreed or value >= STOP
        self._work = None
        return value

    def next_action(self) -> int:
        """Called by every rank at every step boundary: STOP (all stop now), CHECKPOINT (all
        save now, then go on) or NONE; every rank gets the same answer at the same boundary."""
        self.progress.step()
        stop = self.local_stop_requested()
        if self.group is None:
            self._agreed = self._agreed or stop
            if self._agreed:
                return STOP
            return CHECKPOINT if self.checkpoint_due() else NONE
        agreed = self._resolve()
        action = STOP if self._agreed else (CHECKPOINT if agreed == CHECKPOINT else NONE)
        if not self._agreed:
            # a checkpoint taken now resets the clock: do not ask for another one meanwhile
            due = action != CHECKPOINT and self.checkpoint_due()
            local = STOP if stop else (CHECKPOINT if due else NONE)
            self._buf = torch.tensor([local], dtype=torch.int32)
            self._work = dist.all_reduce(
                self._buf, op=dist.ReduceOp.MAX, group=self.group, async_op=True
            )
        return action

    def poll(self) -> bool:
        """Whether all ranks must stop now (a periodic checkpoint agreed here is skipped: use
        :func:`act_at_step_boundary`, which takes it)."""
        return self.next_action() == STOP

    def drain(self, timeout_s: float | None = None) -> None:
        """Finish the outstanding reduction (every rank has issued it, so it completes)."""
        try:
            self._resolve(timeout_s)
        except Exception:  # the group may already be gone at interpreter exit
            self._work = None

    @property
    def stop_requested(self) -> bool:
        return self._requested.is_set()


def _saving(ctx: JobContext) -> contextlib.AbstractContextManager[None]:
    """The rank's heartbeat says it is saving (a save is no hang) while this lasts."""
    monitor = ctx.preemption
    return monitor.progress.save() if monitor is not None else contextlib.nullcontext()


def stop_and_exit(ctx: JobContext) -> NoReturn:
    """Collective: checkpoint every registered state, then exit with 143 on every rank."""
    if ctx.preemption is not None:
        ctx.preemption.drain()
    with _saving(ctx):
        ctx.save()
    log.warning("stopped for preemption after checkpointing; exiting %d", EXIT_CODE)
    sys.stdout.flush()
    sys.stderr.flush()
    if ctx.preemption is not None and ctx.preemption._watchdog is not None:
        ctx.preemption._watchdog.cancel()
    raise SystemExit(EXIT_CODE)


def periodic_checkpoint(ctx: JobContext) -> None:
    """Collective: checkpoint every registered state and go on training."""
    monitor = ctx.preemption
    start = time.monotonic()
    with _saving(ctx):
        # in the background, the training pauses only for the snapshot: that is what the
        # budget below counts (the write's duration goes to the restart-cost estimate)
        ctx.save(background=monitor is not None and monitor.background_saves)
    took = time.monotonic() - start
    if monitor is not None:
        monitor.checkpointed(took)
        interval = monitor.checkpoint_interval()
        if ctx.rank == 0:
            log.info("periodic checkpoint in %.2f s (next in %.0f s)", took, interval)
    for hook in ctx.checkpoint_hooks:  # e.g. the step-time profile skips the pause
        hook()


def act_at_step_boundary(ctx: JobContext) -> None:
    """Collective, at every step boundary on every rank: stop (checkpoint, exit 143) or take a
    periodic checkpoint when the ranks agreed to."""
    monitor = ctx.preemption
    if monitor is None:
        return
    action = monitor.next_action()
    if action == STOP:
        stop_and_exit(ctx)
    if action == CHECKPOINT:
        periodic_checkpoint(ctx)


def check_preemption() -> None:
    """For custom training loops: call at every step boundary on every rank (it stops the job,
    or takes a periodic checkpoint, when the ranks agree to)."""
    from adl.client_lib.context import get_context

    act_at_step_boundary(get_context())
