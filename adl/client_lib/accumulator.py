"""Metrics that sum across replicas and survive restarts.

Each replica adds to its own running sums (``acc["loss"] += x``); :meth:`Accumulator.synchronized`
(a collective: every rank enters it) folds every replica's additions into a job-wide total that is
identical on all ranks. Totals are part of the checkpoint; pending additions are folded in before
it is written, so nothing counted before a restart is lost or counted twice.
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist

from adl.client_lib.context import JobContext
from adl.client_lib.env import context


def _distributed(ctx: JobContext) -> bool:
    return ctx.world_size > 1 and dist.is_initialized()


def _all_keys(keys: list[str], group: Any | None, world: int) -> list[str]:
    """The union of every rank's keys, sorted (encoded as bytes: no pickling)."""
    blob = "\0".join(sorted(keys)).encode()
    size = torch.tensor([len(blob)], dtype=torch.int64)
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(sizes, size, group=group)
    longest = int(max(s.item() for s in sizes))
    buf = torch.zeros(longest, dtype=torch.uint8)
    if blob:
        buf[: len(blob)] = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
    bufs = [torch.zeros(longest, dtype=torch.uint8) for _ in range(world)]
    dist.all_gather(bufs, buf, group=group)
    union: set[str] = set()
    for b, n in zip(bufs, sizes, strict=True):
        text = bytes(b[: int(n.item())].tolist()).decode()
        union.update(k for k in text.split("\0") if k)
    return sorted(union)


class Accumulator(MutableMapping[str, float]):
    """A dict of job-wide sums; read ``acc[k]`` for this replica's view (total + own additions)."""

    _count = 0

    def __init__(self, name: str | None = None) -> None:
        if name is None:
            name = f"adl.accumulator.{Accumulator._count}"
            Accumulator._count += 1
        self.name = name
        self._total: dict[str, float] = {}
        self._local: dict[str, float] = {}
        self._ctx = context()
        self._ctx.register(self)

    # ------------------------------------------------------------------ mapping

    def __getitem__(self, key: str) -> float:
        """Missing keys read as 0.0 (like ``collections.Counter``), so ``acc[k] += x`` works."""
        return self._total.get(key, 0.0) + self._local.get(key, 0.0)

    def __contains__(self, key: object) -> bool:
        return key in self._total or key in self._local

    def __setitem__(self, key: str, value: float) -> None:
        """Record an assignment as an addition, so ``acc[k] += x`` adds x on this replica."""
        self._local[key] = float(value) - self._total.get(key, 0.0)

    def __delitem__(self, key: str) -> None:
        if key not in self._total and key not in self._local:
            raise KeyError(key)
        self._total.pop(key, None)
        self._local.pop(key, None)

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(set(self._total) | set(self._local)))

    def __len__(self) -> int:
        return len(set(self._total) | set(self._local))

    def update_sums(self, values: dict[str, float]) -> None:
        """Add several values at once."""
        for key, value in values.items():
            self._local[key] = self._local.get(key, 0.0) + float(value)

    # ------------------------------------------------------------------ collective

    def sync(self) -> dict[str, float]:
        """Collective: fold every replica's additions into the totals; return the totals."""
        ctx = self._ctx
        if _distributed(ctx):
            group = ctx.cpu_group
            keys = _all_keys(list(self), group, ctx.world_size)
            delta = torch.tensor([self._local.get(k, 0.0) for k in keys], dtype=torch.float64)
            dist.all_reduce(delta, group=group)
            for key, value in zip(keys, delta.tolist(), strict=True):
                self._total[key] = self._total.get(key, 0.0) + value
        else:
            for key, value in self._local.items():
                self._total[key] = self._total.get(key, 0.0) + value
        self._local.clear()
        return dict(self._total)

    @contextmanager
    def synchronized(self) -> Iterator[Accumulator]:
        """Collective: inside the block, every rank reads the same job-wide totals."""
        self.sync()
        yield self

    def reset(self) -> None:
        """Forget every value (call on every rank, e.g. at the start of an epoch)."""
        self._total.clear()
        self._local.clear()

    # ------------------------------------------------------------------ checkpoint

    def prepare_checkpoint(self) -> None:
        self.sync()

    def state_dict(self) -> dict[str, Any]:
        return {"total": dict(self._total)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._total = {str(k): float(v) for k, v in state["total"].items()}
        self._local.clear()
