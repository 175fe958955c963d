"""How many replicas a sharded job needs to fit in memory (reported in the hints).

FSDP2 divides the *persistent* state over the K replicas: parameters, gradients and optimizer
state are sharded, so each replica holds ``state / K`` of them. What it does not divide is the
*working set*: while a module runs, its parameters are all-gathered whole, and the next module's
are being gathered ahead of it (prefetch), so about two of the largest modules are unsharded at
once. A replica therefore needs ``state / K + working`` bytes (plus activations, which depend on
the micro-batch and are left to the budget's headroom), and the fewest replicas that fit a
budget ``M`` is ``ceil(state / (M - working))``.

The budget is what the user declares or, on a GPU, the device's memory less a headroom for
activations and the allocator; on CPU without a declared budget the need is unknown (None).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule

#: optimizer state per parameter element, in units of the parameter's size, for optimizers that
#: have not stepped yet (their state is measured once it exists)
_STATE_PER_PARAM = {
    "Adam": 2.0,
    "AdamW": 2.0,
    "NAdam": 2.0,
    "RAdam": 2.0,
    "Adamax": 2.0,
    "Adagrad": 1.0,
    "Adadelta": 2.0,
    "Rprop": 2.0,
}
#: fraction of a GPU's memory the persistent state and the working set may take: the rest is
#: for activations, the allocator's fragmentation and the communication buffers
GPU_HEADROOM = 0.75


@dataclass(frozen=True)
class MemoryNeed:
    """Bytes of a sharded job: what is divided over replicas, and what is not."""

    state_bytes: int  # parameters + gradients + optimizer state, whole model
    working_bytes: int  # unsharded while running: about two of the largest modules' parameters

    def min_replicas(self, budget_bytes: int) -> int | None:
        """Fewest replicas whose share fits ``budget_bytes``; None when no count fits (the
        unsharded working set alone exceeds the budget)."""
        room = budget_bytes - self.working_bytes
        if room <= 0:
            return None
        return max(1, math.ceil(self.state_bytes / room))


def _bytes(t: torch.Tensor) -> int:
    return int(t.numel()) * t.element_size()  # a DTensor's numel is the global one


def optimizer_state_bytes(optimizer: torch.optim.Optimizer, param_bytes: int) -> int:
    """The optimizer's state as it is (after a step), else as its kind will make it."""
    measured = sum(
        _bytes(v)
        for state in optimizer.state.values()
        for v in state.values()
        if isinstance(v, torch.Tensor) and v.dim() > 0
    )
    if measured:
        return measured
    name = type(optimizer).__name__
    factor = _STATE_PER_PARAM.get(name)
    if factor is None:  # SGD and RMSprop keep a buffer per momentum; unknown kinds: like Adam
        momentum = float(optimizer.defaults.get("momentum", 0.0) or 0.0)
        factor = (1.0 if momentum else 0.0) if name in ("SGD", "RMSprop") else 2.0
        if name == "RMSprop":
            factor += 1.0  # the square average
    return int(factor * param_bytes)


def memory_need(model: nn.Module, optimizer: torch.optim.Optimizer) -> MemoryNeed:
    """The sharded job's persistent bytes and its unsharded working set."""
    params = [p for p in model.parameters()]
    param_bytes = sum(_bytes(p) for p in params)
    grad_bytes = sum(_bytes(p) for p in params if p.requires_grad)
    largest = 0
    for module in model.modules():
        if isinstance(module, FSDPModule):
            # what this module gathers: its parameters less those of nested sharded modules
            nested = {
                id(p)
                for sub in module.modules()
                if sub is not module and isinstance(sub, FSDPModule)
                for p in sub.parameters()
            }
            own = sum(_bytes(p) for p in module.parameters() if id(p) not in nested)
            largest = max(largest, own)
    state = param_bytes + grad_bytes + optimizer_state_bytes(optimizer, param_bytes)
    return MemoryNeed(state_bytes=state, working_bytes=2 * largest)


def device_budget(device: torch.device) -> int | None:
    """The memory a replica may use on ``device`` (None on CPU: declare it instead)."""
    if device.type != "cuda":
        return None
    total = torch.cuda.get_device_properties(device).total_memory
    return int(total * GPU_HEADROOM)
