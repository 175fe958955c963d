"""Pieces both framework integrations share (no framework imported here)."""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class BatchSettings:
    """How adl may size the batch: B0, and optionally the range adl may grow it in.

    ``max_batch_size`` None keeps the global batch at B0 at every world size (the micro-batch is
    B0 split over the replicas); a value lets the data loader pick the batch for goodput.
    """

    init_batch_size: int
    max_batch_size: int | None = None
    local_bsz_bounds: tuple[int, int] | None = None
    gradient_accumulation: bool = True

    def __post_init__(self) -> None:
        if not 1 <= self.init_batch_size <= 1 << 24:
            raise ValueError(f"init_batch_size must be in [1, 2**24], got {self.init_batch_size}")
        if self.max_batch_size is not None and not (
            self.init_batch_size <= self.max_batch_size <= 1 << 24
        ):
            raise ValueError(
                f"max_batch_size must be in [init_batch_size, 2**24], got {self.max_batch_size}"
            )
        if self.local_bsz_bounds is not None:
            lo, hi = self.local_bsz_bounds
            if not 1 <= lo <= hi:
                raise ValueError(f"local_bsz_bounds must satisfy 1 <= lo <= hi, got {lo, hi}")

    def apply(self, loader: Any) -> None:
        """Turn on batch-size adaptation on an ``adl.AdaptiveDataLoader`` when asked for."""
        if self.max_batch_size is not None:
            loader.autoscale_batch_size(
                self.max_batch_size,
                local_bsz_bounds=self.local_bsz_bounds,
                gradient_accumulation=self.gradient_accumulation,
            )


def batch_length(batch: Any) -> int:
    """Samples in a batch: the first dimension of its first tensor (dicts, tuples, lists)."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() > 0 else 1
    values: Sequence[Any] = ()
    if isinstance(batch, Mapping):
        values = list(batch.values())
    elif isinstance(batch, (list, tuple)):
        values = batch
    for value in values:
        n = batch_length(value) if isinstance(value, (torch.Tensor, Mapping, list, tuple)) else 0
        if n:
            return n
    return 0


def step_seed(seed: int, step: int, rank: int) -> int:
    """The RNG seed of optimizer step ``step`` on ``rank``.

    Reseeding from (seed, step, rank) at every step, instead of checkpointing each rank's RNG
    state, makes randomness (dropout) a function of where training is: a job resumed at the same
    world size draws the same masks as one that never stopped. At another world size a sample
    lands on another rank, so its mask differs whatever is saved.
    """
    return zlib.crc32(f"{seed}/{step}/{rank}".encode()) & 0x7FFF_FFFF
