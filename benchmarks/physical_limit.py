"""The physical limit of average JCT: every job alone on the whole cluster, best config at once.

For each job of a workload, every epoch runs at the best *measured* configuration of the traces
(replicas packed 4 per node on 1..16 nodes, per-GPU micro-batch, accumulation steps, global batch
within [B0, B_max]); the job starts the second it is submitted, never waits, never restarts, and
never shares the cluster. No scheduler can beat the resulting average JCT, so it anchors the
results: ``gap = policy JCT / limit``. Reads the traces directly (independent of the simulator).

    .venv/bin/python benchmarks/physical_limit.py [--traces DIR] [--start-delay 0] [--json PATH]
"""

from __future__ import annotations

import argparse
import csv
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

EPOCHS = {"bert": 2, "cifar10": 100, "ncf": 10, "imagenet": 90, "deepspeech2": 80, "yolov3": 50}
DEFAULT_TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "pollux-traces"
NODES, GPUS_PER_NODE = 16, 4


def _step_tables(app_dir: Path) -> dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(nodes, replicas) of packed placements -> (micro-batches, step times, sync times)."""
    rows: dict[tuple[int, int], dict[int, list[tuple[float, float]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    with open(app_dir / "placements.csv") as fh:
        for r in csv.DictReader(fh):
            digits = [int(c) for c in r["placement"]]
            k = sum(digits)
            packed = -(-k // GPUS_PER_NODE)
            if len(digits) != packed:
                continue  # only tightest packings (what "alone on the cluster" would use)
            rows[(len(digits), k)][int(r["local_bsz"])].append(
                (float(r["step_time"]), float(r["sync_time"]))
            )
    with open(app_dir / "scalability.csv") as fh:
        for r in csv.DictReader(fh):
            n, k = int(r["num_nodes"]), int(r["num_replicas"])
            if n == -(-k // GPUS_PER_NODE) and (n, k) not in rows:
                rows[(n, k)][int(r["local_bsz"])].append(
                    (float(r["step_time"]), float(r["sync_time"]))
                )
    out = {}
    for key, by_m in rows.items():
        ms = sorted(by_m)
        st = [np.mean([x[0] for x in by_m[m]]) for m in ms]
        sy = [np.mean([x[1] for x in by_m[m]]) for m in ms]
        out[key] = (np.array(ms, float), np.array(st), np.array(sy))
    return out


class AppLimit:
    """Best-configuration epoch times of one application."""

    def __init__(self, app_dir: Path) -> None:
        name = app_dir.name
        self.tables = _step_tables(app_dir)
        one = self.tables[(1, 1)][0]
        self.m_lo, self.m_hi = int(one.min()), int(one.max())
        if name == "yolov3":
            self.m_hi = min(self.m_hi, 8)
        vals: dict[int, np.ndarray] = {}
        for f in app_dir.glob("validation-*.csv"):
            with open(f) as fh:
                rows = list(csv.DictReader(fh))
            vals[int(f.stem.split("-")[1])] = np.array(
                [[float(r["progress"]), float(r["grad_sqr"]), float(r["grad_var"])] for r in rows]
            )
        self.batches = np.array(sorted(vals), dtype=float)
        n_rows = min(len(v) for v in vals.values())
        self.stats = np.stack([vals[int(b)][:n_rows] for b in self.batches])  # (B, epoch, 3)
        self.epochs = min(EPOCHS[name], n_rows)
        self.ends = self.stats[:, : self.epochs, 0].min(axis=0)
        self.b0, self.b_max = float(self.batches[0]), float(self.batches[-1])
        self.single_gpu_fixed = name == "ncf"  # run at B = B_max on one GPU
        self.epoch_time = np.array([self._best_epoch_time(e) for e in range(self.epochs)])

    def _grad(self, epoch: int, batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        sqr = np.interp(batch, self.batches, self.stats[:, epoch, 1])
        var = np.interp(batch, self.batches, self.stats[:, epoch, 2])
        return sqr, var

    def _best_rate(self, epoch: int) -> float:
        best = 0.0
        m_grid = np.unique(np.round(np.geomspace(self.m_lo, self.m_hi, 48)))
        for (n, k), (ms, st, sy) in self.tables.items():
            if n > NODES or (self.single_gpu_fixed and k != 1):
                continue
            m = m_grid[:, None]
            s_max = int(max(self.b_max // (k * self.m_lo), 1))
            s = np.arange(min(s_max, 64))[None, :]
            batch = k * m * (s + 1)
            if self.single_gpu_fixed:
                ok = batch == self.b_max
                if not ok.any():
                    m = np.array([[self.b_max]])
                    s = np.zeros((1, 1))
                    batch = m
                    ok = np.ones((1, 1), bool)
            else:
                ok = (batch >= self.b0) & (batch <= self.b_max)
            t_step = np.interp(m, ms, st)
            t_sync = np.interp(m, ms, sy)
            sqr, var = self._grad(epoch, batch)
            scale = batch / self.b0
            gain = np.where(var + sqr > 0, (var + sqr) / (var / scale + sqr), 1.0)
            rate = gain / (t_step + s * (t_step - t_sync))
            rate = np.where(ok, rate, 0.0)
            best = max(best, float(rate.max()))
        return best

    def _best_epoch_time(self, epoch: int) -> float:
        start = self.ends[epoch - 1] if epoch > 0 else 0.0
        return float((self.ends[epoch] - start) / self._best_rate(epoch))

    @property
    def job_time(self) -> float:
        return float(self.epoch_time.sum())


def workload_limit(traces: Path, workload: Path, start_delay: float) -> dict[str, float]:
    apps: dict[str, AppLimit] = {}
    jcts = []
    with open(workload) as fh:
        for r in csv.DictReader(fh):
            app = r["application"]
            if app not in apps:
                apps[app] = AppLimit(traces / "traces" / app)
            jcts.append(apps[app].job_time + start_delay)
    return {
        "avg_jct_s": float(np.mean(jcts)),
        "p99_jct_s": float(np.percentile(jcts, 99)),
        "jobs": len(jcts),
        **{f"alone_{name}_s": app.job_time for name, app in sorted(apps.items())},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES)
    parser.add_argument("--start-delay", type=float, default=0.0, help="seconds per job start")
    parser.add_argument("--json", type=str, default=None)
    args = parser.parse_args()
    results = {}
    print(f"{'workload':<12} {'limit avg JCT s':>16} {'limit p99 s':>12}")
    for wl in sorted((args.traces / "workloads").glob("*.csv")):
        res = workload_limit(args.traces, wl, args.start_delay)
        results[wl.stem] = res
        print(f"{wl.stem:<12} {res['avg_jct_s']:>16.0f} {res['p99_jct_s']:>12.0f}")
    mean = float(np.mean([r["avg_jct_s"] for r in results.values()]))
    print(f"{'mean':<12} {mean:>16.0f}")
    first = next(iter(results.values()))
    print(
        "alone on 64 GPUs, per job (s): "
        + ", ".join(f"{k[6:-2]}={v:.0f}" for k, v in first.items() if k.startswith("alone_"))
    )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"workloads": results, "mean_avg_jct_s": mean}, fh, indent=2)


if __name__ == "__main__":
    main()
