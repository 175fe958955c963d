"""What a restart costs this job, measured, for the scheduler's restart penalty.

A resize stops the job's workers and starts new ones: the time between the old group stopping to
train and the new group training again is lost. It covers the checkpoint save, the processes
stopping, the new ones starting (interpreter, imports, rendezvous) and the restore, and it
differs by orders of magnitude between a small CPU job on one machine (seconds) and a large model
on a cluster (minutes). Without a measurement the scheduler assumes 30 s, which makes growing a
short job look worthless; so the library measures it and reports it with the hints:

- after a restore: from the moment the checkpoint's save began (a wall-clock time stored in the
  checkpoint) to this process's first training step;
- before the job has ever restarted: this process's own start-up (process start to first
  training step), plus the time its last checkpoint took to save, if it saved one: what a
  restart would cost, minus the wait for the old processes to exit.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

#: the checkpoint key holding the wall time at which its save began
SAVED_AT = "saved_at"


def process_start_time() -> float | None:
    """This process's start, in wall-clock seconds (Linux ``/proc``), or None elsewhere."""
    try:
        with open(f"/proc/{os.getpid()}/stat") as fh:
            # the command name (field 2) may hold spaces: fields are counted after its ")"
            fields = fh.read().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22: start time in clock ticks after boot
        with open("/proc/stat") as fh:
            boot = next(int(line.split()[1]) for line in fh if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


class RestartClock:
    """The moments a restart cost is measured between (wall clock: the two ends of a restart
    are in different processes)."""

    def __init__(
        self, started: float | None = None, clock: Callable[[], float] = time.time
    ) -> None:
        self._clock = clock
        self._started = started if started is not None else process_start_time()
        self._restored_from: float | None = None  # the restored checkpoint's save start
        self._first_step: float | None = None
        self._save_s: float | None = None
        self._saving: float | None = None

    def restored(self, saved_at: float | None) -> None:
        """A checkpoint whose save began at ``saved_at`` was restored into this process."""
        self._restored_from = saved_at

    def training(self) -> None:
        """A training step starts (only the first one counts)."""
        if self._first_step is None:
            self._first_step = self._clock()

    def saving(self) -> float:
        """A checkpoint save begins; returns the time to store in it."""
        self._saving = self._clock()
        return self._saving

    def saved(self) -> None:
        if self._saving is not None:
            self._save_s = self._clock() - self._saving
            self._saving = None

    def estimate_s(self) -> float | None:
        """Seconds a restart costs this job, or None before the first training step."""
        if self._first_step is None:
            return None
        if self._restored_from is not None and self._restored_from <= self._first_step:
            return self._first_step - self._restored_from
        if self._started is None or self._started > self._first_step:
            return None
        return self._first_step - self._started + (self._save_s or 0.0)
