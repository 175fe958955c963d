"""Elastic data loading: exact mid-epoch resumption at any world size, adaptive batch size.

Each epoch is one deterministic order of the dataset (a permutation seeded by ``seed + epoch``
when shuffling). The only position kept is the *global* number of samples consumed in the epoch,
so the remaining samples can be re-partitioned over any number of replicas after a restart and
every sample is still seen exactly once per epoch. A global micro-batch takes the next
``replicas * local_bsz`` samples of the order, replica ``r`` the ``r``-th contiguous slice; the
tail of an epoch is split as evenly as possible (a tail smaller than the replica count is
dropped, since every replica must take a step).

The batch configuration (micro-batch per replica, accumulation steps) changes only when the
loader starts an epoch or after a restart, and only if the job's goodput model predicts at least
``min_improvement`` more goodput; rank 0 decides and broadcasts so replicas never disagree.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, IterableDataset

from adl.client_lib.context import JobContext
from adl.client_lib.env import context
from adl.client_lib.epoch import STATE_NAME as EPOCH_STATE
from adl.client_lib.epoch import EpochState
from adl.client_lib.preemption import act_at_step_boundary
from adl.sched.goodput import BatchBounds

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- pure partitioning


def epoch_order(size: int, epoch: int, shuffle: bool, seed: int) -> list[int]:
    """The order in which an epoch visits the dataset; identical on every rank and restart."""
    if not shuffle:
        return list(range(size))
    gen = torch.Generator()
    gen.manual_seed(seed + epoch)
    return torch.randperm(size, generator=gen).tolist()


def split_evenly(count: int, parts: int) -> list[int]:
    """``count`` items over ``parts`` shares differing by at most one (larger shares first)."""
    base, extra = divmod(count, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


@dataclass(frozen=True)
class MicroBatch:
    """One global micro-batch: where it starts in the epoch order and each replica's share."""

    offset: int
    shares: tuple[int, ...]

    @property
    def size(self) -> int:
        return sum(self.shares)

    def span(self, rank: int) -> tuple[int, int]:
        start = self.offset + sum(self.shares[:rank])
        return start, start + self.shares[rank]


def plan_micro_batches(
    size: int,
    offset: int,
    replicas: int,
    local_bsz: int,
    drop_last: bool = False,
    micro_batch: int | None = None,
) -> list[MicroBatch]:
    """Global micro-batches that cover positions ``[offset, size)`` of the epoch order.

    Each takes ``replicas * local_bsz`` samples, or ``micro_batch`` (at least ``replicas``)
    when given, split over the replicas in shares that differ by at most one.
    """
    if replicas < 1 or local_bsz < 1:
        raise ValueError("replicas and local_bsz must be >= 1")
    if micro_batch is not None and micro_batch < replicas:
        raise ValueError(f"micro_batch must be >= replicas ({replicas}), got {micro_batch}")
    plan: list[MicroBatch] = []
    full = micro_batch or replicas * local_bsz
    pos = offset
    while pos < size:
        count = min(full, size - pos)
        if count < full and (drop_last or count < replicas):
            break
        plan.append(MicroBatch(pos, tuple(split_evenly(count, replicas))))
        pos += count
    return plan


def share_weights(
    plan: Sequence[MicroBatch], per_step: int, rank: int, replicas: int
) -> list[float]:
    """For each micro-batch of ``plan``, the weight of ``rank``'s share in its optimizer step
    (the step: ``per_step`` consecutive micro-batches, fewer at the end).

    The gradients are averaged over the replicas and the micro-batches with equal weights, each
    a mean over its share; a share of ``n`` samples in a step of ``N`` samples over ``replicas x
    micro`` shares must count ``n * replicas * micro / N`` times for the update to be the mean
    over every sample of the step, as on one process. 1.0 wherever the shares are equal; they
    differ at an epoch's uneven tail, and where B0 is split exactly (``exact_batch``)."""
    out: list[float] = []
    for start in range(0, len(plan), per_step):
        step = plan[start : start + per_step]
        total = sum(mb.size for mb in step)
        for mb in step:
            out.append(mb.shares[rank] * replicas * len(step) / total)
    return out


def default_config(bounds: BatchBounds, replicas: int) -> tuple[int, int]:
    """(local_bsz, accum_steps) closest to B0 at this replica count, within the bounds."""
    lo, hi = bounds.local_bsz_bounds
    per_replica = math.ceil(bounds.init_batch_size / replicas)
    accum = 0
    if per_replica > hi and bounds.gradient_accumulation:
        accum = min(math.ceil(per_replica / hi) - 1, bounds.max_accum_steps)
    local = math.ceil(bounds.init_batch_size / (replicas * (accum + 1)))
    return max(lo, min(hi, local)), accum


def choose_config(
    goodput_fn: Any | None,
    bounds: BatchBounds,
    num_nodes: int,
    replicas: int,
    current: tuple[int, int] | None,
    min_improvement: float,
) -> tuple[int, int]:
    """The configuration to use for the next epoch (pure; see the module docstring)."""
    fallback = default_config(bounds, replicas)
    if current is not None:
        local, accum = current
        batch = replicas * local * (accum + 1)
        lo, hi = bounds.local_bsz_bounds
        feasible = lo <= local <= hi and batch <= max(bounds.max_batch_size, replicas * lo)
        if not feasible or (accum > 0 and not bounds.gradient_accumulation):
            current = None
    base = current or fallback
    if goodput_fn is None:
        return base
    best = goodput_fn.optimize(num_nodes, replicas)
    best_good = float(best.goodput[0])
    if best_good <= 0.0:
        return base
    now = float(goodput_fn.evaluate(num_nodes, replicas, base[0], base[1]))
    if best_good > now * (1.0 + min_improvement):
        return int(best.local_bsz[0]), int(best.accum_steps[0])
    return base


def warn_if_unsharded(ctx: Any, world_size: int) -> None:
    """Warn once when several replicas train on batches no AdaptiveDataLoader handed out.

    Called by AdaptiveDataParallel for such a batch. A plain ``torch.utils.data.DataLoader``
    gives every replica the whole dataset: each epoch trains on it ``world_size`` times, the
    batch size and the learning rate are off, and a restart replays the epoch from its start.
    """
    if world_size < 2 or getattr(ctx, "loader_iterated", True):
        return
    if getattr(ctx, "warned_unsharded", True):
        return
    ctx.warned_unsharded = True
    warnings.warn(
        f"training with {world_size} replicas on batches that no adl.AdaptiveDataLoader handed "
        f"out: a plain torch DataLoader gives every replica the whole dataset (each sample is "
        f"trained on {world_size} times per epoch) and does not resume after a restart. Use "
        f"adl.AdaptiveDataLoader(dataset, batch_size=..., shuffle=...) instead",
        UserWarning,
        stacklevel=6,
    )


# ---------------------------------------------------------------------------- the loader


class _LoaderState:
    """What the checkpoint keeps of a loader: epoch, global offset, batch configuration."""

    def __init__(self, loader: AdaptiveDataLoader, name: str) -> None:
        self._loader = loader
        self.name = name

    def state_dict(self) -> dict[str, Any]:
        lo = self._loader
        return {
            "epoch": lo._epoch,
            "offset": lo._offset,
            "size": len(lo.dataset),
            "local_bsz": lo._config[0] if lo._config else None,
            "accum_steps": lo._config[1] if lo._config else None,
            "world_size": lo._ctx.world_size,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        lo = self._loader
        if int(state["size"]) != len(lo.dataset):
            log.warning("dataset size changed since the checkpoint; restarting the epoch")
            lo._epoch, lo._offset = int(state["epoch"]), 0
            return
        lo._epoch, lo._offset = int(state["epoch"]), int(state["offset"])
        if state.get("local_bsz") is not None:
            lo._config = (int(state["local_bsz"]), int(state["accum_steps"] or 0))
        lo._restored_world = int(state.get("world_size") or 0)


class AdaptiveDataLoader:
    """A DataLoader over an elastic sampler; ``batch_size`` is the job's global batch B0.

    Without :meth:`autoscale_batch_size` each replica takes ``ceil(B0 / replicas)`` samples per
    step. Each iteration is one pass over the current epoch (inside ``remaining_epochs_until``
    that loop's epoch; iterating again in the same epoch makes another pass). A SIGTERM or stop
    request makes every rank stop at the same step boundary, checkpoint and exit 143 from inside
    the iteration.
    """

    _count = 0
    #: With a fixed batch (no :meth:`autoscale_batch_size`): each global micro-batch is exactly
    #: B0 samples, split over the replicas in shares that differ by at most one, instead of
    #: ``ceil(B0 / replicas)`` samples on every replica (more than B0 when the replicas do not
    #: divide it). The gradient average over the replicas is unweighted, so a training loop
    #: that sets this weighs each replica's mean loss by its share (``AdaptiveTrainer`` does).
    exact_batch = False

    def __init__(
        self,
        dataset: Dataset[Any],
        batch_size: int = 1,
        shuffle: bool = False,
        *,
        seed: int = 0,
        drop_last: bool = False,
        name: str | None = None,
        min_improvement: float = 0.05,
        num_workers: int = 0,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        pin_memory: bool = False,
        **loader_kwargs: Any,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if isinstance(dataset, IterableDataset) or not hasattr(dataset, "__len__"):
            raise TypeError(
                f"AdaptiveDataLoader needs a map-style dataset (__len__ and __getitem__), not "
                f"{type(dataset).__name__}: samples are split over the replicas and resumed by "
                f"index, which an iterable dataset cannot do"
            )
        self.dataset = dataset
        self._size: int = len(dataset)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.drop_last = drop_last
        self._warned_empty = False
        self.min_improvement = min_improvement
        self._loader_kwargs: dict[str, Any] = dict(
            loader_kwargs, num_workers=num_workers, pin_memory=pin_memory
        )
        if collate_fn is not None:
            self._loader_kwargs["collate_fn"] = collate_fn
        self._bounds: BatchBounds | None = None
        self._epoch = 0
        self._offset = 0
        self._config: tuple[int, int] | None = None
        self._restored_world = 0
        self._decided = False
        self._passed_here = False  # a pass of the current epoch ended in this process
        self._iter_len: int | None = None  # batches of the iteration under way, for __len__
        self._ctx: JobContext = context()
        if self._ctx.init_batch_size is None:
            self._ctx.init_batch_size = batch_size
        if self._ctx.dataset_size is None:
            self._ctx.dataset_size = self._size
        if name is None:
            name = f"adl.loader.{AdaptiveDataLoader._count}"
            AdaptiveDataLoader._count += 1
        self._name = name
        previous = self._ctx.states.get(name)
        if isinstance(previous, _LoaderState):
            # The same loader built again (say, in a validation function called every epoch):
            # it takes the old one's place and goes on from where that one stopped.
            self._ctx.unregister(name)
            _LoaderState(self, name).load_state_dict(previous.state_dict())
            self._passed_here = previous._loader._passed_here
        self._ctx.register(_LoaderState(self, name))

    # ------------------------------------------------------------------ configuration

    def autoscale_batch_size(
        self,
        max_batch_size: int,
        local_bsz_bounds: tuple[int, int] | None = None,
        gradient_accumulation: bool = True,
    ) -> None:
        """Let the library pick the batch size in [B0, max_batch_size] for the best goodput."""
        lo, hi = local_bsz_bounds or (1, max_batch_size)
        self._bounds = BatchBounds(
            init_batch_size=self.batch_size,
            max_batch_size=max_batch_size,
            local_bsz_bounds=(lo, hi),
            gradient_accumulation=gradient_accumulation,
        )
        self._ctx.batch_bounds = self._bounds

    @property
    def bounds(self) -> BatchBounds:
        if self._bounds is not None:
            return self._bounds
        b0 = self.batch_size
        return BatchBounds(b0, b0, (1, b0), gradient_accumulation=False)

    @property
    def current_local_bsz(self) -> int:
        return self._current_config()[0]

    @property
    def accumulation_steps(self) -> int:
        return self._current_config()[1]

    @property
    def current_batch_size(self) -> int:
        local, accum = self._current_config()
        return self.micro_batch_samples(local) * (accum + 1)

    def micro_batch_samples(self, local: int, replicas: int | None = None) -> int:
        """Samples of one global micro-batch at micro-batch ``local`` over ``replicas`` (the
        job's now, by default; see ``exact_batch``)."""
        replicas = replicas or self._ctx.world_size
        if self.exact_batch and self._bounds is None and self.batch_size >= replicas:
            return self.batch_size
        return replicas * local

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def offset(self) -> int:
        """Samples of the current epoch already consumed by the whole job."""
        return self._offset

    def _current_config(self) -> tuple[int, int]:
        return self._config or default_config(self.bounds, self._ctx.world_size)

    def _decide(self) -> None:
        """Pick the configuration on rank 0 and share it (start of an epoch or a run)."""
        ctx = self._ctx
        before = None
        if self._config is not None:
            before = (self._restored_world or ctx.world_size, *self._config)
        if self._bounds is None:
            # Fixed batch: B0 split over the replicas; a restored split from another world size
            # does not apply.
            keep = self._config is not None and self._restored_world == ctx.world_size
            if not keep:
                self._config = default_config(self.bounds, ctx.world_size)
        else:
            config = choose_config(
                ctx.goodput_fn(self._bounds) if ctx.rank == 0 else None,
                self._bounds,
                ctx.num_nodes,
                ctx.world_size,
                self._config if self._restored_world == ctx.world_size else None,
                self.min_improvement,
            )
            if ctx.world_size > 1 and dist.is_initialized():
                buf = torch.tensor(config, dtype=torch.int64)
                dist.broadcast(buf, src=0, group=ctx.cpu_group)
                config = (int(buf[0]), int(buf[1]))
            self._config = config
        self._restored_world = ctx.world_size
        if ctx.training_loader is None or ctx.training_loader is self:
            # another loader's batch (validation) is neither the job's nor worth a log line
            ctx.local_bsz, ctx.accum_steps = self._current_config()
            self._log_config(before)

    def _log_config(self, before: tuple[int, int, int] | None) -> None:
        """One INFO line on rank 0 when the batch configuration (and with it the LR) changes.

        ``before`` is (replicas, local batch, accumulation steps) of the last configuration, the
        checkpoint's after a restart. The LR scales are those AdaptiveDataParallel applies at
        the old and new batch sizes with its current statistics (between such changes the LR
        scale only drifts as the statistics are refined, which is not logged).
        """
        ctx = self._ctx
        local, accum = self._current_config()
        after = (ctx.world_size, local, accum)
        if ctx.rank != 0 or after == before:
            return
        batch = self.micro_batch_samples(local) * (accum + 1)
        old_batch = None
        if before is not None:
            old_batch = self.micro_batch_samples(before[1], before[0]) * (before[2] + 1)
        provider = ctx.lr_scale_provider
        lr = old_lr = None
        if provider is not None:
            try:
                lr = provider(batch)
                old_lr = provider(old_batch) if old_batch else None
            except Exception:  # statistics not usable yet: leave the LR out of the line
                log.debug("no LR scale for the batch-size log line", exc_info=True)
        sizes = f"{old_batch} -> {batch}" if old_batch else f"{batch}"
        line = (
            f"adl: batch size {sizes} (local {local} x {ctx.world_size} replicas, "
            f"accumulation {accum})"
        )
        if lr is not None:
            line += f", lr scale {old_lr:.2f} -> {lr:.2f}" if old_lr else f", lr scale {lr:.2f}"
        log.info("%s", line)

    # ------------------------------------------------------------------ iteration

    def _next_position(self) -> tuple[int, int]:
        """(epoch, offset) where the next iteration starts.

        Inside ``remaining_epochs_until`` the epoch is the loop's. A pass that ended in this
        process is followed by a new one (validating several times per epoch); one that ended
        before a restart is not run again (the job stopped after it).
        """
        state = self._ctx.states.get(EPOCH_STATE)
        done = self._offset >= self._size
        if isinstance(state, EpochState) and state.active:
            if state.epoch != self._epoch or (done and self._passed_here):
                return state.epoch, 0
            return self._epoch, self._offset
        return (self._epoch + 1, 0) if done else (self._epoch, self._offset)

    def _sync_epoch(self) -> bool:
        """Move to where the next iteration starts; True when a new pass starts."""
        self._epoch, self._offset = self._next_position()
        self._passed_here = False
        self._check_epoch_loop()
        return self._offset == 0

    def _check_epoch_loop(self) -> None:
        """Warn (once per job) about training epochs looped by hand, ``for epoch in range(n)``.

        Such a loop starts again at 0 after every restart while this loader goes on with the
        epoch it stopped in, so the job trains more epochs than asked and its epoch numbers
        mean nothing. Seen as a training pass (gradients enabled: not a validation pass) of an
        epoch after the first, outside ``remaining_epochs_until``; after a restart that is the
        first pass already.
        """
        ctx = self._ctx
        state = ctx.state(EPOCH_STATE)
        if self._epoch == 0 or not torch.is_grad_enabled():
            return
        if isinstance(state, EpochState) and state.active:
            return
        if ctx.manual_epoch_loop:
            return
        ctx.manual_epoch_loop = True
        warnings.warn(
            f"AdaptiveDataLoader {self._name} starts training epoch {self._epoch} outside "
            f"adl.remaining_epochs_until(): a hand-written epoch loop (for epoch in range(n)) "
            f"starts again at epoch 0 after every restart, training more epochs than asked. "
            f"Loop with `for epoch in adl.remaining_epochs_until(n):` instead",
            UserWarning,
            stacklevel=4,
        )

    def _indices(self, plan: Sequence[MicroBatch], order: list[int]) -> list[list[int]]:
        rank = self._ctx.rank
        out = []
        for mb in plan:
            start, end = mb.span(rank)
            out.append(order[start:end])
        return out

    def __iter__(self) -> Iterator[Any]:
        ctx = self._ctx
        ctx.loader_iterated = True
        new_epoch = self._sync_epoch()
        if new_epoch or not self._decided:
            self._decide()
            self._decided = True
        local, accum = self._current_config()
        size = self._size
        full = self.micro_batch_samples(local)
        plan = plan_micro_batches(size, self._offset, ctx.world_size, local, self.drop_last, full)
        self._iter_len = len(plan)
        if not plan and self._offset == 0 and size > 0:
            self._warn_empty(size, ctx.world_size, local)
        order = epoch_order(size, self._epoch, self.shuffle, self.seed)
        batches = self._indices(plan, order)
        loader = DataLoader(self.dataset, batch_sampler=batches, **self._loader_kwargs)
        monitor = ctx.preemption
        per_step = accum + 1
        last = len(plan) - 1
        # a loader iterated inside another's loop (validation in a training step) hands the
        # outer loader's counts back when it is done: the step's forward needs them
        outer = (
            ctx.feeding_loader,
            ctx.global_micro_batch,
            ctx.local_micro_batch,
            ctx.share_weight,
            ctx.feeding_path,
        )
        rank, replicas = ctx.rank, ctx.world_size
        weights = share_weights(plan, per_step, rank, replicas)
        try:
            for i, (mb, batch) in enumerate(zip(plan, loader, strict=True)):
                if i % per_step == 0 and monitor is not None:
                    act_at_step_boundary(ctx)  # a stop, or a periodic checkpoint
                ctx.is_sync_step = (i % per_step == per_step - 1) or i == last
                # Counted as consumed once handed out: a checkpoint taken in the loop body (after
                # the step) or after a ``break`` must not replay this batch.
                self._offset = mb.offset + mb.size
                ctx.feeding_loader, ctx.global_micro_batch = self, mb.size
                ctx.local_micro_batch, ctx.share_weight = mb.shares[rank], weights[i]
                ctx.feeding_path = (*outer[4], (id(self), mb.offset))
                yield batch
        finally:
            (
                ctx.feeding_loader,
                ctx.global_micro_batch,
                ctx.local_micro_batch,
                ctx.share_weight,
                ctx.feeding_path,
            ) = outer
            self._iter_len = None
        self._offset = size  # the epoch is done (a dropped tail counts as done)
        self._passed_here = True
        ctx.is_sync_step = True

    def _warn_empty(self, size: int, replicas: int, local: int) -> None:
        """A whole epoch without a batch trains on nothing, silently: say so once."""
        if self._warned_empty:
            return
        self._warned_empty = True
        why = (
            f"drop_last and fewer than {replicas * local} samples"
            if self.drop_last
            else f"fewer samples than the {replicas} replicas"
        )
        log.warning(
            "AdaptiveDataLoader %s: an epoch of %d samples gives no batch (%s); the loop over it "
            "does nothing",
            self._name,
            size,
            why,
        )

    def __len__(self) -> int:
        """The number of batches (micro-batches, with gradient accumulation) an iteration yields.

        While iterating: that iteration's whole count, fixed at its start, so ``i / len(loader)``
        and progress bars reach exactly 100% (after a restart mid-epoch, the batches left in the
        epoch). Otherwise: what the next iteration would yield with the current batch
        configuration (it may change when that iteration starts a new epoch).
        """
        if self._iter_len is not None:
            return self._iter_len
        local, _ = self._current_config()
        if self._config is not None and self._restored_world != self._ctx.world_size:
            # restored from another world size: the next iteration drops that micro-batch for
            # B0 split over these replicas (with autoscaling, rank 0 may then choose another)
            local, _ = default_config(self.bounds, self._ctx.world_size)
        _, offset = self._next_position()
        size = self._size
        full = self.micro_batch_samples(local)
        plan = plan_micro_batches(size, offset, self._ctx.world_size, local, self.drop_last, full)
        return len(plan)
