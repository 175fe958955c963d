"""Remaining work of jobs that did not declare their length, predicted from completed jobs.

A job that does not declare its number of epochs still reports its progress. The driver (the
simulator, the operator's or local daemon's round) keeps a :class:`WorkHistory` of the total work
each completed job needed, by *kind* (its application, image or user label: whatever the
platform groups similar jobs by), and asks it for the expected remaining work of a running job
of the same kind given the work it has done:

``E[T - done | T > done]`` over the completed jobs of that kind whose total ``T`` exceeds what
the job has already done (the mean residual life of the empirical distribution). A job that
has run longer than every completed job of its kind, or a kind never seen complete, gets no
prediction; the policy then falls back to least-attained-service (see
:meth:`adl.sched.policy.AdlPolicy.priority`).

Work is counted in seconds on one GPU at the job's best batch size (what the policy's
``remaining_s`` means): the driver converts the job's reported progress with the job's own
single-GPU goodput. Everything here is pure: no clocks, no I/O; the driver owns the instance,
records completions and passes the predictions on in :attr:`JobInfo.expected_remaining_s`.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class HistoryConfig:
    """Bounds of what the history keeps and trusts."""

    #: completed jobs kept per kind (the most recent): old jobs say less about new ones, and
    #: memory must stay bounded however long the controller runs
    max_per_kind: int = 256
    #: kinds kept at most (least recently completed dropped first)
    max_kinds: int = 4096
    #: a prediction needs at least this many completed jobs above the job's done work
    min_samples: int = 1
    #: totals above this many seconds are not believed (a clock or unit error, not a job)
    max_total_s: float = 365 * 86400.0

    def __post_init__(self) -> None:
        if self.max_per_kind < 1 or self.max_kinds < 1 or self.min_samples < 1:
            raise ValueError("max_per_kind, max_kinds and min_samples must be at least 1")
        if not (math.isfinite(self.max_total_s) and self.max_total_s > 0):
            raise ValueError("max_total_s must be a positive number")


class WorkHistory:
    """Total work (seconds on one GPU) of completed jobs, by kind, the most recent kept."""

    def __init__(self, config: HistoryConfig | None = None) -> None:
        self.config = config or HistoryConfig()
        # per kind: recent totals in completion order, and the same values sorted
        self._recent: dict[str, deque[float]] = {}
        self._sorted: dict[str, list[float]] = {}

    def record(self, kind: str, total_s: float) -> bool:
        """Remember a completed job's total work; False (ignored) for a kindless job or a
        total that is not a finite positive number within bounds."""
        c = self.config
        if not kind or not math.isfinite(total_s) or not 0.0 < total_s <= c.max_total_s:
            return False
        recent = self._recent.pop(kind, None)
        if recent is None:
            recent = deque()
            if len(self._recent) >= c.max_kinds:  # drop the least recently completed kind
                oldest = next(iter(self._recent))
                del self._recent[oldest], self._sorted[oldest]
        self._recent[kind] = recent  # re-inserted: dicts keep the most recent kind last
        ordered = self._sorted.setdefault(kind, [])
        if len(recent) >= c.max_per_kind:
            old = recent.popleft()
            del ordered[bisect.bisect_left(ordered, old)]
        recent.append(total_s)
        bisect.insort(ordered, total_s)
        return True

    def totals(self, kind: str) -> tuple[float, ...]:
        """The totals kept for ``kind``, smallest first."""
        return tuple(self._sorted.get(kind, ()))

    def expected_remaining_s(self, kind: str, done_s: float) -> float | None:
        """``E[T - done | T > done]`` over completed jobs of ``kind``; None when fewer than
        ``min_samples`` of them needed more than ``done_s``."""
        found = self.predict(kind, done_s)
        return None if found is None else found[0]

    def predict(self, kind: str, done_s: float) -> tuple[float, int] | None:
        """``expected_remaining_s`` and how many completed jobs it averages (those of ``kind``
        that needed more than ``done_s``): the count is what a decision cites as its basis."""
        ordered = self._sorted.get(kind)
        if not ordered or not math.isfinite(done_s):
            return None
        done = max(done_s, 0.0)
        above = ordered[bisect.bisect_right(ordered, done) :]
        if len(above) < self.config.min_samples:
            return None
        return sum(above) / len(above) - done, len(above)
