"""Gradient-noise statistics on FSDP2-sharded gradients, with no extra all-gather.

The estimator (:mod:`adl.client_lib.gns`) needs, per parameter group, the squared norm of a
*local* gradient (one replica's, before averaging, over ``m`` samples) and of the *global* one
(after averaging, over the step's ``B`` samples). For each replica's local gradient ``g_r``,
``E|g_r|^2 = sqr + tr/m``; for their mean ``g``, ``E|g|^2 = sqr + tr/B``. Averaging the
replicas' local norms keeps the first equation (each term is unbiased), and solving the pair is
exactly the DDP estimator's; only where the two norms come from changes:

- **local**: FSDP2 reduce-scatters each sharded module's gradients from one flat buffer that
  holds this replica's whole, unsharded gradient of that module (padding is zeros). A custom
  reduce-scatter (FSDP2's ``set_custom_reduce_scatter``) takes that buffer's squared norm just
  before handing it to the collective: one dot per module, no copy, no communication. With
  gradient accumulation FSDP2 keeps the micro-steps' sum unsharded until the last micro-step,
  so the buffer holds ``K`` micro-gradients' sum: divided by ``K^2`` it is the norm of a mean
  over ``m = B / N`` samples, again one replica's local gradient (the loader's ``K`` micro-
  batches of this replica), so ``E|.|^2 = sqr + tr / (B/N)``.
- **global**: the reduce-scatter's output on each rank is one shard of the averaged gradient;
  the shards partition the vector (padding is zeros), so the squared norm of the whole averaged
  gradient is the sum over ranks of the shards' squared norms. With accumulation it is the
  shard of the micro-steps' sum, divided by ``K^2`` as above.

Both are taken inside the custom reduce-scatter, on its input and (as it lands, still in cache)
its output. The per-rank partial sums travel in one all-reduce of ``2 x groups`` floats,
started at the optimizer step and overlapped with the update and the next step's compute: two
dots per module (over the local gradient and over this rank's shard) and that small sum are
everything the statistics add; nothing is gathered. A lone replica (world size 1) pairs
consecutive steps, as without FSDP.

Not covered: HSDP (2-D meshes: the all-reduce over replicas of a shard would need the local
norm before it) and a custom ``set_gradient_divide_factor`` (the gradients then are not a mean).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter
from torch.distributed.tensor import DTensor

from adl.client_lib.gns import GradientNoiseEstimator, flat_sq_norm, grouped_sq_norms
from adl.client_lib.grad_stats import GradStats

Tensor = torch.Tensor

#: reduce dtypes FSDP2 reduces without a pre-division (no overflow risk), so the buffer the
#: custom reduce-scatter sees is the local gradient itself
_NO_PREDIVIDE = (torch.float32, torch.bfloat16)


def local_tensor(t: Tensor) -> Tensor:
    """This rank's part of a (possibly sharded) tensor."""
    return t.to_local() if isinstance(t, DTensor) else t


def _predivide_factor(group: dist.ProcessGroup, dtype: torch.dtype, device: torch.device) -> float:
    """What FSDP2 divided the buffer by before the reduce-scatter (fp16-like reduce dtypes)."""
    if dtype in _NO_PREDIVIDE:
        return 1.0
    from torch.distributed.fsdp._fully_shard._fsdp_collectives import (
        _get_gradient_divide_factors,
    )

    pre = _get_gradient_divide_factors(group, None, dtype, device.type)[0]
    return float(pre or 1.0)


class _ModuleLayout:
    """Where each optimizer group's gradients sit in one FSDP module's reduce-scatter buffer.

    The buffer is ``world`` rows (one per destination rank), each the concatenation of every
    parameter's padded shard, in FSDP's parameter order.
    """

    def __init__(self, module: FSDPModule, group_of: dict[int, int]) -> None:
        state = module._get_fsdp_state()
        param_group = state._fsdp_param_group
        if param_group is None:
            self.sizes: list[int] = []
            self.groups: list[int] = []
        else:
            # FSDP2 reduces the parameters that have gradients: frozen ones never do
            params = [fp for fp in param_group.fsdp_params if fp.sharded_param.requires_grad]
            self.sizes = [fp.padded_sharded_param_size.numel() for fp in params]
            # -1: a parameter the optimizer does not update (left out of the norms)
            self.groups = [group_of.get(id(fp.sharded_param), -1) for fp in params]
        distinct = set(self.groups)
        #: the one group every parameter of the module belongs to (the common case: one dot)
        self.single: int | None = (
            self.groups[0] if len(distinct) == 1 and -1 not in distinct else None
        )


class NormingReduceScatter(ReduceScatter):
    """FSDP2's reduce-scatter, taking the squared norm of the local gradient it is handed."""

    def __init__(self, stats: ShardedGradStats, layout: _ModuleLayout) -> None:
        self._stats = stats
        self._layout = layout

    def allocate(
        self, size: Sequence[int | torch.SymInt], *, dtype: torch.dtype, device: torch.device
    ) -> Tensor:
        return torch.empty(*size, dtype=dtype, device=device)

    def __call__(
        self,
        output_tensor: Tensor,
        input_tensor: Tensor,
        group: dist.ProcessGroup,
        op: Any,
        async_op: bool = False,
    ) -> dist.Work | None:
        stats = self._stats.measure
        if stats:
            self._stats.add_local(input_tensor, self._layout, group)
        work = dist.reduce_scatter_single(
            output=output_tensor, input=input_tensor, op=op, group=group, async_op=async_op
        )
        if stats and not async_op:  # (FSDP2 reduces synchronously: stream-ordered on a GPU)
            self._stats.add_global(output_tensor, self._layout, group, op)
        return work


class ShardedGradStats(GradStats):
    """The noise statistics of :class:`GradStats`, from FSDP2's sharded gradients."""

    def __init__(
        self,
        params: list[nn.Parameter],
        groups: list[int],
        num_groups: int,
        gns: GradientNoiseEstimator,
        world_size: int,
        stats_interval: int,
    ) -> None:
        super().__init__(params, groups, num_groups, gns, world_size, stats_interval)
        device = params[0].device
        # Sums over this step's FSDP modules, per group, of the squared norms of this replica's
        # local gradient and of its shard of the averaged one.
        self.local_sq = torch.zeros(num_groups, dtype=torch.float32, device=device)
        self.global_sq = torch.zeros(num_groups, dtype=torch.float32, device=device)
        self._local_seen = 0  # how many module buffers were measured this step
        # the step's summed norms, still being all-reduced: (work, buffer, batch)
        self._pending: tuple[Any, Tensor, int] | None = None

    def install(self, model: nn.Module) -> int:
        """Put the norming reduce-scatter on every FSDP module of ``model``; how many."""
        count = 0
        for module in model.modules():
            if isinstance(module, FSDPModule):
                layout = _ModuleLayout(module, self._group_of)
                if layout.sizes:
                    module.set_custom_reduce_scatter(NormingReduceScatter(self, layout))
                    count += 1
        return count

    # ------------------------------------------------------------------ per step

    def start_step(self, step: int) -> None:
        super().start_step(step)
        if self._local_seen:
            self.local_sq.zero_()
            self.global_sq.zero_()
            self._local_seen = 0

    def capture_first_micro(self) -> None:
        # With several replicas the accumulated gradient stays unsharded inside FSDP until the
        # last micro-step (p.grad is not it); the reduce-scatter buffer is measured instead.
        if self.world_size == 1:
            grads = [local_tensor(p.grad) for p in self._params if p.grad is not None]
            if grads:
                self.pending_local = grouped_sq_norms(grads, self._index_for(grads), self._groups)

    def add_local(self, buf: Tensor, layout: _ModuleLayout, group: dist.ProcessGroup) -> None:
        """Fold one module's reduce-scatter input (this replica's gradient) into the norms."""
        pre = _predivide_factor(group, buf.dtype, buf.device)
        self._fold(self.local_sq, buf.view(group.size(), -1), layout, pre**2)
        self._local_seen += 1

    def add_global(
        self, out: Tensor, layout: _ModuleLayout, group: dist.ProcessGroup, op: Any
    ) -> None:
        """Fold one module's reduce-scatter output (this rank's shard of the replicas' mean,
        or of their sum when FSDP2 divides afterwards) into the norms, while it is hot."""
        scale = 1.0
        if op == dist.ReduceOp.SUM:  # a sum of pre-divided gradients: the mean is its pre/N
            pre = _predivide_factor(group, out.dtype, out.device)
            scale = (pre / group.size()) ** 2
        self._fold(self.global_sq, out.view(1, -1), layout, scale)

    def _fold(self, into: Tensor, rows: Tensor, layout: _ModuleLayout, scale: float) -> None:
        """Add ``scale`` times the squared norms per group of a buffer laid out as ``rows``
        of padded shards."""
        if layout.single is not None:
            sq = flat_sq_norm(rows)
            into[layout.single : layout.single + 1].add_(sq if scale == 1.0 else sq * scale)
            return
        if sum(layout.sizes) != rows.shape[1]:
            # a parameter without a gradient this step (unused in forward) is not in the
            # buffer: its layout is unknown, so this step's observation is void on every rank
            into.fill_(math.nan)
            return
        cols = torch.split(rows, layout.sizes, dim=1)
        keep = [(c, g) for c, g in zip(cols, layout.groups, strict=True) if g >= 0]
        if keep:
            index = torch.tensor([g for _, g in keep], dtype=torch.long, device=rows.device)
            sq = grouped_sq_norms([c for c, _ in keep], index, self._groups)
            into.add_(sq if scale == 1.0 else sq * scale)

    # ------------------------------------------------------------------ at the optimizer step

    def finish_sharded(
        self,
        grads: list[Tensor],
        micro: int,
        batch: int,
        inv_scale_sq: Callable[[], Tensor | None],
    ) -> None:
        """Fold the step's norms into the estimate. ``grads``: this rank's shards of the final
        (averaged, unscaled) gradients of the optimizer's parameters, in its order."""
        if self.world_size == 1:
            # one replica: FSDP's shards are the whole gradients; the DDP-less path applies
            self.finish_step(
                grads, micro, float(batch // max(micro, 1)), batch, False, inv_scale_sq
            )
            return
        if not self.measure:
            return
        # Both were measured on the buffers of the last micro-step's reduce-scatter, which
        # hold the micro-steps' sum: divided by their count squared, the norms of means.
        both = torch.cat([self.local_sq, self.global_sq]).div_(float(micro * micro))
        inv = inv_scale_sq()
        if inv is not None:  # measured before a loss scaler unscaled the gradients
            both.mul_(inv.repeat(2) if inv.numel() > 1 else inv)
        if not self._local_seen:  # no buffer measured: void the observation on every rank
            both.fill_(math.nan)
        # One small sum, so that every rank holds the same estimate. It runs while the optimizer
        # updates and the next step computes (this step's LR factor was taken from the estimate
        # before it); the estimate takes it in at ``complete``, which the wrapper calls before
        # the next LR factor, the loader's batch-size choice or a checkpoint reads it.
        work = dist.all_reduce(both, async_op=True)
        self._pending = (work, both, batch)

    def complete(self) -> None:
        """Fold the last measured step's summed norms into the estimate (a no-op when none is
        pending). The same program point on every rank, so all ranks hold one estimate."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        work, both, batch = pending
        work.wait()
        g = self._groups
        local_sum, global_sq = both[:g], both[g:]
        m = batch / self.world_size  # samples behind one replica's local gradient
        if m < batch:
            self.gns.update(local_sum, m, global_sq, batch, local_scale=1.0 / self.world_size)
        self.gns.publish()
