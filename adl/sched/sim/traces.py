"""Measured application traces (Pollux/AdaptDL artifact data): step times, epochs, gradient stats.

One :class:`AppTrace` per application directory. Lookups follow the traces README exactly:

- step/sync time of a placement found in ``placements.csv`` (up to rotation of its per-node
  digits) is linear in the micro-batch; any other placement is interpolated linearly over
  (nodes, replicas, micro-batch) across the per-(nodes, replicas, micro-batch) averages of
  ``placements.csv`` together with ``scalability.csv`` (nodes capped at 16);
- gradient statistics and iteration counts are linear in the batch size between the two nearest
  validation files;
- epoch ``e`` ends at the minimum, over validation files, of the cumulative progress of row ``e``.

Everything is parsed once and cached, because the simulator queries it thousands of times.
"""

from __future__ import annotations

import csv
import functools
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.typing import NDArray
from scipy.interpolate import LinearNDInterpolator, NearestNDInterpolator

from adl.contract import ENV_TRACES

FloatArray = NDArray[np.float64]

#: epochs to completion per application (traces README); others default to the validation rows
APP_EPOCHS: dict[str, int] = {
    "bert": 2,
    "cifar10": 100,
    "ncf": 10,
    "imagenet": 90,
    "deepspeech2": 80,
    "yolov3": 50,
}
#: micro-batch caps that override the largest measured micro-batch (GPU memory limits)
APP_MAX_LOCAL_BSZ: dict[str, int] = {"yolov3": 8}
#: nodes beyond this are interpolated as if the job spanned this many (the data's largest spread)
MAX_INTERP_NODES = 16


#: the traces shipped inside the package (package data; see its NOTICE for attribution)
PACKAGED_TRACES = Path(__file__).resolve().parent / "data" / "pollux"


def default_traces_dir() -> Path:
    """``$ADL_TRACES``, else the traces packaged with adl (so any install can simulate)."""
    env = os.environ.get(ENV_TRACES)
    if env:
        return Path(env)
    return PACKAGED_TRACES


def canonical_placement(placement: Sequence[int]) -> tuple[int, ...]:
    """Drop empty nodes and rotate to the lexicographically smallest rotation."""
    p = tuple(int(x) for x in placement if x)
    if not p:
        return ()
    return min(p[i:] + p[:i] for i in range(len(p)))


def _read_csv(path: Path) -> dict[str, list[str]]:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError(f"{path}: no rows")
    return {key: [row[key] for row in rows] for key in rows[0]}


@dataclass(frozen=True)
class _Curve:
    """Step and sync time of one placement as functions of the micro-batch."""

    local_bsz: FloatArray
    step: FloatArray
    sync: FloatArray


@dataclass
class AppTrace:
    """Everything measured about one application, with the README's lookup rules."""

    name: str
    max_epochs: int
    init_batch_size: int
    max_batch_size: int
    min_local_bsz: int
    max_local_bsz: int
    #: canonical placement -> step/sync curve over the micro-batch
    curves: dict[tuple[int, ...], _Curve]
    #: (points (n, k, m), values (step, sync)) for placements not measured directly
    nd_points: FloatArray
    nd_values: FloatArray
    #: validated global batch sizes, ascending, and per-file per-epoch arrays [file, epoch]
    batch_sizes: NDArray[np.int64]
    progress: FloatArray
    iteration: FloatArray
    grad_sqr: FloatArray
    grad_var: FloatArray
    _nd: LinearNDInterpolator | None = field(default=None, repr=False)
    _nearest: NearestNDInterpolator | None = field(default=None, repr=False)
    _time_cache: dict[tuple[tuple[int, ...], float], tuple[float, float]] = field(
        default_factory=dict, repr=False
    )
    _grad_cache: dict[tuple[float, int], tuple[float, float]] = field(
        default_factory=dict, repr=False
    )

    # ------------------------------------------------------------------ epochs and progress

    @functools.cached_property
    def epoch_ends(self) -> FloatArray:
        """Cumulative progress at the end of each epoch (min over validation files)."""
        return np.min(self.progress[:, : self.max_epochs], axis=0)

    def progress_at(self, epochs_done: int) -> float:
        """Scale-invariant iterations needed to complete ``epochs_done`` epochs."""
        if epochs_done <= 0:
            return 0.0
        return float(self.epoch_ends[min(epochs_done, self.max_epochs) - 1])

    @property
    def total_progress(self) -> float:
        return self.progress_at(self.max_epochs)

    # ------------------------------------------------------------------ batch-size interpolation

    def _bracket(self, batch_size: float) -> tuple[int, int, float]:
        """Indices of the nearest validated sizes below/above and the weight of the upper one.

        Batch sizes outside the validated range are clamped to it."""
        bs = self.batch_sizes
        b = float(min(max(batch_size, bs[0]), bs[-1]))
        hi = int(np.searchsorted(bs, b, side="left"))
        if bs[hi] == b:
            return hi, hi, 0.0
        lo = hi - 1
        return lo, hi, (b - bs[lo]) / (bs[hi] - bs[lo])

    def grad_stats(self, batch_size: float, epoch: int) -> tuple[float, float]:
        """(sqr, var) measured during epoch ``epoch`` (0-based) at this global batch size."""
        key = (float(batch_size), int(epoch))
        hit = self._grad_cache.get(key)
        if hit is not None:
            return hit
        e = min(max(int(epoch), 0), self.grad_sqr.shape[1] - 1)
        lo, hi, w = self._bracket(batch_size)
        sqr = (1.0 - w) * self.grad_sqr[lo, e] + w * self.grad_sqr[hi, e]
        var = (1.0 - w) * self.grad_var[lo, e] + w * self.grad_var[hi, e]
        out = (float(sqr), float(var))
        self._grad_cache[key] = out
        return out

    def iterations_after(self, batch_size: float, epochs_done: int) -> float:
        """Optimizer steps a run at this batch size has taken after ``epochs_done`` epochs."""
        if epochs_done <= 0:
            return 0.0
        e = min(epochs_done, self.iteration.shape[1]) - 1
        lo, hi, w = self._bracket(batch_size)
        return float((1.0 - w) * self.iteration[lo, e] + w * self.iteration[hi, e])

    # ------------------------------------------------------------------ step times

    def step_sync_time(self, placement: Sequence[int], local_bsz: float) -> tuple[float, float]:
        """Measured (step_time, sync_time) in seconds of one optimizer step without accumulation.

        ``placement`` lists GPUs per node (order matters only up to rotation)."""
        canon = canonical_placement(placement)
        if not canon:
            raise ValueError("empty placement has no step time")
        key = (canon, float(local_bsz))
        hit = self._time_cache.get(key)
        if hit is not None:
            return hit
        out = self._lookup(canon, float(local_bsz))
        self._time_cache[key] = out
        return out

    def step_sync_on(
        self, placement: Sequence[int], local_bsz: float, speed: float = 1.0
    ) -> tuple[float, float]:
        """:meth:`step_sync_time` on a GPU type of compute ``speed`` relative to the traces'
        (a mixed cluster, :mod:`adl.sched.sim.gpu_mix`): the compute part of the step (step
        time less sync time) takes ``1 / speed`` of the traces' time, the gradient sync the
        same time (the network is not the GPU's)."""
        step, sync = self.step_sync_time(placement, local_bsz)
        if speed == 1.0:
            return step, sync
        if not 0.0 < speed < math.inf:
            raise ValueError(f"a GPU type's speed must be positive and finite, got {speed}")
        return sync + max(step - sync, 0.0) / speed, sync

    def rate(
        self,
        placement: Sequence[int],
        local_bsz: float,
        accum_steps: int,
        epoch: int,
        speed: float = 1.0,
    ) -> float:
        """True scale-invariant iterations per second of a configuration during ``epoch``: the
        AdaScale gain of its global batch over the time of one optimizer step (the traces
        README's physics, shared by the simulated jobs and the what-ifs), on GPUs of compute
        ``speed`` (:meth:`step_sync_on`)."""
        step, sync = self.step_sync_on(placement, local_bsz, speed)
        batch = sum(placement) * local_bsz * (accum_steps + 1)
        sqr, var = self.grad_stats(batch, epoch)
        scale = batch / self.init_batch_size
        denom = var / scale + sqr
        gain = (var + sqr) / denom if denom > 0 else 1.0
        return float(gain / (step + accum_steps * (step - sync)))

    def step_sync_times(
        self, placement: Sequence[int], local_bszs: FloatArray
    ) -> tuple[FloatArray, FloatArray]:
        """:meth:`step_sync_time` of one placement at many micro-batches at once (the same
        rules, vectorized: offline analyses sweep every micro-batch of every placement)."""
        canon = canonical_placement(placement)
        if not canon:
            raise ValueError("empty placement has no step time")
        m = np.asarray(local_bszs, dtype=np.float64)
        step, sync = self.interpolated_step_sync(len(canon), sum(canon), m)
        curve = self.curves.get(canon)
        if curve is not None:
            inside = (curve.local_bsz[0] <= m) & (m <= curve.local_bsz[-1])
            step = np.where(inside, np.interp(m, curve.local_bsz, curve.step), step)
            sync = np.where(inside, np.interp(m, curve.local_bsz, curve.sync), sync)
        return step, sync

    def interpolated_step_sync(
        self, nodes: int, replicas: int, local_bszs: FloatArray
    ) -> tuple[FloatArray, FloatArray]:
        """(step, sync) arrays of the README's fallback for placements not measured at that
        micro-batch: linear over (nodes, replicas, micro-batch), else the nearest point."""
        m = np.asarray(local_bszs, dtype=np.float64)
        points = np.column_stack(
            [
                np.full(m.shape, float(min(nodes, MAX_INTERP_NODES))),
                np.full(m.shape, float(replicas)),
                m,
            ]
        )
        if self._nd is None:
            self._nd = LinearNDInterpolator(self.nd_points, self.nd_values)
        val = np.asarray(self._nd(points), dtype=np.float64)
        outside = ~np.all(np.isfinite(val), axis=1)
        if outside.any():
            if self._nearest is None:
                self._nearest = NearestNDInterpolator(self.nd_points, self.nd_values)
            val[outside] = np.asarray(self._nearest(points[outside]), dtype=np.float64)
        return val[:, 0], val[:, 1]

    def _lookup(self, canon: tuple[int, ...], m: float) -> tuple[float, float]:
        curve = self.curves.get(canon)
        if curve is not None and curve.local_bsz[0] <= m <= curve.local_bsz[-1]:
            return (
                float(np.interp(m, curve.local_bsz, curve.step)),
                float(np.interp(m, curve.local_bsz, curve.sync)),
            )
        point = np.array([[min(len(canon), MAX_INTERP_NODES), sum(canon), m]], dtype=np.float64)
        if self._nd is None:
            self._nd = LinearNDInterpolator(self.nd_points, self.nd_values)
        val = np.asarray(self._nd(point))[0]
        if not np.all(np.isfinite(val)):
            # Outside the convex hull of the measurements: the nearest measured configuration
            # is the least surprising answer (the published simulator would crash here).
            if self._nearest is None:
                self._nearest = NearestNDInterpolator(self.nd_points, self.nd_values)
            val = np.asarray(self._nearest(point))[0]
        return float(val[0]), float(val[1])


def _parse_placement(text: str) -> tuple[int, ...]:
    return tuple(int(ch) for ch in text.strip())


def load_app(path: Path, name: str | None = None) -> AppTrace:
    """Parse one application directory (``placements.csv``, ``scalability.csv``, validation)."""
    name = name or path.name
    pl = _read_csv(path / "placements.csv")
    placements = [_parse_placement(p) for p in pl["placement"]]
    m = np.array(pl["local_bsz"], dtype=np.float64)
    step = np.array(pl["step_time"], dtype=np.float64)
    sync = np.array(pl["sync_time"], dtype=np.float64)

    curves: dict[tuple[int, ...], _Curve] = {}
    by_placement: dict[tuple[int, ...], list[int]] = {}
    for i, p in enumerate(placements):
        by_placement.setdefault(canonical_placement(p), []).append(i)
    for canon, idx in by_placement.items():
        ii = np.array(idx)
        order = np.argsort(m[ii], kind="stable")
        ii = ii[order]
        curves[canon] = _Curve(m[ii], step[ii], sync[ii])

    # Per-(nodes, replicas, micro-batch) averages of the placements, plus the scalability rows.
    groups: dict[tuple[int, int, float], list[int]] = {}
    for i, p in enumerate(placements):
        groups.setdefault((len(p), sum(p), float(m[i])), []).append(i)
    pts = [list(key) for key in groups]
    vals = [[float(np.mean(step[idx])), float(np.mean(sync[idx]))] for idx in groups.values()]
    scal_path = path / "scalability.csv"
    if scal_path.exists():
        sc = _read_csv(scal_path)
        for n, k, mb, st, sy in zip(
            sc["num_nodes"],
            sc["num_replicas"],
            sc["local_bsz"],
            sc["step_time"],
            sc["sync_time"],
            strict=True,
        ):
            pts.append([float(n), float(k), float(mb)])
            vals.append([float(st), float(sy)])

    files = sorted(path.glob("validation-*.csv"), key=lambda p: int(p.stem.split("-")[-1]))
    if not files:
        raise ValueError(f"{path}: no validation-*.csv files")
    batch_sizes = np.array([int(p.stem.split("-")[-1]) for p in files], dtype=np.int64)
    tables = [_read_csv(p) for p in files]
    rows = min(len(t["progress"]) for t in tables)

    def stack(col: str) -> FloatArray:
        return np.array([t[col][:rows] for t in tables], dtype=np.float64)

    max_epochs = min(APP_EPOCHS.get(name, rows), rows)
    return AppTrace(
        name=name,
        max_epochs=max_epochs,
        init_batch_size=int(batch_sizes[0]),
        max_batch_size=int(batch_sizes[-1]),
        min_local_bsz=int(m.min()),
        max_local_bsz=int(APP_MAX_LOCAL_BSZ.get(name, int(m.max()))),
        curves=curves,
        nd_points=np.array(pts, dtype=np.float64),
        nd_values=np.array(vals, dtype=np.float64),
        batch_sizes=batch_sizes,
        progress=stack("progress"),
        iteration=stack("iteration"),
        grad_sqr=stack("grad_sqr"),
        grad_var=stack("grad_var"),
    )


@functools.lru_cache(maxsize=8)
def _load_traces_cached(root: Path) -> dict[str, AppTrace]:
    base = root / "traces" if (root / "traces").is_dir() else root
    apps = {
        d.name: load_app(d)
        for d in sorted(base.iterdir())
        if d.is_dir() and (d / "placements.csv").exists()
    }
    if not apps:
        raise FileNotFoundError(f"no application traces under {base}")
    return apps


def load_traces(root: Path | str | None = None) -> dict[str, AppTrace]:
    """All applications under ``root`` (the pollux-traces directory or its ``traces/``)."""
    path = Path(root) if root is not None else default_traces_dir()
    if not path.is_dir():
        raise FileNotFoundError(f"traces directory not found: {path} (set --traces or ADL_TRACES)")
    return _load_traces_cached(path.resolve())
