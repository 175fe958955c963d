"""Optimism beyond what a job has measured: the policy's exploration prior.

A job's throughput model is fitted to the configurations it has run. Beyond its largest profiled
replica count the fitted growth of gradient-sync time with replicas ("retrogression") is an
extrapolation, often from one or two points, and a pessimistic one locks the job out of the
configurations that would prove it wrong. So for ``K`` above the profiled count the policy values
the job as if sync time stopped growing where it was last measured (compute still scales, the
batch-size efficiency is still modelled). The job only ever gets ``2 x`` its profiled count (the
ramp cap), measures the truth there, and its next model corrects any over-estimate.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from adl.sched.goodput import GoodputFunction
from adl.sched.speedup import SpeedupFunction
from adl.sched.types import SpeedupFn


class OptimisticSpeedup:
    """``speedup(N, K)`` of a :class:`SpeedupFunction`, with sync time frozen above ``profiled``."""

    __slots__ = ("base", "frozen", "profiled")

    def __init__(self, base: SpeedupFunction, profiled: int) -> None:
        self.base = base
        self.profiled = max(int(profiled), 1)
        gf = base.goodput_fn
        p = gf.perf
        extra = max(self.profiled - 2, 0)
        perf = p._replace(
            alpha_r=p.alpha_r + p.beta_r * extra,
            beta_r=0.0,
            alpha_n=p.alpha_n + p.beta_n * extra,
            beta_n=0.0,
        )
        self.frozen = GoodputFunction(perf, gf.grad, gf.bounds)

    def __call__(self, num_nodes: ArrayLike, num_replicas: ArrayLike) -> NDArray[np.float64]:
        n_arr, k_arr = np.broadcast_arrays(
            np.asarray(num_nodes, dtype=np.int64), np.asarray(num_replicas, dtype=np.int64)
        )
        out = np.asarray(self.base(n_arr, k_arr), dtype=np.float64).copy()
        above = k_arr > self.profiled
        if np.any(above):
            good = self.frozen.optimize(np.maximum(n_arr[above], 1), k_arr[above]).goodput
            out[above] = np.maximum(out[above], good / self.base.base_goodput)
        return out


def explorative(fn: SpeedupFn, profiled: int) -> SpeedupFn:
    """The speedup the policy plans with: optimistic above ``profiled`` for fitted models."""
    if isinstance(fn, SpeedupFunction) and profiled > 0:
        return OptimisticSpeedup(fn, profiled)
    return fn
