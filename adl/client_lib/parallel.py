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
What they cost per step is told in :mod:`adl.client_lib.grad_stats`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import operator
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from adl import contract as C
from adl.client_lib.context import get_context, has_context
from adl.client_lib.epoch import declared_epochs_done
from adl.client_lib.gns import GradientNoiseEstimator
from adl.client_lib.grad_stats import GradStats
from adl.client_lib.micro_average import MicroAverager, on_backward_end, weigh_backward
from adl.client_lib.optimizer import SchedulerStepper, patch_step, scaled_lrs
from adl.client_lib.profile import Profile
from adl.client_lib.reporter import HintsReporter, build_hints, current_batch
from adl.client_lib.scaling import (
    Progress,
    ScalingRule,
    adascale_gain,
    default_rule,
    predicted_lr_scale,
)
from adl.client_lib.tensorboard import TensorBoardScalars
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


def _restart_cost(ctx: Any | None) -> float | None:
    """What a restart costs this job, as measured so far (``adl.client_lib.restart_cost``)."""
    clock = _ctx_attr(ctx, "restart", None)
    return clock.estimate_s() if clock is not None else None


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


# ---------------------------------------------------------------------------- the wrapper


class AdaptiveDataParallel(nn.Module):
    """Data-parallel training that adapts its learning rate to the batch size it is given."""

    _model: nn.Module
    #: whether a lone replica averages accumulated gradients as the last backward ends
    #: (else at the optimizer step)
    _average_on_backward = True
    #: while set, optimizer.step() is the optimizer's own: no statistics, LR factor or progress
    _passthrough = False

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
        tensorboard_dir: str | os.PathLike[str] | None = None,
        **ddp_kwargs: Any,
    ) -> None:
        super().__init__()
        if stats_interval < 1:
            raise ValueError("stats_interval must be >= 1")
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.scaling_rule = scaling_rule or default_rule(optimizer)
        self.grad_scaler = grad_scaler
        self.name = name
        self._ctx = _joined_context()
        self._restart = _ctx_attr(self._ctx, "restart", None)
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

        memory = memory_samples if memory_samples is not None else 1000.0 * (b0_hint or 32)
        # ~1000 steps at B0: long enough to average out the per-step noise of the estimates.
        self.gns = GradientNoiseEstimator(self._groups, device, memory_samples=memory)
        self.progress = Progress()
        self.profile = Profile(gpu_type=device_gpu_type(device))
        self._scheduler = SchedulerStepper(lr_scheduler)
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
        self._stats = self._make_stats(groups, int(stats_interval))
        self._averager = MicroAverager(self._params, lambda: self._micro)
        self.module: nn.Module = self._wrap(model, ddp_kwargs)
        self._warned_mid_step = False
        self._loader_claimed = False
        self.__dict__["_model"] = model  # reachable, but not a second registered submodule
        patch_step(self.optimizer, self._optimizer_step)
        # Opt-in scalars (adl.client_lib.tensorboard): None, and so free, unless asked for.
        self._tensorboard = TensorBoardScalars.create(tensorboard_dir, self.rank)
        self._register_checkpoint()
        self.reporter: HintsReporter | None = None
        if report and self.rank == 0:
            self.reporter = HintsReporter.from_env(self.hints, watch=self._loader_config)
            if self.reporter is not None:
                self.reporter.start()
                hooks = _ctx_attr(self._ctx, "work_done_hooks", None)
                if hooks is not None:
                    hooks.append(self._final_report)
        saved = _ctx_attr(self._ctx, "checkpoint_hooks", None)
        if saved is not None:
            saved.append(self.profile.pause)  # a periodic save is no step time
        self._register_goodput_provider()

    def _make_stats(self, groups: list[int], stats_interval: int) -> GradStats:
        """The collector of the gradient norms behind the noise estimate."""
        return GradStats(
            self._params, groups, self._groups, self.gns, self.world_size, stats_interval
        )

    def _wrap(self, model: nn.Module, ddp_kwargs: dict[str, Any]) -> nn.Module:
        """The module that runs forward: DDP with the statistics' comm hook over replicas."""
        if self.world_size > 1:
            # Gradients as views of the communication buckets: DDP then skips copying them in
            # and out of the buckets, which pays for the passes the noise statistics need
            # (with a comm hook, DDP can no longer fold the 1/K scaling into that copy).
            ddp_kwargs.setdefault("gradient_as_bucket_view", True)
            ddp = nn.parallel.DistributedDataParallel(model, **ddp_kwargs)
            # When DDP holds every parameter the optimizer updates, the hook's scaling pass can
            # also average over the micro-steps (one pass less per accumulating step).
            reduced = getattr(ddp, "_module_parameters", None)  # without DDP's ignored
            in_ddp = {id(p) for p in (model.parameters() if reduced is None else reduced)}
            self._stats.fold_micro = all(id(p) in in_ddp for p in self._params)
            # DDP inspects hook annotations, which postponed evaluation turns into strings.
            ddp.register_comm_hook(
                None, lambda state, bucket: self._stats.comm_hook(bucket, max(self._micro, 1))
            )
            return ddp
        return model

    @property
    def stats_interval(self) -> int:
        """Noise statistics every this many optimizer steps (1: every step).

        Larger values save the norm passes on the other steps; the estimate stays unbiased but
        averages fewer observations over the same memory, so it is noisier.
        """
        return self._stats.stats_interval

    @stats_interval.setter
    def stats_interval(self, value: int) -> None:
        if value < 1:
            raise ValueError("stats_interval must be >= 1")
        self._stats.stats_interval = int(value)

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
        elif self._micro == 1 and self._stats.measure:
            self._stats.capture_first_micro()
        self._count_loader_samples()
        if self._cycle_bsz is None:
            self._cycle_bsz = self._micro_batch_size(args, kwargs)
        if self._restart is not None:
            self._restart.training()  # the restart (if any) is over: training again
            self._restart = None  # only the first step counts
        self.profile.tick((self.num_nodes, self.world_size, self._cycle_bsz), sync)
        self._micro += 1
        self._new_cycle = sync
        weight = self._share_weight()
        if self.world_size > 1 and not sync:
            out = self._forward_unsynced(*args, **kwargs)
            return weigh_backward(out, weight) if weight != 1.0 else out
        out = self._forward_synced(*args, **kwargs)
        if weight != 1.0:
            out = weigh_backward(out, weight)
        if sync and self._micro > 1 and self.world_size == 1 and self._average_on_backward:
            # the last micro-step of an accumulating step alone (with several replicas the
            # comm hook averages, and a callback here would race with its all-reduce)
            out = on_backward_end(out, self._averager)
        return out

    def _forward_unsynced(self, *args: Any, **kwargs: Any) -> Any:
        """A micro-step whose backward accumulates gradients locally (no communication)."""
        ddp = self.module
        assert isinstance(ddp, nn.parallel.DistributedDataParallel)
        with ddp.no_sync():
            return ddp(*args, **kwargs)

    def _forward_synced(self, *args: Any, **kwargs: Any) -> Any:
        """The last micro-step of an optimizer step: its backward reduces the gradients."""
        return self.module(*args, **kwargs)

    def _share_weight(self) -> float:
        """What this replica's share of the micro-batch weighs in the step's update (1.0 but
        where the loader's shares differ: see ``adl.client_lib.data.share_weights``)."""
        if self._cycle_samples is None:  # not a loader's batch: nothing known of the shares
            return 1.0
        return float(_ctx_attr(_context() or self._ctx, "share_weight", 1.0))

    def _micro_batch_size(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int:
        """This replica's samples in the micro-batch now starting: the data loader's count when
        it handed the batch out (dim 0 of a sequence-first ``[seq, batch]`` tensor is not the
        batch), else dim 0 of the first tensor argument (a loop without the adaptive loader)."""
        if self._cycle_samples is not None:  # counted by the loader (see _count_loader_samples)
            share = _ctx_attr(_context() or self._ctx, "local_micro_batch", None)
            if share:
                return int(share)
        return _first_batch_dim(args, kwargs) or int(_ctx_attr(self._ctx, "local_bsz", 0)) or 1

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
            ctx.training_loader = loader
            ctx.local_bsz, ctx.accum_steps = loader.current_local_bsz, loader.accumulation_steps
        if self._micro == 0:  # the step's first micro-batch
            self._cycle_samples, self._cycle_first = 0, int(samples)
        if self._cycle_samples is not None:
            self._cycle_samples += int(samples)

    def _start_cycle(self) -> None:
        self._micro = 0
        self._averager.reset()
        self._stats.start_step(self.progress.steps)
        self._cycle_bsz = None
        self._cycle_samples = self._cycle_first = None

    # ------------------------------------------------------------------ optimizer step

    def _inv_scale_sq(self) -> Tensor | None:
        scaler = self.grad_scaler
        if scaler is None or not scaler.is_enabled():
            return None
        scale = getattr(scaler, "_scale", None)
        if scale is None:
            return None
        return scale.double().reciprocal().square().float()

    def _optimizer_step(self, original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._passthrough:  # a library's own step (e.g. DCP initializing optimizer state)
            return original(*args, **kwargs)
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
        self._finish_gradients(micro, m, batch)
        with scaled_lrs(self.optimizer, factors):
            result = original(*args, **kwargs)
        self._last_factors = list(factors)
        self._last_gain = gain
        self.progress.advance(gain, batch)
        self._scheduler.catch_up(self.progress.progress)
        if self._tensorboard is not None:
            self._tensorboard.after_step(self, batch, local, micro)
        return result

    def _finish_gradients(self, micro: int, m: float, batch: int) -> None:
        """Average the step's gradients over its micro-steps and fold its norms into the noise
        estimate (``m``: samples behind one local gradient; ``batch``: the step's samples)."""
        measure = self._stats.measure
        hooked = self.world_size > 1 and self._stats.synced
        folded = hooked and self._stats.fold_micro  # the hook already averaged the micro-steps
        grads: list[Tensor] = []
        if (micro > 1 and not folded) or (measure and not hooked):
            grads = [p.grad for p in self._params if p.grad is not None]
            # (unless done as the last backward finished)
            if micro > 1 and not folded and grads and not self._averager.averaged:
                torch._foreach_mul_(grads, 1.0 / micro)
        self._stats.finish_step(grads, micro, m, batch, folded, self._inv_scale_sq)

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
        loader = _ctx_attr(ctx, "training_loader", None)
        if loader is not None:  # its own count: an exact B0 split unevenly is not replicas x local
            batch, local, accum = (
                loader.current_batch_size,
                loader.current_local_bsz,
                loader.accumulation_steps,
            )
        else:
            batch, local, accum = current_batch(
                self.world_size, self._loader_config(), self._cycle_bsz, self._micro
            )
        progress = self.progress.progress
        if isinstance(total, (int, float)) and declared_epochs_done(ctx):
            # The declared work is done, whatever the gains summed to: AdaScale counts a step
            # on a batch other than the initial one (an epoch's partial last batch, a grown
            # batch) as more or less than its share of the samples the total counts.
            progress = float(total)
        return build_hints(
            init_batch_size=self.init_batch_size,
            bounds=bounds if isinstance(bounds, BatchBounds) else None,
            perf=self.profile.perf_params(),
            grad=self.grad_params(),
            progress=progress,
            total_progress=float(total) if isinstance(total, (int, float)) else None,
            max_profiled_replicas=self.profile.max_profiled_replicas(),
            batch_size=batch,
            local_bsz=local,
            accum_steps=accum,
            restart_cost_s=_restart_cost(ctx),
            min_replicas=self._min_replicas(),
            gpu_type=self.profile.gpu_type,
        )

    def _min_replicas(self) -> int | None:
        """Fewest replicas the job fits in memory; None: any count (a replicated model)."""
        return None

    def _loader_config(self) -> tuple[int | None, int | None]:
        """The data loader's (micro-batch, accumulation steps), (None, None) without one."""
        ctx = _context() or self._ctx
        return _ctx_attr(ctx, "local_bsz", None), _ctx_attr(ctx, "accum_steps", None)

    def _final_report(self) -> None:
        """The declared work is done: one last report (progress complete), then no more."""
        if self.reporter is not None:
            self.reporter.stop(flush=True)

    def close(self) -> None:
        """Stop the background reporter (also done at interpreter exit: the thread is a daemon)."""
        if self.reporter is not None:
            self.reporter.stop()
        if self._tensorboard is not None:
            self._tensorboard.close()

    # ------------------------------------------------------------------ the wrapped model

    def __getattr__(self, name: str) -> Any:
        """Names the wrapper lacks are the model's (``model.init_hidden(bsz)``, ``model.config``),
        as a script written for the bare model calls them."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            model = self.__dict__.get("_model")
            if model is None or name.startswith("__"):
                raise
            try:
                return getattr(model, name)
            except AttributeError:
                raise AttributeError(
                    f"neither {type(self).__name__} nor the {type(model).__name__} it wraps has "
                    f"an attribute {name!r}"
                ) from None

    def __reduce_ex__(self, protocol: Any) -> Any:
        """Pickling the wrapper (``torch.save(model, f)``) pickles the model it wraps: the
        wrapper's live parts (process group, reporter thread) cannot be saved, and loading gives
        the bare model, ready for evaluation or to be wrapped again."""
        # a builtin call that hands the model back: the file loads without adl installed
        return operator.getitem, ([self._model], 0)

    # ------------------------------------------------------------------ checkpointing

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        return self._model.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict: Any, strict: bool = True, assign: bool = False) -> Any:
        return self._model.load_state_dict(state_dict, strict=strict, assign=assign)

    def adaptive_state_dict(self, *, with_weights: bool = True) -> dict[str, Any]:
        """Everything to resume: model, optimizer, scheduler, scaler, statistics, progress
        (``with_weights=False``: all but the model and the optimizer, which a sharded job saves
        through DCP)."""
        self.gns.publish()
        if self._tensorboard is not None:  # the scalars so far reach the disk with the checkpoint
            self._tensorboard.checkpoint(self)
        state: dict[str, Any] = {
            "gns": self.gns.state_dict(),
            "progress": self.progress.state_dict(),
            "profile": self.profile.state_dict(),
            "init_batch_size": self._init_batch_size,
            "sched_ticks": self._scheduler.ticks,
        }
        if with_weights:
            state["model"] = self._model.state_dict()
            state["optimizer"] = self.optimizer.state_dict()
        if self.lr_scheduler is not None:
            state["lr_scheduler"] = self.lr_scheduler.state_dict()
        if self.grad_scaler is not None:
            state["grad_scaler"] = self.grad_scaler.state_dict()
        return state

    def load_adaptive_state_dict(self, state: dict[str, Any], *, with_weights: bool = True) -> None:
        if with_weights:
            self._model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
        self.gns.load_state_dict(state["gns"])
        self.progress.load_state_dict(state["progress"])
        self.profile.load_state_dict(state["profile"])
        if state.get("init_batch_size") is not None:
            self._init_batch_size = int(state["init_batch_size"])
        self._scheduler.ticks = int(state.get("sched_ticks", 0))
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


def device_gpu_type(device: torch.device) -> str:
    """The GPU type of ``device`` as GPU feature discovery's node label names it
    (``torch.cuda.get_device_name``: ``NVIDIA A100-SXM4-80GB`` -> ``NVIDIA-A100-SXM4-80GB``);
    "" for a CPU (or a device whose name cannot be read), unless ``ADL_GPU_TYPE`` names the
    type the CPU run stands in for (test clusters without GPUs)."""
    if device.type != "cuda":
        return C.normalize_gpu_type(os.environ.get(C.ENV_GPU_TYPE, ""))
    try:
        return C.normalize_gpu_type(torch.cuda.get_device_name(device))
    except Exception:  # no driver, a device gone: the type is unknown, training goes on
        return ""


class _CheckpointState:
    """Entry of an AdaptiveDataParallel in the job's checkpoint registry."""

    def __init__(self, adp: AdaptiveDataParallel) -> None:
        self._adp = adp
        self.name = adp.name

    def state_dict(self) -> dict[str, Any]:
        return self._adp.adaptive_state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._adp.load_adaptive_state_dict(state)
