"""Per-job speedup lookups for the policy's inner loop: dict hits, filled by few vector calls."""

from __future__ import annotations

import numpy as np

from adl.sched.types import SpeedupFn


class SpeedupTable:
    """Speedups of one job, filled lazily in contiguous vectorized chunks.

    Replica counts are tabulated at their tightest packing (``ceil(K / per_node)`` nodes) in
    chunks that double, so a job holding 2 GPUs costs a handful of entries, not its whole range;
    any other (nodes, replicas) is computed on demand and remembered.
    """

    __slots__ = ("covered", "fn", "per_node", "values")

    def __init__(self, fn: SpeedupFn, per_node: int) -> None:
        self.fn = fn
        self.per_node = max(per_node, 1)
        self.values: dict[tuple[int, int], float] = {}
        self.covered = 0  # every K <= covered is tabulated at its tightest packing

    def get(self, nodes: int, replicas: int, cap: int) -> float:
        if replicas <= 0:
            return 0.0
        key = (nodes, replicas)
        value = self.values.get(key)
        if value is not None:
            return value
        tight = nodes == -(-replicas // self.per_node)
        if tight and self.covered < replicas <= 2 * self.covered + 8:
            self._extend(min(max(replicas, 2 * self.covered, 8), max(cap, replicas)))
            return self.values[key]
        value = float(np.asarray(self.fn(nodes, replicas), dtype=np.float64).reshape(-1)[0])
        self.values[key] = value
        return value

    def _extend(self, upto: int) -> None:
        ks = np.arange(self.covered + 1, upto + 1)
        ns = -(-ks // self.per_node)
        values = np.asarray(self.fn(ns, ks), dtype=np.float64).reshape(-1)
        self.values.update(
            zip(zip(ns.tolist(), ks.tolist(), strict=True), values.tolist(), strict=True)
        )
        self.covered = upto
