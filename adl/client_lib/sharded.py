"""AdaptiveShardedDataParallel: AdaptiveDataParallel for models sharded with FSDP2.

The user shards the model as FSDP2 asks (``fully_shard`` on each block, then on the root) and
hands it over in place of an unsharded one; everything else stays as with
:class:`~adl.client_lib.parallel.AdaptiveDataParallel`: the adaptive data loader, the LR scaling,
``optimizer.step()``, the metrics, ``adl.remaining_epochs_until``. What changes underneath:

- gradients are reduce-scattered by FSDP2 (not all-reduced by DDP); micro-steps before the
  last of an optimizer step keep their gradients unsharded and local
  (``set_requires_gradient_sync(False)``), as DDP's ``no_sync`` would;
- the noise statistics come from the sharded gradients (:mod:`adl.client_lib.sharded_stats`);
- checkpoints hold the model and optimizer as a DCP directory, resharded to the world size
  that resumes (:mod:`adl.client_lib.sharded_checkpoint`);
- the hints report the fewest replicas the job fits in (:mod:`adl.client_lib.sharded_memory`):
  declared (``min_replicas``) or derived from the state's bytes and a memory budget.

Mixed precision (``MixedPrecisionPolicy``) and activation checkpointing are FSDP2's and torch's
own and need nothing here. Not supported: HSDP (2-D meshes), GradScaler (FSDP2 has no sharded
scaler; bf16 needs none), a custom ``set_gradient_divide_factor``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule

from adl.client_lib.grad_stats import GradStats
from adl.client_lib.parallel import AdaptiveDataParallel
from adl.client_lib.sharded_checkpoint import ShardedCheckpointState
from adl.client_lib.sharded_memory import MemoryNeed, device_budget, memory_need
from adl.client_lib.sharded_stats import ShardedGradStats, local_tensor
from adl.sched.goodput import BatchBounds, GoodputFunction, GradParams

log = logging.getLogger(__name__)

#: bound on a declared memory budget (1 PiB): anything larger is a unit mistake
_MAX_BUDGET = 1 << 50


def job_mesh(device_type: str | None = None) -> DeviceMesh:
    """A 1-D device mesh over the job's replicas, for ``fully_shard(..., mesh=...)``.

    Call it after :func:`adl.init_process_group`. A job scaled down to one replica runs
    standalone, without a process group, but FSDP2 and DCP need one: a single-process group is
    made for it then, so the same script runs at every size.
    """
    cuda = torch.cuda.is_available() if device_type is None else device_type == "cuda"
    kind = device_type or ("cuda" if cuda else "cpu")
    if not dist.is_initialized():
        dist.init_process_group(
            "nccl" if cuda else "gloo", store=dist.HashStore(), rank=0, world_size=1
        )
    return init_device_mesh(kind, (dist.get_world_size(),))


class AdaptiveShardedDataParallel(AdaptiveDataParallel):
    """Elastic data parallelism over a model sharded with FSDP2's ``fully_shard``.

    ``min_replicas``: the fewest replicas the job fits in, when the user knows it. Otherwise it
    is derived from the parameter, gradient and optimizer-state bytes and ``memory_budget_bytes``
    (per replica; on a GPU the device's memory by default). Other arguments are those of
    :class:`AdaptiveDataParallel`.
    """

    _average_on_backward = False  # gradients are averaged at the step, on this rank's shards
    _declared_min: int | None
    _budget: int | None
    _need: MemoryNeed | None
    _synced: bool

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        lr_scheduler: Any | None = None,
        scaling_rule: Any | None = None,
        grad_scaler: Any | None = None,
        *,
        min_replicas: int | None = None,
        memory_budget_bytes: int | None = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(model, FSDPModule):
            raise TypeError(
                "AdaptiveShardedDataParallel needs a model sharded with "
                "torch.distributed.fsdp.fully_shard (at least on its root module)"
            )
        if grad_scaler is not None:
            raise ValueError("a GradScaler is not supported with FSDP2; train in bf16 instead")
        if min_replicas is not None and not 1 <= int(min_replicas) <= 4096:
            raise ValueError("min_replicas must be in [1, 4096]")
        if memory_budget_bytes is not None and not 0 < int(memory_budget_bytes) <= _MAX_BUDGET:
            raise ValueError("memory_budget_bytes must be in (0, 2**50]")
        # Set before the base class starts the reporter, whose thread may ask for the hints.
        self.__dict__["_declared_min"] = int(min_replicas) if min_replicas else None
        self.__dict__["_budget"] = int(memory_budget_bytes) if memory_budget_bytes else None
        self.__dict__["_need"] = None
        self.__dict__["_synced"] = True
        super().__init__(model, optimizer, lr_scheduler, scaling_rule, None, **kwargs)

    # ------------------------------------------------------------------ construction hooks

    def _make_stats(self, groups: list[int], stats_interval: int) -> GradStats:
        return ShardedGradStats(
            self._params, groups, self._groups, self.gns, self.world_size, stats_interval
        )

    def _wrap(self, model: nn.Module, ddp_kwargs: dict[str, Any]) -> nn.Module:
        if ddp_kwargs:
            raise TypeError(f"unexpected arguments for a sharded model: {sorted(ddp_kwargs)}")
        stats = self._stats
        assert isinstance(stats, ShardedGradStats)
        stats.install(model)
        return model

    def _register_checkpoint(self) -> None:
        register = getattr(self._ctx, "register", None) if self._ctx is not None else None
        if register is not None:
            register(ShardedCheckpointState(self, self._ctx))

    @contextlib.contextmanager
    def passthrough(self) -> Iterator[None]:
        """``optimizer.step()`` is the optimizer's own inside (DCP initializing its state)."""
        previous, self._passthrough = self._passthrough, True
        try:
            yield
        finally:
            self._passthrough = previous

    # ------------------------------------------------------------------ forward

    def _set_sync(self, sync: bool) -> None:
        if sync != self._synced:
            model = self.module
            assert isinstance(model, FSDPModule)
            model.set_requires_gradient_sync(sync)
            self._synced = sync

    def _forward_unsynced(self, *args: Any, **kwargs: Any) -> Any:
        self._set_sync(False)  # the backward accumulates unsharded gradients, locally
        return self.module(*args, **kwargs)

    def _forward_synced(self, *args: Any, **kwargs: Any) -> Any:
        self._set_sync(True)
        return self.module(*args, **kwargs)

    # ------------------------------------------------------------------ optimizer step

    def _finish_gradients(self, micro: int, m: float, batch: int) -> None:
        # The shards hold the replicas' mean, summed over the micro-steps: divide by their
        # count on this rank's shards only (1/N of the model, no communication).
        grads = [local_tensor(p.grad) for p in self._params if p.grad is not None]
        if micro > 1 and grads:
            torch._foreach_mul_(grads, 1.0 / micro)
        stats = self._stats
        assert isinstance(stats, ShardedGradStats)
        stats.finish_sharded(grads, micro, batch, self._inv_scale_sq)

    def _optimizer_step(self, original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        # The previous step's statistics were summed over the replicas while this step ran
        # forward and backward: fold them in before the LR factor is taken from the estimate.
        self.settle()
        return super()._optimizer_step(original, *args, **kwargs)

    def goodput_fn(self, bounds: BatchBounds) -> GoodputFunction | None:
        if threading.current_thread() is threading.main_thread():  # the data loader's choice
            self.settle()
        return super().goodput_fn(bounds)

    def grad_params(self, wait: bool = False) -> GradParams | None:
        if threading.current_thread() is threading.main_thread():
            self.settle()
        return super().grad_params(wait=wait)

    def settle(self) -> None:
        """Fold a step's statistics still being summed into the estimate."""
        stats = self._stats
        assert isinstance(stats, ShardedGradStats)
        stats.complete()

    # ------------------------------------------------------------------ hints

    def memory_need(self) -> MemoryNeed:
        """Bytes of the job's persistent state and unsharded working set (see
        :mod:`adl.client_lib.sharded_memory`); measured again until the optimizer has state."""
        need = self._need
        if need is None:
            need = memory_need(self._model, self.optimizer)
            if self.optimizer.state:  # final: the optimizer's state is measured, not guessed
                self.__dict__["_need"] = need
        return need

    def _min_replicas(self) -> int | None:
        if self._declared_min is not None:
            return self._declared_min
        budget = self._budget or device_budget(self._params[0].device)
        if budget is None:
            return None
        fits = self.memory_need().min_replicas(budget)
        if fits is None:
            log.warning(
                "the unsharded working set (%d bytes) exceeds the memory budget (%d bytes): no "
                "replica count fits; reporting none",
                self.memory_need().working_bytes,
                budget,
            )
        return fits
