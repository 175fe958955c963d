"""The gradient norms behind the noise estimate, taken around DDP's all-reduce.

The estimate needs, per parameter group, the squared norm of a *local* gradient (one replica's
micro-gradient, before averaging) and of the *global* one (after averaging). With several
replicas a DDP comm hook sees each bucket before its all-reduce (the local norm) and the
averaged bucket as the all-reduce lands (the global norm); the replicas' local norms are summed
by one small all-reduce, overlapped with the gradients', so that every rank holds the same
estimate. With accumulation the local gradient is the first micro-batch's; alone, without
accumulation, two consecutive steps play the part of two replicas.

Cost per measured step with several replicas, beyond DDP's own: a BLAS dot over each bucket
before its all-reduce (the local norm) and one after it (the norm of the average), one small
all-reduce of the local norms and a fixed handful of tiny tensor ops; no host sync and no Python
work per parameter. The 1/K averaging is one multiply over the bucket before the all-reduce, as
in DDP's own allreduce hook (without a hook DDP folds it into its bucket copy, which a comm hook
rules out); with accumulation it also takes the mean over the micro-steps. With
``stats_interval=N`` the dots, the small all-reduce and the update run on one step in N (one pair
of consecutive steps in N for a single replica): cheaper, still unbiased, but the estimate then
averages N times fewer observations over the same memory, so it is noisier.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from adl.client_lib.gns import GradientNoiseEstimator, flat_sq_norm, grouped_sq_norms

Tensor = torch.Tensor
Layout = tuple[Tensor | None, list[int]]

_ONE_GROUP: Layout = (None, [])


def _first_tensor(done: torch.futures.Future[list[Tensor]]) -> Tensor:
    """An all-reduce future's tensor: what DDP expects a comm hook's future to hold."""
    return done.value()[0]


class GradStats:
    """Collects one optimizer step's gradient norms and folds them into the noise estimate."""

    def __init__(
        self,
        params: list[nn.Parameter],
        groups: list[int],
        num_groups: int,
        gns: GradientNoiseEstimator,
        world_size: int,
        stats_interval: int,
    ) -> None:
        self._params = params
        self._groups = num_groups
        self.gns = gns
        self.world_size = world_size
        self.stats_interval = stats_interval
        device = params[0].device
        self._group_of = {id(p): g for p, g in zip(params, groups, strict=True)}
        self._group_index = torch.tensor(groups, dtype=torch.long, device=device)
        # Whether the comm hook's scaling pass also averages over the micro-steps (set by the
        # wrapper once it knows that DDP holds every parameter the optimizer updates).
        self.fold_micro = False
        self.measure = True  # whether this optimizer step measures noise statistics
        self.synced = False  # whether the comm hook reduced (and averaged) this step's buckets
        self.pending_local: Tensor | None = None
        self.hook_sq = torch.zeros(self._groups, dtype=torch.float32, device=device)
        self._hook_seen = False
        self._bucket_layouts: dict[tuple[int, int, int], Layout] = {}
        # Squared norms of the averaged gradient per bucket, taken as each all-reduce lands.
        self._global_parts: dict[int, Tensor] = {}
        # The replicas' local norms, being summed while the gradients are all-reduced.
        self._shared_local: tuple[Any, Tensor] | None = None

    # ------------------------------------------------------------------ per step

    def measures(self, step: int) -> bool:
        """Whether optimizer step ``step`` measures the noise statistics.

        Alone, the estimate pairs consecutive steps, so the step before a measured one is
        measured too (its gradient is the pair's first half).
        """
        n = self.stats_interval
        if n == 1:
            return True
        return step % n == 0 or (self.world_size == 1 and step % n == n - 1)

    def start_step(self, step: int) -> None:
        """Reset at the first micro-step of optimizer step ``step``."""
        # Decided from the step count, which every rank (and a resumed run) shares.
        self.measure = self.measures(step)
        self.pending_local = None
        self.synced = False
        if self._hook_seen:
            self.hook_sq.zero_()
            self._hook_seen = False
        self._global_parts.clear()

    def capture_first_micro(self) -> None:
        """Gradients after the first micro-batch of an accumulating step are one micro-gradient."""
        grads = [p.grad for p in self._params if p.grad is not None]
        if grads:
            self.pending_local = grouped_sq_norms(grads, self._index_for(grads), self._groups)

    def _index_for(self, grads: list[Tensor]) -> Tensor | None:
        if self._groups == 1:
            return None
        if len(grads) == len(self._params):
            return self._group_index
        present = [self._group_of[id(p)] for p in self._params if p.grad is not None]
        return torch.tensor(present, dtype=torch.long, device=self._group_index.device)

    # ------------------------------------------------------------------ DDP comm hook

    def comm_hook(self, bucket: dist.GradBucket, micro: int) -> torch.futures.Future[Tensor]:
        """Average a bucket over the replicas (and micro-steps), taking its norms on the way."""
        buf = bucket.buffer()
        stats = self.measure
        # One group (the common case) needs no layout, and so no per-parameter Python work.
        layout = self._bucket_layout(bucket) if stats and self._groups > 1 else _ONE_GROUP
        if stats and micro == 1:  # no accumulation this step: the bucket is one micro-gradient
            self.hook_sq.add_(self._flat_sq(buf, layout))
            self._hook_seen = True
        # Average before the sum, as DDP's own allreduce hook does (a multiply: cheaper than a
        # division after the sum); the micro-steps' mean is folded into the same pass when DDP
        # holds every parameter the optimizer updates.
        buf.mul_(1.0 / (self.world_size * (micro if self.fold_micro else 1)))
        self.synced = True
        if stats and bucket.is_last():
            # Every bucket's local norm is in: share them ahead of the last bucket, so that the
            # small sum lands while that bucket is still being reduced (not after it).
            self._share_local_norms(micro)
        fut = dist.all_reduce(buf, async_op=True).get_future()
        if not stats:
            return fut.then(_first_tensor)
        key = bucket.index()

        def reduced(done: torch.futures.Future[list[Tensor]]) -> Tensor:
            out = done.value()[0]
            # The norm of the averaged bucket as it lands, on the communication thread, so
            # the optimizer step takes no pass over the gradients. (Distinct keys: callbacks
            # may run in parallel.)
            self._global_parts[key] = self._flat_sq(out, layout)
            return out

        return fut.then(reduced)

    def _flat_sq(self, flat: Tensor, layout: Layout) -> Tensor:
        """Squared norm per parameter group of a flat bucket buffer."""
        index, sizes = layout
        if index is None:
            return flat_sq_norm(flat)
        return grouped_sq_norms(list(torch.split(flat, sizes)), index, self._groups)

    def _bucket_layout(self, bucket: dist.GradBucket) -> Layout:
        """(group of each parameter, their sizes) for a bucket; None when there is one group."""
        params = bucket.parameters()
        key = (bucket.index(), len(params), id(params[0]))
        layout = self._bucket_layouts.get(key)
        if layout is None:
            index = None
            if self._groups > 1:
                index = torch.tensor(
                    [self._group_of.get(id(p), 0) for p in params],
                    dtype=torch.long,
                    device=self._group_index.device,
                )
            layout = self._bucket_layouts[key] = (index, [p.numel() for p in params])
        return layout

    def _share_local_norms(self, micro: int) -> None:
        """Start summing the replicas' local norms, overlapped with the gradient all-reduce.

        Every rank averages the same values, so all hold one noise estimate (hence the same LR
        factor and parameters). Issued on every measuring backward by every rank, so that no
        rank can skip the collective; a rank without a local norm sends NaN, which voids the
        step's observation on every rank alike.
        """
        if self._shared_local is not None:  # a skipped step (e.g. GradScaler found infs)
            self._shared_local[0].wait()
        local = self.hook_sq if micro == 1 and self._hook_seen else self.pending_local
        if local is None:
            buf = torch.full((self._groups,), math.nan, device=self.hook_sq.device)
        else:
            buf = local.clone()  # the hook's own accumulator is reset at the next step
        self._shared_local = (dist.all_reduce(buf, async_op=True), buf)

    def _replica_local_sum(self) -> Tensor | None:
        """The sum of the replicas' local norms (NaN if one had none)."""
        shared, self._shared_local = self._shared_local, None
        if shared is None:
            return None
        work, buf = shared
        work.wait()  # finished with the gradients; with NCCL it only orders the streams
        return buf

    # ------------------------------------------------------------------ at the optimizer step

    def finish_step(
        self,
        grads: list[Tensor],
        micro: int,
        m: float,
        batch: int,
        folded: bool,
        inv_scale_sq: Callable[[], Tensor | None],
    ) -> None:
        """Fold the step's norms into the estimate, before the optimizer updates.

        ``grads`` are the final gradients when the hook did not measure (empty otherwise),
        ``m`` the samples behind one local gradient, ``batch`` the step's, ``folded`` whether
        the hook averaged the micro-steps, ``inv_scale_sq`` gives a GradScaler's 1/scale^2 (or
        None), asked only when the step measures.
        """
        hooked = self.world_size > 1 and self.synced
        if self.measure and (hooked or grads):
            self._observe(grads, micro, m, batch, folded, inv_scale_sq())
        elif self.world_size == 1 and micro == 1 and not self.measure:
            self.gns.forget_previous()  # the next measured step must not pair with a stale one
        self._global_parts.clear()

    def _observe(
        self,
        grads: list[Tensor],
        micro: int,
        m: float,
        batch: int,
        folded: bool,
        inv: Tensor | None,
    ) -> None:
        parts = list(self._global_parts.values())
        global_scale = 1.0
        if self.world_size > 1 and parts:
            # Measured by the comm hook on the reduced buckets: still loss-scaled, and summed
            # (not averaged) over the micro-batches unless the hook folded that in.
            global_sq = parts[0] if len(parts) == 1 else torch.stack(parts).sum(0)
            global_scale = 1.0 if folded else 1.0 / micro**2
            if inv is not None:
                global_sq = global_sq * inv
        else:  # the final gradients, which a GradScaler has unscaled by now
            global_sq = grouped_sq_norms(grads, self._index_for(grads), self._groups)
        local: Tensor | None = None
        local_scale = 1.0
        if self.world_size > 1:
            local, local_scale = self._replica_local_sum(), 1.0 / self.world_size
        elif micro > 1:
            local = self.pending_local
        if local is not None and m < batch:
            local = local * inv if inv is not None else local
            self.gns.update(
                local, m, global_sq, batch, local_scale=local_scale, global_scale=global_scale
            )
        elif micro == 1 and self.world_size == 1:
            self.gns.observe_consecutive(grads, self._index_for(grads), batch)
        self.gns.publish()
