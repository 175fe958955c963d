"""The efficiency floor (knob ``efficiency_floor``): GPU-time for efficient replica counts first.

A shortest-first policy gives a short job GPUs as long as its extra speedup, times its large
weight, beats what a longer job would make of them, so short jobs run wide and at a low
speedup per GPU. On a busy cluster every GPU-hour spent so is a GPU-hour the work queued behind
waits for: the makespan of a saturated cluster is its GPU-hours held plus idle, over its GPUs
(docs/results.md, "Where the makespan goes"). The floor caps each job, softly, at the most
replicas whose speedup per replica is at least ``floor``: beyond them its extra speedup counts
for a hundredth, so those GPUs go to it only when no other job can use them.

Measured against the defaults on the published and generated workloads it lowers the GPU-hours
held and the worst makespan ratio, and lengthens the mean JCT; it is opt-in.

Pure functions over numbers; the policy applies them in :mod:`adl.sched.policy_floors`
(``apply_efficiency_cap``) and ``_value`` (:mod:`adl.sched.policy_moves`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

#: a speedup, or an array of them
Speedups = float | NDArray[np.float64]

#: what a speedup above the efficient count is worth, per unit
EXCESS_WORTH = 0.01


def efficient_count(speedup_at: Callable[[int], float], cap: int, floor: float) -> int:
    """The most replicas in ``1..cap`` at which ``speedup_at(k) >= floor * k`` (at least 1).
    Scans down from ``cap``: a speedup curve may dip and recover at node boundaries, so the
    first count from the top that meets the floor is the answer, not the last from the bottom."""
    if not 0.0 < floor < 1.0:
        raise ValueError(f"efficiency floor must be in (0, 1), got {floor}")
    for count in range(max(cap, 1), 1, -1):
        if speedup_at(count) >= floor * count:
            return count
    return 1


def beyond_efficient(speedup: Speedups, at_efficient: float) -> Speedups:
    """The speedup a count above the efficient one is worth: the efficient count's, plus a
    hundredth of the rest (of each, for an array of speedups)."""
    return at_efficient + EXCESS_WORTH * np.maximum(speedup - at_efficient, 0.0)
