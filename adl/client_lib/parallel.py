"""AdaptiveDataParallel: DDP plus gradient-noise statistics, LR scaling and step profiling.

Usage is that of DDP: wrap the model, then train as usual (``loss.backward(); optimizer.step()``,
or through a GradScaler). The optimizer's ``step`` is wrapped so that, on every synchronizing
step, the library:

1. averages accumulated gradients over the micro-batches of the step (the loss is expected to be
   a mean over its micro-batch, as usual), so the update is that of one big batch;
2. measures the gradient's squared norm per parameter group and, against a local gradient taken
   before averaging (a DDP comm hook sees each bucket before the all-reduce; with accumulation,
   the first micro-batch's gradient; alone, the previous step; averaged over the replicas so all
   ranks share one estimate), updates the noise estimate (every ``stats_interval`` optimizer
   steps; 1, the default, measures every step);
3. multiplies each group's learning rate by the scaling rule's factor for the step only;
4. counts progress in scale-invariant steps and, if given a scheduler, steps it once per
   scale-invariant step.

Statistics stay on the device; the LR factor uses the latest host copy (at most a step old).

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

import bisect
import contextlib
import functools
import logging
import math
import os
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from adl import contract as C
from adl.client_lib.context import get_context, has_context
from adl.client_lib.gns import GradientNoiseEstimator, flat_sq_norm, grouped_sq_norms
from adl.client_lib.profile import Profile
from adl.client_lib.reporter import HintsReporter, build_hints, current_batch
from adl.client_lib.scaling import (
    Progress,
    ScalingRule,
    adascale_gain,
    default_rule,
    predicted_lr_scale,
)
from adl.models import Hints
from adl.sched.goodput import BatchBounds, GoodputFunction, GradParams

log = logging.getLogger(__name__)

Tensor = torch.Tensor


# ---------------------------------------------------------------------------- job context access


def _context() -> Any | None:
    """The process-wide job context, when the in-job library has one (else None)."""
    return get_context() if has_context() else None


#: Variables of the worker contract that mean "this process is a worker of an adl job".
_WORKER_VARS = (C.ENV_JOB, C.ENV_WORLD_SIZE, C.ENV_CHECKPOINT_DIR)


def _joined_context() -> Any | None:
    """The job context, joining the job first when this process is one of its workers and
    nothing joined yet: a wrapper built before the loader or ``init_process_group`` would
    otherwise train alone, unsynchronized, and outside the checkpoints."""
    if (
        not has_context()
        and not dist.is_initialized()  # a script that set up torch.distributed itself
        and any(os.environ.get(k) for k in _WORKER_VARS)
    ):
        from adl.client_lib.env import context

        return context()
    return _context()


def _ctx_attr(ctx: Any | None, name: str, default: Any) -> Any:
    if ctx is None:
        return default
    value = getattr(ctx, name, None)
    return default if value is None else value


def _first_batch_dim(args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    for value in (*args, *kwargs.values()):
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            return int(value.shape[0])
        if isinstance(value, (list, tuple)):
            found = _first_batch_dim(tuple(value), {})
            if found is not None:
                return found
        if isinstance(value, dict):
            found = _first_batch_dim((), value)
            if found is not None:
                return found
    return None


_ONE_GROUP: tuple[Tensor | None, list[int]] = (None, [])


def _first_tensor(done: torch.futures.Future[list[Tensor]]) -> Tensor:
    """An all-reduce future's tensor: what DDP expects a comm hook's future to hold."""
    return done.value()[0]


def _schedule_over(scheduler: Any) -> bool:
    """Whether a scheduler with a fixed length (OneCycleLR's ``total_steps``) has taken its
    last step: stepping it again raises, and leaves it a step past its end. For SequentialLR
    (warm-up, then OneCycleLR), the part its next step would step."""
    last = getattr(scheduler, "last_epoch", None)
    if isinstance(scheduler, torch.optim.lr_scheduler.SequentialLR) and isinstance(last, int):
        parts = scheduler._schedulers
        return _schedule_over(parts[bisect.bisect_right(scheduler._milestones, last + 1)])
    total = getattr(scheduler, "total_steps", None)
    return isinstance(total, int) and isinstance(last, int) and last >= total


# ---------------------------------------------------------------------------- the wrapper


class _EndOfStepBackward(torch.autograd.Function):
    """Identity on a model output; its backward tells the wrapper that the step's last
    backward has reached the model."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, adp: AdaptiveDataParallel) -> Tensor:
        ctx.adp = adp
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None]:
        ctx.adp._average_at_backward_end()
        return grad, None


def _on_backward(out: Any, adp: AdaptiveDataParallel) -> Any:
    """``out`` with each tensor that needs a gradient passed through :class:`_EndOfStepBackward`
    (tensors, and tuples, lists and dicts of them)."""
    if isinstance(out, Tensor):
        return _EndOfStepBackward.apply(out, adp) if out.requires_grad else out
    if isinstance(out, tuple | list):
        return type(out)(_on_backward(o, adp) for o in out)
    if isinstance(out, dict):
        return type(out)((k, _on_backward(v, adp)) for k, v in out.items())
    return out


class AdaptiveDataParallel(nn.Module):
    """Data-parallel training that adapts its learning rate to the batch size it is given."""

    _model: nn.Module

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        lr_scheduler: Any | None = None,
        scaling_rule: ScalingRule | None = None,
        grad_scaler: Any | None = None,
        *,
        init_batch_size: int | None = None,
        memory_samples: float | None = None,
        name: str = "adaptive_data_parallel",
        report: bool = True,
        stats_interval: int = 1,
        **ddp_kwargs: Any,
    ) -> None:
        super().__init__()
        if stats_interval < 1:
            raise ValueError("stats_interval must be >= 1")
        # Noise statistics every this many optimizer steps (1: every step). Larger values save
        # the norm passes on the other steps; the estimate stays unbiased but averages fewer
        # observations over the same memory, so it is noisier.
        self.stats_interval = int(stats_interval)
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.scaling_rule = scaling_rule or default_rule(optimizer)
        self.grad_scaler = grad_scaler
        self.name = name
        self._ctx = _joined_context()
        self.world_size = dist.get_world_size() if dist.is_initialized() else 1
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.num_nodes = int(
            _ctx_attr(self._ctx, "num_nodes", os.environ.get(C.ENV_NUM_NODES, "1"))
        )
        # B0 when given; otherwise the context's, read at the first step: by then the loader
        # that feeds training has claimed it (the first loader built may be a validation one).
        self._init_batch_size = int(init_batch_size) if init_batch_size else None
        b0_hint = init_batch_size or _ctx_attr(self._ctx, "init_batch_size", None)

        # Parameters as the optimizer sees them, with their group index.
        self._params: list[nn.Parameter] = []
        groups: list[int] = []
        for gi, group in enumerate(optimizer.param_groups):
            for p in group["params"]:
                if p.requires_grad:
                    self._params.append(p)
                    groups.append(gi)
        if not self._params:
            raise ValueError("the optimizer holds no trainable parameters")
        self._groups = len(optimizer.param_groups)
        device = self._params[0].device
        self._group_of = {id(p): g for p, g in zip(self._params, groups, strict=True)}
        self._group_index = torch.tensor(groups, dtype=torch.long, device=device)

        memory = memory_samples if memory_samples is not None else 1000.0 * (b0_hint or 32)
        # ~1000 steps at B0: long enough to average out the per-step noise of the estimates.
        self.gns = GradientNoiseEstimator(self._groups, device, memory_samples=memory)
        self.progress = Progress()
        self.profile = Profile()
        self._sched_ticks = 0
        self._last_factors: list[float] = [1.0] * self._groups
        self._last_gain = 1.0

        # Per-step bookkeeping (reset at the first micro-step of every optimizer step).
        self._micro = 0
        self._accumulating = False
        self._new_cycle = True
        self._cycle_bsz: int | None = None
        # Samples of the step over all replicas and of its first micro-batch, as the data loader
        # counted them (None when a batch did not come from one): the same on every rank.
        self._cycle_samples: int | None = None
        self._cycle_first: int | None = None
        self._pending_local: Tensor | None = None
        self._stats_now = True  # whether this optimizer step measures noise statistics
        self._synced = False  # whether the comm hook reduced (and averaged) this step's buckets
        self._hook_sq = torch.zeros(self._groups, dtype=torch.float32, device=device)
        self._hook_seen = False
        self._bucket_layouts: dict[tuple[int, int, int], tuple[Tensor | None, list[int]]] = {}
        # Squared norms of the averaged gradient per bucket, taken as each all-reduce lands.
        self._global_parts: dict[int, Tensor] = {}
        # The replicas' local norms, being summed while the gradients are all-reduced.
        self._shared_local: tuple[Any, Tensor] | None = None

        if self.world_size > 1:
            # Gradients as views of the communication buckets: DDP then skips copying them in
            # and out of the buckets, which pays for the passes the noise statistics need
            # (with a comm hook, DDP can no longer fold the 1/K scaling into that copy).
            ddp_kwargs.setdefault("gradient_as_bucket_view", True)
            self.module: nn.Module = nn.parallel.DistributedDataParallel(model, **ddp_kwargs)
            # When DDP holds every parameter the optimizer updates, the hook's scaling pass can
            # also average over the micro-steps (one pass less per accumulating step).
            reduced = getattr(self.module, "_module_parameters", None)  # without DDP's ignored
            in_ddp = {id(p) for p in (model.parameters() if reduced is None else reduced)}
            self._fold_micro = all(id(p) in in_ddp for p in self._params)
            # DDP inspects hook annotations, which postponed evaluation turns into strings.
            self.module.register_comm_hook(None, lambda state, bucket: self._comm_hook(bucket))
        else:
            self.module = model
            self._fold_micro = False
        # Whether this step's gradients were averaged over the micro-steps as its last backward
        # finished (see _average_at_backward_end), or one such averaging is queued.
        self._averaged = False
        self._average_queued = False
        self._warned_mid_step = False
        self._warned_schedule_over = False
        self._loader_claimed = False
        self.__dict__["_model"] = model  # reachable, but not a second registered submodule
        self._patch_optimizer()
        self._register_checkpoint()
        self.reporter: HintsReporter | None = None
        if report and self.rank == 0:
            self.reporter = HintsReporter.from_env(self.hints, watch=self._loader_config)
            if self.reporter is not None:
                self.reporter.start()
        self._register_goodput_provider()

    # ------------------------------------------------------------------ forward

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Micro-steps run inside accumulate gradients without syncing (as with DDP).

        Only needed without the adaptive data loader, which decides accumulation itself.
        """
        previous, self._accumulating = self._accumulating, True
        try:
            yield
        finally:
            self._accumulating = previous

    def _sync_now(self) -> bool:
        if self._accumulating:
            return False
        flag = _ctx_attr(_context() or self._ctx, "is_sync_step", True)
        return bool(flag() if callable(flag) else flag)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        if not (torch.is_grad_enabled() and self.training):
            return self.module(*args, **kwargs)
        sync = self._sync_now()
        if self._new_cycle:
            self._start_cycle()
        elif self._micro == 1 and self._stats_now:
            self._capture_first_micro()
        bsz = _first_batch_dim(args, kwargs) or int(_ctx_attr(self._ctx, "local_bsz", 0)) or 1
        if self._cycle_bsz is None:
            self._cycle_bsz = bsz
        self._count_loader_samples()
        self.profile.tick((self.num_nodes, self.world_size, self._cycle_bsz), sync)
        self._micro += 1
        self._new_cycle = sync
        if self.world_size > 1 and not sync:
            ddp = self.module
            assert isinstance(ddp, nn.parallel.DistributedDataParallel)
            with ddp.no_sync():
                return ddp(*args, **kwargs)
        out = self.module(*args, **kwargs)
        if sync and self._micro > 1 and self.world_size == 1:
            # the last micro-step of an accumulating step alone (with several replicas the
            # comm hook averages, and a callback here would race with its all-reduce)
            out = _on_backward(out, self)
        return out

    def _count_loader_samples(self) -> None:
        """Take the job-wide size of this micro-batch from the data loader that handed it out.

        At an epoch's uneven tail the replicas' shares differ by one: a step size computed from
        this replica's share would differ between ranks, and so would the LR factor, the
        progress and then the parameters. The first such batch also tells which loader trains:
        its batch size is B0 and its dataset the epoch (a validation loader built first set them).
        """
        ctx = _context() or self._ctx
        loader = _ctx_attr(ctx, "feeding_loader", None)
        samples = _ctx_attr(ctx, "global_micro_batch", None)
        if ctx is None or loader is None or samples is None:
            self._cycle_samples = None
            if loader is None:  # a plain DataLoader under several replicas: warn once
                from adl.client_lib.data import warn_if_unsharded

                warn_if_unsharded(ctx, self.world_size)
            return
        if not self._loader_claimed:
            self._loader_claimed = True
            ctx.init_batch_size, ctx.dataset_size = int(loader.batch_size), len(loader.dataset)
        if self._micro == 0:  # the step's first micro-batch
            self._cycle_samples, self._cycle_first = 0, int(samples)
        if self._cycle_samples is not None:
            self._cycle_samples += int(samples)

    def _average_at_backward_end(self) -> None:
        """The backward of the step's last micro-step reached the model's output (called from
        :class:`_EndOfStepBackward`): average the gradients over the micro-steps as that
        backward finishes, so that whatever runs between ``backward()`` and ``step()``
        (gradient clipping, norm logging) sees the batch's mean gradient, as it does on
        several replicas, where the comm hook averages. One fused multiply per step."""
        if self._average_queued:
            return  # another output of the same backward
        if self._averaged:
            # another backward in the same micro-step (a second loss): back to the sum, and
            # average again once it has added its part
            self._scale_grads(float(self._micro))
            self._averaged = False
        self._average_queued = True
        # Runs when the whole backward is done (DDP and FSDP finish their work the same way).
        torch.autograd.Variable._execution_engine.queue_callback(self._average_now)

    def _average_now(self) -> None:
        self._average_queued = False
        self._scale_grads(1.0 / self._micro)
        self._averaged = True

    def _scale_grads(self, factor: float) -> None:
        grads = [p.grad for p in self._params if p.grad is not None]
        if grads:
            torch._foreach_mul_(grads, factor)

    def _start_cycle(self) -> None:
        self._micro = 0
        self._averaged = False
        self._average_queued = False
        # Decided from the step count, which every rank (and a resumed run) shares.
        self._stats_now = self._measures(self.progress.steps)
        self._cycle_bsz = None
        self._cycle_samples = self._cycle_first = None
        self._pending_local = None
        self._synced = False
        if self._hook_seen:
            self._hook_sq.zero_()
            self._hook_seen = False
        self._global_parts.clear()

    def _capture_first_micro(self) -> None:
        """Gradients after the first micro-batch of an accumulating step are one micro-gradient."""
        grads = [p.grad for p in self._params if p.grad is not None]
        if grads:
            self._pending_local = grouped_sq_norms(grads, self._index_for(grads), self._groups)

    def _measures(self, step: int) -> bool:
        """Whether optimizer step ``step`` measures the noise statistics.

        Alone, the estimate pairs consecutive steps, so the step before a measured one is
        measured too (its gradient is the pair's first half).
        """
        n = self.stats_interval
        if n == 1:
            return True
        return step % n == 0 or (self.world_size == 1 and step % n == n - 1)

    def _index_for(self, grads: list[Tensor]) -> Tensor | None:
        if self._groups == 1:
            return None
        if len(grads) == len(self._params):
            return self._group_index
        present = [self._group_of[id(p)] for p in self._params if p.grad is not None]
        return torch.tensor(present, dtype=torch.long, device=self._group_index.device)

    # ------------------------------------------------------------------ DDP comm hook

    def _comm_hook(self, bucket: dist.GradBucket) -> torch.futures.Future[Tensor]:
        buf = bucket.buffer()
        stats, micro = self._stats_now, max(self._micro, 1)
        # One group (the common case) needs no layout, and so no per-parameter Python work.
        layout = self._bucket_layout(bucket) if stats and self._groups > 1 else _ONE_GROUP
        if stats and micro == 1:  # no accumulation this step: the bucket is one micro-gradient
            self._hook_sq.add_(self._flat_sq(buf, layout))
            self._hook_seen = True
        # Average before the sum, as DDP's own allreduce hook does (a multiply: cheaper than a
        # division after the sum); the micro-steps' mean is folded into the same pass when DDP
        # holds every parameter the optimizer updates.
        buf.mul_(1.0 / (self.world_size * (micro if self._fold_micro else 1)))
        self._synced = True
        fut = dist.all_reduce(buf, async_op=True).get_future()
        if not stats:
            return fut.then(_first_tensor)
        if bucket.is_last():  # every bucket's local norm is in: share them, in the same stream
            self._share_local_norms()
        key = bucket.index()

        def reduced(done: torch.futures.Future[list[Tensor]]) -> Tensor:
            out = done.value()[0]
            # The norm of the averaged bucket as it lands, on the communication thread, so
            # the optimizer step takes no pass over the gradients. (Distinct keys: callbacks
            # may run in parallel.)
            self._global_parts[key] = self._flat_sq(out, layout)
            return out

        return fut.then(reduced)

    def _flat_sq(self, flat: Tensor, layout: tuple[Tensor | None, list[int]]) -> Tensor:
        """Squared norm per parameter group of a flat bucket buffer."""
        index, sizes = layout
        if index is None:
            return flat_sq_norm(flat)
        return grouped_sq_norms(list(torch.split(flat, sizes)), index, self._groups)

    def _bucket_layout(self, bucket: dist.GradBucket) -> tuple[Tensor | None, list[int]]:
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

    def _share_local_norms(self) -> None:
        """Start summing the replicas' local norms, overlapped with the gradient all-reduce.

        Every rank averages the same values, so all hold one noise estimate (hence the same LR
        factor and parameters). Issued on every measuring backward by every rank, so that no
        rank can skip the collective; a rank without a local norm sends NaN, which voids the
        step's observation on every rank alike.
        """
        if self._shared_local is not None:  # a skipped step (e.g. GradScaler found infs)
            self._shared_local[0].wait()
        local = self._hook_sq if self._micro == 1 and self._hook_seen else self._pending_local
        if local is None:
            buf = torch.full((self._groups,), math.nan, device=self._hook_sq.device)
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

    # ------------------------------------------------------------------ optimizer step

    def _patch_optimizer(self) -> None:
        original = self.optimizer.step
        adp = self

        def step(opt: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
            opt._opt_called = True  # type: ignore[attr-defined]  # LR-scheduler order check
            return adp._optimizer_step(original, *args, **kwargs)

        if hasattr(original, "_wrapped_by_lr_sched"):
            step._wrapped_by_lr_sched = True  # type: ignore[attr-defined,unused-ignore]
        functools.update_wrapper(step, original, assigned=("__doc__",), updated=())
        self.optimizer.step = types.MethodType(step, self.optimizer)  # type: ignore[method-assign]

    def _inv_scale_sq(self) -> Tensor | None:
        scaler = self.grad_scaler
        if scaler is None or not scaler.is_enabled():
            return None
        scale = getattr(scaler, "_scale", None)
        if scale is None:
            return None
        return scale.double().reciprocal().square().float()

    def _optimizer_step(self, original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not self._new_cycle and not self._warned_mid_step:
            # The last forward was a micro-batch before the step's last: stepping now updates on
            # part of the batch and counts it as a whole step (progress, LR schedule).
            self._warned_mid_step = True
            warnings.warn(
                "optimizer.step() after a micro-batch that is not the last of its step: with "
                "gradient accumulation, step only when adl.init_process_group().is_sync_step "
                "is true",
                stacklevel=3,
            )
        micro = max(self._micro, 1)
        local = self._cycle_bsz or 1
        batch = self.world_size * local * micro
        m = float(local)
        if self._cycle_samples and self._cycle_first:  # the loader's counts, equal on all ranks
            batch, m = self._cycle_samples, self._cycle_first / self.world_size
        if self._init_batch_size is None:
            self._init_batch_size = self.init_batch_size if self._b0_from_context() else batch
        b0 = self.init_batch_size
        scale = batch / b0
        # Statistics as of the previous step: the copy is long finished (no pipeline stall),
        # and the LR does not depend on timing, so runs and resumed runs are reproducible.
        stats = self.gns.group_grad_params(b0, wait=True)
        group_stats: list[GradParams | None] = list(stats) if stats else [None] * self._groups
        factors = self.scaling_rule.factors(scale, group_stats, self.progress)
        gain = adascale_gain(scale, self.gns.grad_params(b0))
        measure = self._stats_now
        hooked = self.world_size > 1 and self._synced
        folded = hooked and self._fold_micro  # the comm hook already averaged the micro-steps
        grads: list[Tensor] = []
        if (micro > 1 and not folded) or (measure and not hooked):
            grads = [p.grad for p in self._params if p.grad is not None]
            # (unless done as the last backward finished)
            if micro > 1 and not folded and grads and not self._averaged:
                torch._foreach_mul_(grads, 1.0 / micro)
        if measure and (hooked or grads):
            self._observe(grads, micro, m, batch, folded)
        elif self.world_size == 1 and micro == 1 and not measure:
            self.gns.forget_previous()  # the next measured step must not pair with a stale one
        self._global_parts.clear()
        saved = [group["lr"] for group in self.optimizer.param_groups]
        for group, factor in zip(self.optimizer.param_groups, factors, strict=True):
            group["lr"] = group["lr"] * factor
        try:
            result = original(*args, **kwargs)
        finally:
            for group, lr in zip(self.optimizer.param_groups, saved, strict=True):
                group["lr"] = lr
        self._last_factors = list(factors)
        self._last_gain = gain
        self.progress.advance(gain, batch)
        if self.lr_scheduler is not None:
            target = math.floor(self.progress.progress)
            while self._sched_ticks < target:
                self._sched_ticks += 1
                if _schedule_over(self.lr_scheduler):
                    self._warn_schedule_over()
                    continue
                self.lr_scheduler.step()
        return result

    def _warn_schedule_over(self) -> None:
        if self._warned_schedule_over:
            return
        self._warned_schedule_over = True
        log.warning(
            "the LR scheduler's last step is done (%d scale-invariant steps so far); keeping "
            "its final LR. Progress can pass epochs x dataset / B0 by a fraction of a step per "
            "epoch: an epoch's short last step counts for more than its share of samples",
            self._sched_ticks,
        )

    def _observe(self, grads: list[Tensor], micro: int, m: float, batch: int, folded: bool) -> None:
        inv = self._inv_scale_sq()
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
            local = self._pending_local
        if local is not None and m < batch:
            local = local * inv if inv is not None else local
            self.gns.update(
                local, m, global_sq, batch, local_scale=local_scale, global_scale=global_scale
            )
        elif micro == 1 and self.world_size == 1:
            self.gns.observe_consecutive(grads, self._index_for(grads), batch)
        self.gns.publish()

    # ------------------------------------------------------------------ what others read

    def _b0_from_context(self) -> int | None:
        b0 = _ctx_attr(_context() or self._ctx, "init_batch_size", None)
        return int(b0) if b0 else None

    @property
    def init_batch_size(self) -> int:
        """B0: given, else the context's (the data loader's), else the first step's batch."""
        return self._init_batch_size or self._b0_from_context() or 1

    @property
    def gain(self) -> float:
        """AdaScale gain of the last step (scale-invariant steps it was worth)."""
        return self._last_gain

    @property
    def lr_factors(self) -> list[float]:
        """LR multipliers applied to each parameter group at the last step."""
        return list(self._last_factors)

    def grad_params(self, wait: bool = False) -> GradParams | None:
        return self.gns.grad_params(self.init_batch_size, wait=wait)

    def goodput_fn(self, bounds: BatchBounds) -> GoodputFunction | None:
        """Goodput of this job for the data loader's batch-size choice (None until profiled)."""
        return self.profile.goodput_fn(self.grad_params(), bounds)

    def hints(self) -> Hints | None:
        """The scheduler hints for the current state of this job (rank 0 reports them)."""
        ctx = _context() or self._ctx
        bounds = _ctx_attr(ctx, "batch_bounds", None)
        total = _ctx_attr(ctx, "total_progress", None)
        batch, local, accum = current_batch(
            self.world_size, self._loader_config(), self._cycle_bsz, self._micro
        )
        return build_hints(
            init_batch_size=self.init_batch_size,
            bounds=bounds if isinstance(bounds, BatchBounds) else None,
            perf=self.profile.perf_params(),
            grad=self.grad_params(),
            progress=self.progress.progress,
            total_progress=float(total) if isinstance(total, (int, float)) else None,
            max_profiled_replicas=self.profile.max_profiled_replicas(),
            batch_size=batch,
            local_bsz=local,
            accum_steps=accum,
        )

    def _loader_config(self) -> tuple[int | None, int | None]:
        """The data loader's (micro-batch, accumulation steps), (None, None) without one."""
        ctx = _context() or self._ctx
        return _ctx_attr(ctx, "local_bsz", None), _ctx_attr(ctx, "accum_steps", None)

    def close(self) -> None:
        """Stop the background reporter (also done at interpreter exit: the thread is a daemon)."""
        if self.reporter is not None:
            self.reporter.stop()

    # ------------------------------------------------------------------ checkpointing

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        return self._model.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        return self._model.load_state_dict(state_dict, strict=strict, assign=assign)

    def adaptive_state_dict(self) -> dict[str, Any]:
        """Everything to resume: model, optimizer, scheduler, scaler, statistics, progress."""
        self.gns.publish()
        state: dict[str, Any] = {
            "model": self._model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "gns": self.gns.state_dict(),
            "progress": self.progress.state_dict(),
            "profile": self.profile.state_dict(),
            "init_batch_size": self._init_batch_size,
            "sched_ticks": self._sched_ticks,
        }
        if self.lr_scheduler is not None:
            state["lr_scheduler"] = self.lr_scheduler.state_dict()
        if self.grad_scaler is not None:
            state["grad_scaler"] = self.grad_scaler.state_dict()
        return state

    def load_adaptive_state_dict(self, state: dict[str, Any]) -> None:
        self._model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.gns.load_state_dict(state["gns"])
        self.progress.load_state_dict(state["progress"])
        self.profile.load_state_dict(state["profile"])
        if state.get("init_batch_size") is not None:
            self._init_batch_size = int(state["init_batch_size"])
        self._sched_ticks = int(state.get("sched_ticks", 0))
        if self.lr_scheduler is not None and "lr_scheduler" in state:
            self.lr_scheduler.load_state_dict(state["lr_scheduler"])
        if self.grad_scaler is not None and "grad_scaler" in state:
            self.grad_scaler.load_state_dict(state["grad_scaler"])

    def _register_checkpoint(self) -> None:
        ctx = self._ctx
        register = getattr(ctx, "register", None) if ctx is not None else None
        if register is None:
            return
        register(_CheckpointState(self))

    def _register_goodput_provider(self) -> None:
        ctx = self._ctx
        if ctx is None:
            return
        setter = getattr(ctx, "set_goodput_provider", None)
        if callable(setter):
            setter(self.goodput_fn)
            ctx.lr_scale_provider = functools.partial(predicted_lr_scale, self)
        elif hasattr(ctx, "goodput_provider"):
            ctx.goodput_provider = self.goodput_fn


class _CheckpointState:
    """Adapter between the wrapper and the job's checkpoint registry."""

    def __init__(self, adp: AdaptiveDataParallel) -> None:
        self._adp = adp
        self.name = adp.name

    def state_dict(self) -> dict[str, Any]:
        return self._adp.adaptive_state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._adp.load_adaptive_state_dict(state)
