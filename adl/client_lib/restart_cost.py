"""What a restart costs this job, measured, for the scheduler's restart penalty.

A resize stops the job's workers and starts new ones: the time between the old group stopping to
train and the new group training again is lost. It covers the checkpoint save, the processes
stopping, the new ones starting (interpreter, imports, rendezvous) and the restore, and it
differs by orders of magnitude between a small CPU job on one machine (seconds) and a large model
on a cluster (minutes). Without a measurement the scheduler assumes 30 s, which makes growing a
short job look worthless; so the library measures it and reports it with the hints:

- after a restore: from the moment the checkpoint's save began (a wall-clock time stored in the
  checkpoint) to this process's first training step. When the job held no GPUs for a while
  after that save (it was suspended, or stopped to wait for GPUs), that pause is no restart
  cost: the save's own duration (until its file was written) is counted, then the time from
  the moment the job was given GPUs again (``ADL_SCHEDULED_SINCE``, stamped by the
  controller) to the first step;
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
        self._restored_until: float | None = None  # ... and the end of that save
        self._scheduled_since: float | None = None  # the job holds GPUs since (no break)
        self._first_step: float | None = None
        self._save_s: float | None = None
        self._saving: float | None = None

    def restored(self, saved_at: float | None, saved_until: float | None = None) -> None:
        """A checkpoint whose save began at ``saved_at`` (and ended at ``saved_until``, when
        known) was restored into this process."""
        self._restored_from = saved_at
        self._restored_until = saved_until

    def scheduled(self, since: float | None) -> None:
        """The job has held GPUs without a break since ``since`` (wall clock; None: unknown)."""
        self._scheduled_since = since

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

    def save_took(self, seconds: float) -> None:
        """A save written in the background took ``seconds`` from its start to its commit (a
        stop's save, which the estimate counts, writes the same bytes)."""
        self._save_s = seconds
        self._saving = None

    def estimate_s(self) -> float | None:
        """Seconds a restart costs this job, or None before the first training step."""
        if self._first_step is None:
            return None
        if self._restored_from is not None and self._restored_from <= self._first_step:
            resumed = self._scheduled_since
            if resumed is None or resumed <= self._restored_from:
                return self._first_step - self._restored_from
            # Between the save and ``resumed`` the job held no GPUs (suspended, or queued):
            # count the save itself, then only what followed the new start.
            until = self._restored_until
            save_s = until - self._restored_from if until is not None else 0.0
            save_s = min(max(save_s, 0.0), resumed - self._restored_from)
            return save_s + max(self._first_step - resumed, 0.0)
        if self._started is None or self._started > self._first_step:
            return None
        return self._first_step - self._started + (self._save_s or 0.0)
