"""Learning-rate scaling rules for a batch ``S`` times the user's initial batch B0.

Each rule turns (scale, gradient statistics of a parameter group, progress) into the factor the
group's learning rate is multiplied by for one step. Progress is always counted in
scale-invariant steps, the sum of the AdaScale gain, so a schedule written for B0 runs the same
course at any batch size.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from adl.sched.goodput import GradParams


def adascale_gain(scale: float, grad: GradParams | None) -> float:
    """Steps at B0 that one step at ``scale * B0`` is worth; 1 without statistics.

    The scalar form of :func:`adl.sched.goodput.gain` (same formula, checked against it by the
    tests): it runs every optimizer step, where numpy's per-call cost would show.
    """
    if grad is None or scale <= 0:
        return 1.0
    var, sqr = max(grad.var, 0.0), max(grad.sqr, 0.0)
    if var + sqr <= 0.0:
        return 1.0
    return (var + sqr) / (var / scale + sqr)


@dataclass
class Progress:
    """How far training has come, independent of the batch sizes used to get there."""

    steps: int = 0  # optimizer steps taken
    samples: float = 0.0  # samples consumed
    progress: float = 0.0  # scale-invariant steps (sum of gain)

    def advance(self, gain: float, batch_size: float) -> None:
        self.steps += 1
        self.samples += batch_size
        self.progress += gain

    def state_dict(self) -> dict[str, Any]:
        return {"steps": self.steps, "samples": self.samples, "progress": self.progress}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.steps = int(state["steps"])
        self.samples = float(state["samples"])
        self.progress = float(state["progress"])


class ScalingRule(ABC):
    """Maps a batch scale to learning-rate factors per parameter group."""

    name: str = "rule"

    @abstractmethod
    def factor(self, scale: float, grad: GradParams | None, progress: Progress) -> float:
        """LR multiplier for one group at ``scale = B / B0``."""

    def factors(
        self, scale: float, grads: Sequence[GradParams | None], progress: Progress
    ) -> list[float]:
        return [self.factor(scale, g, progress) for g in grads]


class AdaScale(ScalingRule):
    """LR x gain(S): optimal for SGD-like optimizers (Johnson et al., 2020)."""

    name = "adascale"

    def factor(self, scale: float, grad: GradParams | None, progress: Progress) -> float:
        return adascale_gain(scale, grad)


class AdamScale(ScalingRule):
    """LR x sqrt(gain(S)): Adam normalizes the update, so only the noise reduction matters."""

    name = "adamscale"

    def factor(self, scale: float, grad: GradParams | None, progress: Progress) -> float:
        return math.sqrt(adascale_gain(scale, grad))


class LinearScale(ScalingRule):
    """LR x S (Goyal et al.)."""

    name = "linear"

    def factor(self, scale: float, grad: GradParams | None, progress: Progress) -> float:
        return scale


class SqrtScale(ScalingRule):
    """LR x sqrt(S) (Krizhevsky)."""

    name = "sqrt"

    def factor(self, scale: float, grad: GradParams | None, progress: Progress) -> float:
        return math.sqrt(scale)


class LEGW(ScalingRule):
    """Linear-epoch gradual warm-up: LR x sqrt(S), warm-up length in samples x S (You et al.).

    ``warmup_samples`` is the warm-up length at B0; at scale S the factor ramps linearly from 0 to
    sqrt(S) over ``S * warmup_samples`` samples.
    """

    name = "legw"

    def __init__(self, warmup_samples: float) -> None:
        if warmup_samples < 0:
            raise ValueError("warmup_samples must be >= 0")
        self.warmup_samples = float(warmup_samples)

    def factor(self, scale: float, grad: GradParams | None, progress: Progress) -> float:
        peak = math.sqrt(scale)
        if self.warmup_samples == 0:
            return peak
        ramp = min(1.0, (progress.samples + 1.0) / (scale * self.warmup_samples))
        return peak * ramp


_ADAM_LIKE = tuple(
    cls
    for cls in (
        getattr(torch.optim, n, None)
        for n in ("Adam", "AdamW", "Adamax", "NAdam", "RAdam", "Adagrad", "Adadelta", "RMSprop")
    )
    if isinstance(cls, type)
)


def default_rule(optimizer: torch.optim.Optimizer) -> ScalingRule:
    """AdamScale for adaptive optimizers (Adam family), AdaScale for everything else."""
    return AdamScale() if isinstance(optimizer, _ADAM_LIKE) else AdaScale()


_BY_NAME: dict[str, type[ScalingRule]] = {
    r.name: r for r in (AdaScale, AdamScale, LinearScale, SqrtScale)
}


def rule_from_name(name: str) -> ScalingRule:
    """Rules selectable by name (LEGW needs a warm-up length, so it is built directly)."""
    try:
        return _BY_NAME[name.lower()]()
    except KeyError:
        raise ValueError(f"unknown scaling rule {name!r}; choose from {sorted(_BY_NAME)}") from None


def predicted_lr_scale(adp: Any, batch_size: int) -> float:
    """The LR factor AdaptiveDataParallel ``adp`` would apply to its first parameter group at
    ``batch_size`` with its statistics now (for the data loader's log line; no host sync)."""
    b0 = adp.init_batch_size
    stats = adp.gns.group_grad_params(b0)
    groups: list[GradParams | None] = (
        list(stats) if stats else [None] * len(adp.optimizer.param_groups)
    )
    return float(adp.scaling_rule.factors(batch_size / b0, groups, adp.progress)[0])
