"""Upper envelopes of a job's true training rate per GPU count, for the lower bound on JCT.

For every epoch ``e`` and GPU count ``k`` this finds ``r_e(k)``: the highest rate (scale-invariant
iterations per second, the simulator's :meth:`AppTrace.rate`) of **any** configuration the
simulator could run on ``k`` GPUs. It is a superset search, so every rate the simulator can
produce is at most ``r_e(k)``:

- placements: every node count ``ceil(k / gpus_per_node) .. min(k, num_nodes)`` through the
  traces' interpolation, plus every measured placement with ``k`` GPUs that fits the nodes (the
  step time of any placement is one of the two, by the traces' lookup rules);
- micro-batches: every integer ``1 .. max_local_bsz`` (the simulated jobs only run integer
  micro-batches within that cap), with every accumulation count whose global batch stays within
  ``max_batch_size``; plus, explicitly, the batch splits of every fixed batch a job may run
  (:func:`split_batch` of the workload's batch sizes, the fixed adaptive batch and the
  fallback ``max(B0, min_local_bsz * k)``), whatever their global batch;
- applications whose adaptive runs keep one fixed batch (``FIXED_ADAPTIVE_BATCH``) run only
  those splits, as :class:`~adl.sched.sim.job.SimJob` does;
- on a GPU type of compute ``speed`` (a mixed cluster), every step time by the simulator's
  per-type rule (:meth:`AppTrace.step_sync_on`: compute over ``speed``, sync unchanged), which
  :mod:`adl.sched.sim.bound_mixed` uses.

Rates are then normalised per epoch by the epoch's best rate over all ``k``: in these units an
epoch's work is the seconds it would take alone on the cluster, and the job's total is its
alone-on-the-cluster time ``T*``. ``sigma(k) = max_e r_e(k) / r_e*`` bounds the rate of every
epoch at ``k`` GPUs in these units, and its concave hull is what the LP uses.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from adl.sched.sim.batching import split_batch
from adl.sched.sim.job import FIXED_ADAPTIVE_BATCH
from adl.sched.sim.traces import AppTrace

FloatArray = NDArray[np.float64]

#: rates are inflated by this relative margin so floating-point differences from the
#: simulator's scalar arithmetic can never make the envelope fall below a true rate
SAFETY = 1e-9


@dataclass(frozen=True)
class RateEnvelope:
    """Best true rates of one application on ``0 .. kmax`` GPUs, per epoch."""

    application: str
    #: ``[epoch, k]``: best rate with ``k`` GPUs (column 0 is 0)
    epoch_rates: FloatArray
    #: progress (scale-invariant iterations) each epoch needs
    epoch_work: FloatArray

    @property
    def kmax(self) -> int:
        return int(self.epoch_rates.shape[1] - 1)

    @property
    def epochs(self) -> int:
        return int(self.epoch_rates.shape[0])

    @property
    def best_rates(self) -> FloatArray:
        """``r_e*``: each epoch's best rate over every GPU count."""
        return np.asarray(self.epoch_rates.max(axis=1), dtype=np.float64)

    @property
    def alone_s(self) -> float:
        """``T*``: seconds of training alone on the cluster, each epoch at its best rate."""
        return float(np.sum(self.epoch_work / self.best_rates))

    @property
    def relative_speed(self) -> FloatArray:
        """``sigma(k)``: the most any epoch achieves at ``k`` GPUs, in alone-seconds per second."""
        ratio = self.epoch_rates / self.best_rates[:, None]
        return np.asarray(ratio.max(axis=0), dtype=np.float64)

    def capped(self, kmax: int) -> RateEnvelope:
        """The same application with at most ``kmax`` GPUs."""
        k = max(1, min(kmax, self.kmax))
        return RateEnvelope(self.application, self.epoch_rates[:, : k + 1], self.epoch_work)

    def hull(self) -> tuple[FloatArray, FloatArray]:
        """Concave upper envelope of ``(k, sigma(k))`` over ``[0, kmax]`` from the origin, as
        (slopes, intercepts) of its segments, the last one flat at the maximum: ``sigma`` of
        any average GPU count ``s`` is at most ``min_l(slope_l * s + intercept_l)``."""
        return concave_hull(self.relative_speed)


def concave_hull(values: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Segments of the least concave function over ``(k, values[k])``, ``k = 0 ..``, extended
    flat beyond its maximum (a concave, nondecreasing majorant on ``[0, inf)``)."""
    y = np.asarray(values, dtype=np.float64)
    top = int(np.argmax(y))
    hull: list[int] = []
    for k in range(top + 1):  # upper hull of the points up to the maximum (monotone chain)
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            if (y[b] - y[a]) * (k - a) <= (y[k] - y[a]) * (b - a):
                hull.pop()
            else:
                break
        hull.append(k)
    slopes = [(y[b] - y[a]) / (b - a) for a, b in itertools.pairwise(hull)]
    intercepts = [y[a] - s * a for a, s in zip(hull[:-1], slopes, strict=True)]
    slopes.append(0.0)
    intercepts.append(float(y[top]))
    return np.array(slopes, dtype=np.float64), np.array(intercepts, dtype=np.float64)


def _placements(app: AppTrace, k: int, gpus_per_node: int, num_nodes: int) -> list[object]:
    """Every step-time source a ``k``-GPU allocation can hit: node counts (interpolated) and
    measured placements (canonical tuples)."""
    out: list[object] = list(range(math.ceil(k / gpus_per_node), min(k, num_nodes) + 1))
    out += [
        p for p in app.curves if sum(p) == k and max(p) <= gpus_per_node and len(p) <= num_nodes
    ]
    return out


def _step_sync(
    app: AppTrace, k: int, source: object, m: FloatArray, speed: float = 1.0
) -> tuple[FloatArray, FloatArray]:
    if isinstance(source, int):
        step, sync = app.interpolated_step_sync(source, k, m)
    else:
        assert isinstance(source, tuple)
        step, sync = app.step_sync_times(source, m)
    if speed != 1.0:
        # the per-type rule of AppTrace.step_sync_on: compute takes 1 / speed, sync the same
        step = sync + np.maximum(step - sync, 0.0) / speed
    return step, sync


def _fixed_splits(app: AppTrace, k: int, batches: Iterable[int]) -> list[tuple[int, int]]:
    """(micro-batch, accumulation) of every fixed batch a job of ``app`` may split over ``k``."""
    out = set()
    for b in batches:
        out.add(
            split_batch(
                b,
                k,
                max_local_bsz=app.max_local_bsz,
                init_batch_size=app.init_batch_size,
                max_batch_size=app.max_batch_size,
            )
        )
    return sorted(out)


def min_step_times(
    app: AppTrace,
    k: int,
    *,
    gpus_per_node: int,
    num_nodes: int,
    fixed_batches: Iterable[int] = (),
    speed: float = 1.0,
) -> FloatArray:
    """Shortest optimizer-step time (accumulation included) per global batch ``B`` on ``k``
    GPUs of compute ``speed`` (index ``B``; ``inf`` where no configuration gives that
    batch)."""
    fixed = FIXED_ADAPTIVE_BATCH.get(app.name)
    batches = {*fixed_batches, max(app.init_batch_size, app.min_local_bsz * k)}
    if fixed:
        batches = {fixed, *fixed_batches}
    splits = _fixed_splits(app, k, batches)
    top = max([app.max_batch_size] + [k * m * (s + 1) for m, s in splits])
    best = np.full(top + 1, np.inf)
    sources = _placements(app, k, gpus_per_node, num_nodes)
    micro = np.empty(0) if fixed else np.arange(1, app.max_local_bsz + 1, dtype=np.float64)
    for source in sources:
        if len(micro):
            step, sync = _step_sync(app, k, source, micro, speed)
            for s in range(app.max_batch_size // k):
                keep = k * micro * (s + 1) <= app.max_batch_size
                if not keep.any():
                    break
                batch = (k * micro[keep] * (s + 1)).astype(np.int64)
                np.minimum.at(best, batch, step[keep] + s * (step[keep] - sync[keep]))
        for m, s in splits:
            st, sy = _step_sync(app, k, source, np.array([float(m)]), speed)
            b = k * m * (s + 1)
            best[b] = min(best[b], float(st[0] + s * (st[0] - sy[0])))
    return best


def gains(app: AppTrace, top_batch: int) -> FloatArray:
    """AdaScale gain ``[epoch, B]`` for ``B = 0 .. top_batch`` (the traces' gradient
    statistics, linear in ``B`` between validated sizes and clamped outside them)."""
    batch = np.arange(top_batch + 1, dtype=np.float64)
    sizes = app.batch_sizes.astype(np.float64)
    out = np.ones((app.max_epochs, top_batch + 1))
    last = app.grad_sqr.shape[1] - 1
    for e in range(app.max_epochs):
        col = min(e, last)
        sqr = np.interp(batch, sizes, app.grad_sqr[:, col])
        var = np.interp(batch, sizes, app.grad_var[:, col])
        scale = batch / app.init_batch_size
        with np.errstate(divide="ignore", invalid="ignore"):
            denom = var / scale + sqr
            out[e] = np.where(denom > 0, (var + sqr) / np.where(denom > 0, denom, 1.0), 1.0)
    return out


def rate_envelope(
    app: AppTrace,
    *,
    kmax: int,
    gpus_per_node: int,
    num_nodes: int,
    fixed_batches: Iterable[int] = (),
    speed: float = 1.0,
) -> RateEnvelope:
    """The :class:`RateEnvelope` of ``app`` on ``1 .. kmax`` GPUs of compute ``speed`` relative
    to the traces' (a GPU type, :mod:`adl.sched.sim.gpu_mix`; see the module docstring)."""
    if not 0.0 < speed < math.inf:
        raise ValueError(f"a GPU type's speed must be positive and finite, got {speed}")
    fixed = tuple(fixed_batches)
    steps = [
        min_step_times(
            app,
            k,
            gpus_per_node=gpus_per_node,
            num_nodes=num_nodes,
            fixed_batches=fixed,
            speed=speed,
        )
        for k in range(1, kmax + 1)
    ]
    gain = gains(app, max(len(b) for b in steps) - 1)
    rates = np.zeros((app.max_epochs, kmax + 1))
    for k, best in enumerate(steps, start=1):
        ok = np.flatnonzero(np.isfinite(best) & (np.arange(len(best)) > 0))
        if len(ok):
            rates[:, k] = (gain[:, ok] / best[ok][None, :]).max(axis=1) * (1.0 + SAFETY)
    work = np.diff([app.progress_at(e) for e in range(app.max_epochs + 1)])
    return RateEnvelope(app.name, rates, np.asarray(work, dtype=np.float64))
