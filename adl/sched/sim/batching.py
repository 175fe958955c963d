"""How a job with a fixed global batch splits it over its replicas (pure arithmetic)."""

from __future__ import annotations

import math
from typing import NamedTuple

_EPS = 1e-8  # tolerance so exact divisions do not round up


class BatchConfig(NamedTuple):
    """Per-GPU micro-batch and extra accumulation micro-steps per optimizer step."""

    local_bsz: int
    accum_steps: int

    def global_batch(self, replicas: int) -> int:
        return replicas * self.local_bsz * (self.accum_steps + 1)


def split_batch(
    batch_size: int,
    replicas: int,
    *,
    max_local_bsz: int,
    init_batch_size: int,
    max_batch_size: int,
) -> BatchConfig:
    """Split ``batch_size`` evenly over ``replicas``, accumulating when a GPU's share exceeds
    the micro-batch maximum.

    A single replica running above B0 always accumulates at least once: as in the published
    runs, its gradient statistics need two micro-batches per step (the noise estimate of one
    replica comes from the spread between micro-batches). The micro-batch is finally capped
    so the global batch never exceeds ``max_batch_size``.
    """
    if replicas < 1:
        raise ValueError("need at least one replica")
    share = math.ceil(batch_size / replicas - _EPS)
    accum = math.ceil(share / max_local_bsz - _EPS) - 1
    if replicas == 1 and batch_size > init_batch_size:
        accum = max(1, accum)
    local = math.ceil(share / (accum + 1) - _EPS)
    local = min(local, int(max_batch_size / (replicas * (accum + 1))))
    return BatchConfig(max(local, 1), accum)
