"""Goodput model: throughput x statistical efficiency, and the batch-size choice that maximizes it.

Throughput model (per job, fitted to its own measured step times):

- compute time of one micro-batch of ``m`` samples on one replica: ``Tc = alpha_c + beta_c * m``
- gradient sync time for ``K`` replicas: 0 for one replica, ``alpha_r + beta_r * (K - 2)`` when
  all replicas share a node, ``alpha_n + beta_n * (K - 2)`` when they span nodes
- a synchronizing step overlaps compute and sync: ``(Tc^g + Ts^g)^(1/g)``, ``g`` in [1, 10]
- an optimizer step with ``s`` accumulation steps: ``s * Tc + (Tc^g + Ts^g)^(1/g)``

Regimes a job has not measured take optimistic priors so the scheduler lets it explore: no sync
cost before two replicas, within-node values across nodes, and a flat across-node slope
(``beta_n = 0``) until three or more nodes were measured. On two nodes that slope absorbs
per-node contention and extrapolates linearly in ``K`` (on the traces: 58% too slow at 4 nodes,
12% with the flat prior; ``benchmarks/fit_accuracy.py``).

Statistical efficiency (AdaScale): with gradient noise ``var`` (variance of a gradient over a
batch of B0) and signal ``sqr``, a step at batch ``B = S * B0`` is worth
``gain(S) = (var + sqr) / (var / S + sqr)`` steps at B0, so efficiency is ``gain / S``.
Goodput is reported as scale-invariant steps per second, ``gain / step_time``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import scipy.optimize
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]

GAMMA_BOUNDS = (1.0, 10.0)


class PerfParams(NamedTuple):
    """Throughput-model parameters (seconds; ``gamma`` is dimensionless)."""

    alpha_c: float
    beta_c: float
    alpha_n: float
    beta_n: float
    alpha_r: float
    beta_r: float
    gamma: float


class GradParams(NamedTuple):
    """Gradient statistics: ``sqr`` = |true gradient|^2, ``var`` = noise at batch size B0."""

    sqr: float
    var: float

    @property
    def usable(self) -> bool:
        """Whether this estimate may drive a batch-size choice: finite, with a true gradient
        above zero. With ``sqr == 0`` (a noisy estimate clamped at zero) every batch looks
        equally efficient and goodput would always pick the largest: treat it as no estimate."""
        return math.isfinite(self.sqr) and math.isfinite(self.var) and self.sqr > 0.0


def gain(grad: GradParams, scale: ArrayLike) -> FloatArray:
    """Scale-invariant steps one step at ``scale * B0`` is worth (AdaScale gain)."""
    s = np.asarray(scale, dtype=np.float64)
    var, sqr = max(grad.var, 0.0), max(grad.sqr, 0.0)
    if var + sqr <= 0.0:
        return np.ones_like(s)  # no information: assume the batch does not matter
    return (var + sqr) / (var / s + sqr)


def efficiency(grad: GradParams, init_batch_size: float, batch_size: ArrayLike) -> FloatArray:
    """Statistical efficiency of ``batch_size`` relative to B0: 1 at B0, falling with B."""
    scale = np.asarray(batch_size, dtype=np.float64) / init_batch_size
    return gain(grad, scale) / scale


def sync_time(perf: PerfParams, num_nodes: ArrayLike, num_replicas: ArrayLike) -> FloatArray:
    """Gradient all-reduce time per synchronizing step (0 for a single replica)."""
    n = np.asarray(num_nodes, dtype=np.float64)
    k = np.asarray(num_replicas, dtype=np.float64)
    extra = np.maximum(k - 2.0, 0.0)
    within = perf.alpha_r + perf.beta_r * extra
    across = perf.alpha_n + perf.beta_n * extra
    t = np.where(n > 1, across, within)
    return np.where(k > 1, t, 0.0)


def compute_time(perf: PerfParams, local_bsz: ArrayLike) -> FloatArray:
    """Forward+backward time of one micro-batch on one replica."""
    return perf.alpha_c + perf.beta_c * np.asarray(local_bsz, dtype=np.float64)


def overlap(tc: FloatArray, ts: FloatArray, gamma: float | FloatArray) -> FloatArray:
    """``(tc^g + ts^g)^(1/g)`` computed stably (exact when ``ts`` is 0); ``gamma`` may be a
    column, one per row."""
    big = np.maximum(tc, ts)
    small = np.minimum(tc, ts)
    safe = np.where(big > 0, big, 1.0)
    return big * np.power(1.0 + np.power(small / safe, gamma), 1.0 / gamma)


def step_time(
    perf: PerfParams,
    num_nodes: ArrayLike,
    num_replicas: ArrayLike,
    local_bsz: ArrayLike,
    accum_steps: ArrayLike = 0,
) -> FloatArray:
    """Predicted seconds per optimizer step (``accum_steps`` extra micro-batches before sync)."""
    tc = compute_time(perf, local_bsz)
    ts = sync_time(perf, num_nodes, num_replicas)
    return np.asarray(accum_steps, dtype=np.float64) * tc + overlap(tc, ts, perf.gamma)


@dataclass(frozen=True)
class BatchBounds:
    """What the job allows: B0, B_max, micro-batch range, and whether it may accumulate."""

    init_batch_size: int
    max_batch_size: int
    local_bsz_bounds: tuple[int, int]
    gradient_accumulation: bool = True
    max_accum_steps: int = 64

    def __post_init__(self) -> None:
        lo, hi = self.local_bsz_bounds
        if not 1 <= lo <= hi:
            raise ValueError(f"local_bsz_bounds must satisfy 1 <= lo <= hi, got {(lo, hi)}")
        if not 1 <= self.init_batch_size <= self.max_batch_size:
            raise ValueError(
                f"need 1 <= init_batch_size ({self.init_batch_size}) "
                f"<= max_batch_size ({self.max_batch_size})"
            )


class BatchChoice(NamedTuple):
    """Best configuration per (nodes, replicas); goodput 0 where no batch is feasible."""

    goodput: FloatArray
    local_bsz: NDArray[np.int64]
    accum_steps: NDArray[np.int64]


def _micro_batch_grid(lo: int, hi: int, points: int = 64) -> NDArray[np.int64]:
    grid = np.unique(np.round(np.geomspace(lo, hi, num=points)).astype(np.int64))
    return np.unique(np.concatenate([grid, [lo, hi]]))


class GoodputFunction:
    """Goodput of one job for any (nodes, replicas, micro-batch, accumulation), vectorized."""

    def __init__(self, perf: PerfParams, grad: GradParams, bounds: BatchBounds) -> None:
        self.perf = perf
        self.grad = grad
        self.bounds = bounds
        self._mgrid = _micro_batch_grid(*bounds.local_bsz_bounds)

    def evaluate(
        self,
        num_nodes: ArrayLike,
        num_replicas: ArrayLike,
        local_bsz: ArrayLike,
        accum_steps: ArrayLike = 0,
    ) -> FloatArray:
        """Scale-invariant steps per second at exactly this configuration."""
        k = np.asarray(num_replicas, dtype=np.float64)
        m = np.asarray(local_bsz, dtype=np.float64)
        s = np.asarray(accum_steps, dtype=np.float64)
        batch = k * m * (s + 1.0)
        t = step_time(self.perf, num_nodes, num_replicas, local_bsz, accum_steps)
        return gain(self.grad, batch / self.bounds.init_batch_size) / t

    def optimize(self, num_nodes: ArrayLike, num_replicas: ArrayLike) -> BatchChoice:
        """Best micro-batch and accumulation steps for each (nodes, replicas) pair."""
        n = np.atleast_1d(np.asarray(num_nodes, dtype=np.float64))
        k = np.atleast_1d(np.asarray(num_replicas, dtype=np.float64))
        n, k = np.broadcast_arrays(n, k)
        b = self.bounds
        lo = b.local_bsz_bounds[0]
        if b.gradient_accumulation:
            k_min = max(float(np.min(k[k > 0])) if np.any(k > 0) else 1.0, 1.0)
            s_max = int(min(b.max_accum_steps, max(b.max_batch_size // (k_min * lo) - 1, 0)))
        else:
            s_max = 0
        s = np.arange(s_max + 1, dtype=np.float64)[None, :, None]
        kk = k[:, None, None]
        # Candidate micro-batches: a geometric grid, plus the ones that put the global batch
        # exactly on B0 or B_max (where the optimum often lies) for every (K, s).
        lo_m, hi_m = b.local_bsz_bounds
        per = np.maximum(kk * (s + 1.0), 1.0)
        edges = np.concatenate(
            [np.floor(b.max_batch_size / per), np.ceil(b.init_batch_size / per)], axis=2
        )
        shape = (len(k), s_max + 1, len(self._mgrid))
        grid = np.broadcast_to(self._mgrid.astype(np.float64), shape)
        m = np.clip(np.concatenate([grid, edges], axis=2), lo_m, hi_m)
        batch = kk * m * (s + 1.0)
        feasible = (batch >= b.init_batch_size) & (batch <= b.max_batch_size) & (kk > 0)
        t = s * compute_time(self.perf, m) + overlap(
            compute_time(self.perf, m),
            sync_time(self.perf, n, k)[:, None, None],
            self.perf.gamma,
        )
        good = gain(self.grad, batch / b.init_batch_size) / t
        good = np.where(feasible, good, -np.inf)
        flat = good.reshape(len(k), -1)
        best = np.argmax(flat, axis=1)
        best_val = flat[np.arange(len(k)), best]
        si, mi = np.unravel_index(best, good.shape[1:])
        ok = np.isfinite(best_val)
        best_m = m[np.arange(len(k)), si, mi]
        return BatchChoice(
            goodput=np.where(ok, best_val, 0.0),
            local_bsz=np.where(ok, best_m, 0).astype(np.int64),
            accum_steps=np.where(ok, si, 0).astype(np.int64),
        )


# ---------------------------------------------------------------------------------------------
# Fitting the throughput model to measured step times.


@dataclass(frozen=True)
class Observations:
    """Measured step times, one row per (nodes, replicas, micro-batch) configuration.

    ``compute_time`` is a pure accumulation micro-step; ``step_time`` an optimizer step with sync.
    """

    num_nodes: FloatArray
    num_replicas: FloatArray
    local_bsz: FloatArray
    compute_time: FloatArray
    step_time: FloatArray

    @classmethod
    def from_rows(cls, rows: Sequence[tuple[float, float, float, float, float]]) -> Observations:
        arr = np.asarray(rows, dtype=np.float64).reshape(-1, 5)
        return cls(*(arr[:, i].copy() for i in range(5)))

    def __len__(self) -> int:
        return len(self.num_nodes)


_NAMES = PerfParams._fields


def _free_mask(obs: Observations) -> dict[str, bool]:
    """Which parameters the data can identify; the rest take optimistic values."""
    multi = obs.num_replicas > 1
    within = multi & (obs.num_nodes == 1)
    across = multi & (obs.num_nodes > 1)
    return {
        "alpha_c": True,
        "beta_c": True,
        "alpha_r": bool(np.any(within)),
        "beta_r": bool(np.any(within & (obs.num_replicas > 2))),
        "alpha_n": bool(np.any(across)),
        "beta_n": bool(np.any(across & (obs.num_nodes > 2))),
        "gamma": bool(np.any(multi)),
    }


def identifiable(obs: Observations) -> dict[str, bool]:
    """Which throughput parameters these observations determine (the rest take priors)."""
    return _free_mask(obs)


def _assemble(x: FloatArray, free: dict[str, bool]) -> PerfParams:
    values: dict[str, float] = {}
    it = iter(x)
    for name in _NAMES:
        values[name] = float(next(it)) if free[name] else np.nan
    # Optimistic priors for regimes never observed.
    if np.isnan(values["gamma"]):
        values["gamma"] = 1.0
    for pre in ("alpha", "beta"):
        r, n = f"{pre}_r", f"{pre}_n"
        if np.isnan(values[r]) and np.isnan(values[n]):
            values[r] = values[n] = 0.0
        elif np.isnan(values[n]):
            # never identified across nodes: as good as within a node; the per-replica slope
            # across nodes is flat (ring all-reduce) until three or more nodes were measured
            values[n] = 0.0 if pre == "beta" else values[r]
        elif np.isnan(values[r]):
            values[r] = values[n]  # within a node is no worse than across
    return PerfParams(**values)


def fit_perf_params(
    obs: Observations,
    initial: PerfParams | None = None,
    warm_free: dict[str, bool] | None = None,
) -> PerfParams:
    """Bounded least squares on the log error of compute and optimizer-step times."""
    if len(obs) == 0:
        raise ValueError("cannot fit a throughput model without observations")
    free = _free_mask(obs)
    tc_min = float(np.min(obs.compute_time))
    m_mean = float(np.mean(obs.local_bsz))
    ts_obs = np.maximum(obs.step_time - obs.compute_time, 1e-6)
    guess = {
        "alpha_c": 0.1 * tc_min,
        "beta_c": 0.9 * tc_min / max(m_mean, 1.0),
        "alpha_r": float(np.mean(ts_obs)),
        "beta_r": 0.0,
        "alpha_n": float(np.mean(ts_obs)),
        "beta_n": 0.0,
        "gamma": 1.5,
    }
    if initial is not None:
        guess.update({k: v for k, v in initial._asdict().items() if np.isfinite(v)})
    x0, lb, ub = [], [], []
    for name in _NAMES:
        if not free[name]:
            continue
        x0.append(guess[name])
        lo, hi = GAMMA_BOUNDS if name == "gamma" else (1e-8 if name == "alpha_c" else 0.0, np.inf)
        lb.append(lo)
        ub.append(hi)
    x0_arr = np.clip(np.asarray(x0), lb, ub)

    log_c = np.log(obs.compute_time)
    log_s = np.log(obs.step_time)

    def residuals(x: FloatArray) -> FloatArray:
        p = _assemble(x, free)
        pred_c = compute_time(p, obs.local_bsz)
        pred_s = overlap(pred_c, sync_time(p, obs.num_nodes, obs.num_replicas), p.gamma)
        err_c = np.log(np.maximum(pred_c, 1e-12)) - log_c
        err_s = np.log(np.maximum(pred_s, 1e-12)) - log_s
        return np.concatenate([err_c, err_s])

    cols = [name for name in _NAMES if free[name]]
    n_obs = obs.num_nodes
    extra = np.maximum(obs.num_replicas - 2.0, 0.0)
    multi = obs.num_replicas > 1
    across = multi & (n_obs > 1)
    within = multi & ~(n_obs > 1)

    def jacobian(x: FloatArray) -> FloatArray:
        """Analytic derivatives of :func:`residuals` (a finite-difference Jacobian costs one
        residual evaluation per parameter and dominates simulator replays)."""
        p = _assemble(x, free)
        tc = compute_time(p, obs.local_bsz)
        ts = sync_time(p, n_obs, obs.num_replicas)
        g = p.gamma
        big = np.maximum(tc, ts)
        small = np.minimum(tc, ts)
        r = np.where(big > 0, small / np.where(big > 0, big, 1.0), 0.0)
        rg = np.power(r, g)
        w_small = rg / (1.0 + rg)  # share of the smaller term in (tc^g + ts^g)
        c_is_big = tc >= ts
        w_c = np.where(c_is_big, 1.0 - w_small, w_small)
        w_s = 1.0 - w_c
        d_ps_dc = w_c / np.maximum(tc, 1e-12)  # d log pred_s / d tc
        d_ps_ds = np.where(ts > 0, w_s / np.maximum(ts, 1e-12), 0.0)
        d_c = 1.0 / np.maximum(tc, 1e-12)  # d log pred_c / d tc
        log_r = np.log(np.where(r > 0, r, 1.0))
        d_g = -np.log1p(rg) / g**2 + w_small * log_r / g
        nobs = len(tc)
        jac = np.zeros((2 * nobs, len(cols)))
        for i, name in enumerate(cols):
            if name == "alpha_c":
                jac[:nobs, i], jac[nobs:, i] = d_c, d_ps_dc
            elif name == "beta_c":
                jac[:nobs, i], jac[nobs:, i] = d_c * obs.local_bsz, d_ps_dc * obs.local_bsz
            elif name == "gamma":
                jac[nobs:, i] = d_g
            else:
                mask = across if name.endswith("_n") else within
                # an unobserved regime copies the observed one (see _assemble)
                if name == "alpha_r" and not free["alpha_n"]:
                    mask = multi
                if name == "alpha_n" and not free["alpha_r"]:
                    mask = multi
                if name == "beta_n" and not free["beta_r"]:
                    mask = multi
                dts = np.where(mask, 1.0 if name.startswith("alpha") else extra, 0.0)
                jac[nobs:, i] = d_ps_ds * dts
        return jac

    def solve(start: FloatArray) -> scipy.optimize.OptimizeResult:
        return scipy.optimize.least_squares(
            residuals,
            start,
            jac=jacobian,
            bounds=(lb, ub),
            method="trf",
            x_scale="jac",
            xtol=1e-10,
        )

    best = solve(x0_arr)
    # The overlap exponent makes the loss non-convex: try a second start, unless warm-started
    # from a fit that already had gamma free (its optimum moves little with one more row).
    warm = initial is not None and warm_free is not None and warm_free == free
    if free["gamma"] and not warm:
        x1 = x0_arr.copy()
        x1[-1] = 5.0
        alt = solve(x1)
        if alt.cost < best.cost:
            best = alt
    return _assemble(np.asarray(best.x, dtype=np.float64), free)
