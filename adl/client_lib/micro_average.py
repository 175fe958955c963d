"""Averaging accumulated gradients over the micro-steps as the step's last backward ends.

With a single replica there is no comm hook to average in; the wrapper passes the last
micro-step's model output through :class:`_EndOfStepBackward`, whose backward queues one fused
multiply for when the whole backward is done. Code between ``backward()`` and ``step()``
(gradient clipping, norm logging) then sees the batch's mean gradient, as it does on several
replicas.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

Tensor = torch.Tensor


class MicroAverager:
    """Divides the accumulated gradients by the micro-step count once per optimizer step."""

    def __init__(self, params: list[nn.Parameter], micro_steps: Callable[[], int]) -> None:
        self._params = params
        self._micro_steps = micro_steps
        # Whether this step's gradients were averaged as its last backward finished, or one
        # such averaging is queued.
        self.averaged = False
        self._queued = False

    def reset(self) -> None:
        """At the first micro-step of every optimizer step."""
        self.averaged = False
        self._queued = False

    def at_backward_end(self) -> None:
        """The backward of the step's last micro-step reached the model's output: average the
        gradients over the micro-steps as that backward finishes. One fused multiply per step."""
        if self._queued:
            return  # another output of the same backward
        if self.averaged:
            # another backward in the same micro-step (a second loss): back to the sum, and
            # average again once it has added its part
            self._scale(float(self._micro_steps()))
            self.averaged = False
        self._queued = True
        # Runs when the whole backward is done (DDP and FSDP finish their work the same way).
        torch.autograd.Variable._execution_engine.queue_callback(self._average_now)

    def _average_now(self) -> None:
        self._queued = False
        self._scale(1.0 / self._micro_steps())
        self.averaged = True

    def _scale(self, factor: float) -> None:
        grads = [p.grad for p in self._params if p.grad is not None]
        if grads:
            torch._foreach_mul_(grads, factor)


class _EndOfStepBackward(torch.autograd.Function):
    """Identity on a model output; its backward tells the averager that the step's last
    backward has reached the model."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, averager: MicroAverager) -> Tensor:
        ctx.averager = averager
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        ctx.averager.at_backward_end()
        return grad, None


def _map_grad_tensors(out: Any, fn: Callable[[Tensor], Tensor]) -> Any:
    """``out`` with ``fn`` applied to each tensor that needs a gradient (tensors, and tuples,
    lists and dicts of them)."""
    if isinstance(out, Tensor):
        return fn(out) if out.requires_grad else out
    if isinstance(out, tuple | list):
        return type(out)(_map_grad_tensors(o, fn) for o in out)
    if isinstance(out, dict):
        return type(out)((k, _map_grad_tensors(v, fn)) for k, v in out.items())
    return out


def on_backward_end(out: Any, averager: MicroAverager) -> Any:
    """``out`` with each tensor that needs a gradient passed through :class:`_EndOfStepBackward`."""
    return _map_grad_tensors(out, lambda t: _EndOfStepBackward.apply(t, averager))


class _ScaledBackward(torch.autograd.Function):
    """Identity on a model output whose backward multiplies the gradient by ``weight``."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: float) -> Tensor:
        ctx.weight = weight
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        return grad * ctx.weight, None


def weigh_backward(out: Any, weight: float) -> Any:
    """``out`` whose gradients (so the parameters' gradients of this micro-step, for a loss
    computed from it) are multiplied by ``weight``: a share's weight in its step."""
    return _map_grad_tensors(out, lambda t: _ScaledBackward.apply(t, weight))
