"""How AdaptiveDataParallel hooks into the user's optimizer and LR scheduler.

The optimizer's ``step`` is wrapped (so ``optimizer.step()`` and a GradScaler's step both go
through the wrapper), each group's LR is multiplied by the scaling rule's factor for that step
only, and the scheduler is stepped once per scale-invariant step of progress, held at its end
when it has one.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import logging
import math
import types
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

log = logging.getLogger(__name__)


def patch_step(optimizer: torch.optim.Optimizer, on_step: Callable[..., Any]) -> None:
    """Route ``optimizer.step(*args, **kwargs)`` to ``on_step(original_step, *args, **kwargs)``."""
    original = optimizer.step

    def step(opt: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        opt._opt_called = True  # type: ignore[attr-defined]  # LR-scheduler order check
        return on_step(original, *args, **kwargs)

    if hasattr(original, "_wrapped_by_lr_sched"):
        step._wrapped_by_lr_sched = True  # type: ignore[attr-defined,unused-ignore]
    functools.update_wrapper(step, original, assigned=("__doc__",), updated=())
    optimizer.step = types.MethodType(step, optimizer)  # type: ignore[method-assign]


@contextlib.contextmanager
def scaled_lrs(optimizer: torch.optim.Optimizer, factors: Sequence[float]) -> Iterator[None]:
    """Each group's LR times its factor inside the block, restored after (even on error)."""
    groups = optimizer.param_groups
    saved = [group["lr"] for group in groups]
    for group, factor in zip(groups, factors, strict=True):
        group["lr"] = group["lr"] * factor
    try:
        yield
    finally:
        for group, lr in zip(groups, saved, strict=True):
            group["lr"] = lr


def schedule_over(scheduler: Any) -> bool:
    """Whether a scheduler with a fixed length has taken its last step: OneCycleLR's
    ``total_steps`` (stepping it again raises, and leaves it a step past its end) or
    CosineAnnealingLR's ``T_max`` (past it the cosine climbs back towards the initial LR).
    For SequentialLR (warm-up, then one of those), the part its next step would step."""
    last = getattr(scheduler, "last_epoch", None)
    if not isinstance(last, int):
        return False
    if isinstance(scheduler, torch.optim.lr_scheduler.SequentialLR):
        parts = scheduler._schedulers
        return schedule_over(parts[bisect.bisect_right(scheduler._milestones, last + 1)])
    if isinstance(scheduler, torch.optim.lr_scheduler.CosineAnnealingLR):
        return last >= scheduler.T_max
    total = getattr(scheduler, "total_steps", None)
    return isinstance(total, int) and last >= total


class SchedulerStepper:
    """Steps an LR scheduler once per scale-invariant step of progress."""

    def __init__(self, scheduler: Any | None) -> None:
        self.scheduler = scheduler
        self.ticks = 0  # scheduler steps taken (or held at the schedule's end)
        self._warned_over = False

    def catch_up(self, progress: float) -> None:
        """Step the scheduler up to ``floor(progress)`` steps in all."""
        if self.scheduler is None:
            return
        target = math.floor(progress)
        while self.ticks < target:
            self.ticks += 1
            if schedule_over(self.scheduler):
                self._warn_over()
                continue
            self.scheduler.step()

    def _warn_over(self) -> None:
        if self._warned_over:
            return
        self._warned_over = True
        log.warning(
            "the LR scheduler's last step is done (%d scale-invariant steps so far); keeping "
            "its final LR. Progress can pass epochs x dataset / B0 by a fraction of a step per "
            "epoch: an epoch's short last step counts for more than its share of samples",
            self.ticks,
        )
