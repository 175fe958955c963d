"""Speedup of a job at (nodes, replicas) relative to one replica, with a per-config cache."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from adl.sched.goodput import GoodputFunction


class SpeedupFunction:
    """``speedup(N, K) = best goodput at (N, K) / best goodput on one replica``.

    Each distinct (N, K) is optimized once (batch size and accumulation re-picked for it) and
    cached, so a policy can call this thousands of times per round.
    """

    def __init__(self, goodput_fn: GoodputFunction) -> None:
        self.goodput_fn = goodput_fn
        self._cache: dict[tuple[int, int], float] = {}
        base = float(goodput_fn.optimize(1, 1).goodput[0])
        if base <= 0.0:
            # One replica cannot reach B0 (micro-batch too small and no accumulation):
            # normalize by the smallest single-node replica count that can.
            ks = np.arange(1, 65)
            good = goodput_fn.optimize(np.ones_like(ks), ks).goodput
            feasible = np.flatnonzero(good > 0)
            base = float(good[feasible[0]] / ks[feasible[0]]) if len(feasible) else 1.0
        self.base_goodput = base

    def __call__(self, num_nodes: ArrayLike, num_replicas: ArrayLike) -> NDArray[np.float64]:
        n_arr, k_arr = np.broadcast_arrays(
            np.asarray(num_nodes, dtype=np.int64), np.asarray(num_replicas, dtype=np.int64)
        )
        flat_n, flat_k = n_arr.ravel(), k_arr.ravel()
        keys = list(zip(flat_n.tolist(), flat_k.tolist(), strict=True))
        missing = sorted({key for key in keys if key not in self._cache and key[1] > 0})
        if missing:
            mn = np.array([key[0] for key in missing])
            mk = np.array([key[1] for key in missing])
            good = self.goodput_fn.optimize(np.maximum(mn, 1), mk).goodput / self.base_goodput
            self._cache.update(zip(missing, good.tolist(), strict=True))
        out = np.array([self._cache.get(key, 0.0) for key in keys], dtype=np.float64)
        return out.reshape(n_arr.shape)
