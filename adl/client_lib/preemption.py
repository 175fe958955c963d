"""Preemption: stop every rank at the same step, checkpoint, exit 143.

A stop request reaches one rank: SIGTERM (Kubernetes, the local daemon, the launcher) or a stop
file for launchers that are not PID 1 (``ADL_STOP_FILE``, default ``$ADL_CHECKPOINT_DIR/../stop``;
only files written after this process started count, so a leftover file does not stop the next
run). At every step boundary each rank contributes its local flag to an asynchronous MAX
all-reduce on a dedicated CPU group and reads the result of the previous boundary's reduction:
all ranks see the same agreed value at the same step, without a blocking host sync per step.
If the checkpoint does not complete within the grace period, a watchdog exits 143 anyway and the
previous checkpoint stays in place.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, NoReturn

import torch
import torch.distributed as dist

from adl.contract import ENV_GRACE_PERIOD_S, ENV_STOP_FILE, EXIT_STOPPED

if TYPE_CHECKING:
    from adl.client_lib.context import JobContext, WorkerEnv

log = logging.getLogger(__name__)

EXIT_CODE = EXIT_STOPPED  # the public name of this module; the value is the contract's
DEFAULT_GRACE_S = 25.0  # under Kubernetes' default terminationGracePeriodSeconds of 30
_FILE_POLL_S = 1.0


class PreemptionMonitor:
    """Local stop detection plus the per-step agreement across ranks."""

    def __init__(
        self,
        group: Any | None = None,
        grace_s: float = DEFAULT_GRACE_S,
        stop_file: Path | None = None,
        file_poll_s: float = _FILE_POLL_S,
    ) -> None:
        self.group = group
        self.grace_s = grace_s
        self.stop_file = stop_file
        self.file_poll_s = file_poll_s
        self._started = time.time()
        self._requested = threading.Event()
        self._agreed = False
        self._buf: torch.Tensor | None = None
        self._work: Any | None = None
        self._next_file_check = 0.0
        self._previous_handler: Any = None
        self._installed = False
        self._watchdog: threading.Timer | None = None

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
        return cls(group=group, grace_s=grace, stop_file=stop_file)

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

    # ------------------------------------------------------------------ agreement

    def _resolve(self, timeout_s: float | None = None) -> None:
        if self._work is not None:
            if timeout_s is None:
                self._work.wait()
            else:
                self._work.wait(timeout=timedelta(seconds=timeout_s))
            assert self._buf is not None
            self._agreed = self._agreed or bool(self._buf.item())
            self._work = None

    def poll(self) -> bool:
        """Called by every rank at every step boundary; True when all must stop now."""
        local = self.local_stop_requested()
        if self.group is None:
            self._agreed = self._agreed or local
            return self._agreed
        self._resolve()
        if not self._agreed:
            self._buf = torch.tensor([1 if local else 0], dtype=torch.int32)
            self._work = dist.all_reduce(
                self._buf, op=dist.ReduceOp.MAX, group=self.group, async_op=True
            )
        return self._agreed

    def drain(self, timeout_s: float | None = None) -> None:
        """Finish the outstanding reduction (every rank has issued it, so it completes)."""
        try:
            self._resolve(timeout_s)
        except Exception:  # the group may already be gone at interpreter exit
            self._work = None

    @property
    def stop_requested(self) -> bool:
        return self._requested.is_set()


def stop_and_exit(ctx: JobContext) -> NoReturn:
    """Collective: checkpoint every registered state, then exit with 143 on every rank."""
    if ctx.preemption is not None:
        ctx.preemption.drain()
    ctx.save()
    log.warning("stopped for preemption after checkpointing; exiting %d", EXIT_CODE)
    sys.stdout.flush()
    sys.stderr.flush()
    if ctx.preemption is not None and ctx.preemption._watchdog is not None:
        ctx.preemption._watchdog.cancel()
    raise SystemExit(EXIT_CODE)


def check_preemption() -> None:
    """For custom training loops: call at every step boundary on every rank."""
    from adl.client_lib.context import get_context

    ctx = get_context()
    if ctx.preemption is not None and ctx.preemption.poll():
        stop_and_exit(ctx)
