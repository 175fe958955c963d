"""Trace truth as a speedup function: what a policy would see if jobs knew everything.

Diagnostic only (``SimConfig(oracle_info=True)``): it answers "how much of the gap to the
physical limit is the jobs' learning (profiles, fitted models, the ramp) and how much is the
policy itself?" by handing the policy each job's true best goodput per (nodes, replicas), with
batch size and accumulation re-picked over the traces, and its true remaining work.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from adl.sched.sim.batching import split_batch
from adl.sched.sim.traces import AppTrace


def spread(nodes: int, replicas: int) -> tuple[int, ...]:
    """``replicas`` over ``nodes`` as evenly as possible (GPUs per node)."""
    nodes = max(min(nodes, replicas), 1)
    base, extra = divmod(replicas, nodes)
    return tuple(base + (1 if i < extra else 0) for i in range(nodes))


class TrueGoodput:
    """Best true goodput of one application during one epoch, cached per (nodes, replicas)."""

    #: micro-batches tried between the application's bounds (geometric)
    MICRO_BATCHES = 12

    def __init__(self, app: AppTrace, epoch: int, fixed_batch: int | None = None) -> None:
        self.app, self.epoch, self.fixed_batch = app, epoch, fixed_batch
        self._cache: dict[tuple[int, int], float] = {}

    def __call__(self, nodes: int, replicas: int) -> float:
        key = (nodes, replicas)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._cache[key] = self._best(nodes, replicas)
        return hit

    def _best(self, nodes: int, replicas: int) -> float:
        app, placement = self.app, spread(nodes, replicas)
        if self.fixed_batch:  # split as the simulated job splits its fixed batch
            m, s = split_batch(
                self.fixed_batch,
                replicas,
                max_local_bsz=app.max_local_bsz,
                init_batch_size=app.init_batch_size,
                max_batch_size=app.max_batch_size,
            )
            return self.app.rate(placement, m, s, self.epoch)
        lo_b, hi_b = float(app.init_batch_size), float(app.max_batch_size)
        micro = np.unique(
            np.round(np.geomspace(app.min_local_bsz, app.max_local_bsz, self.MICRO_BATCHES))
        ).tolist()
        best = 0.0
        for m in micro:
            for s in range(64):
                batch = replicas * m * (s + 1)
                if batch > hi_b + 1e-9:
                    break
                if batch >= lo_b - 1e-9:
                    best = max(best, self.app.rate(placement, m, s, self.epoch))
        return best


class TrueSpeedup:
    """``SpeedupFn`` of the true goodput relative to one replica (vectorized like a job's own)."""

    def __init__(self, goodput: TrueGoodput) -> None:
        self.goodput = goodput
        self.base_goodput = goodput(1, 1)

    def __call__(self, num_nodes: ArrayLike, num_replicas: ArrayLike) -> NDArray[np.float64]:
        n, k = np.broadcast_arrays(
            np.asarray(num_nodes, dtype=np.int64), np.asarray(num_replicas, dtype=np.int64)
        )
        flat = [
            self.goodput(max(int(a), 1), int(b)) / self.base_goodput if b > 0 else 0.0
            for a, b in zip(n.ravel().tolist(), k.ravel().tolist(), strict=True)
        ]
        return np.asarray(flat, dtype=np.float64).reshape(n.shape)
