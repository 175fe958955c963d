"""The physical limit of average JCT: every job alone on the whole cluster, best config at once.

For each job of a workload, every epoch runs at the best configuration the simulator's physics
allow (1..64 replicas packed 4 per node, per-GPU micro-batch, accumulation steps, global batch
within [B0, B_max]); the job starts the second it is submitted, never waits, never restarts, and
never shares the cluster. No scheduler can beat the resulting average JCT, so it anchors the
results: ``gap = policy JCT / limit``. Step times and gradient statistics come from
:class:`adl.sched.sim.traces.AppTrace`, the traces README's rules the simulated jobs run under
(a placement measured at one micro-batch only is interpolated over nodes, replicas and
micro-batch, never held at that one measurement); no scheduling code is involved.

    .venv/bin/python benchmarks/physical_limit.py [--traces DIR] [--start-delay 0] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adl.sched.sim.job import FIXED_ADAPTIVE_BATCH, MAX_REPLICAS
from adl.sched.sim.traces import AppTrace, default_traces_dir, load_traces
from adl.sched.sim.workload import load_workload

DEFAULT_TRACES = default_traces_dir()
GPUS_PER_NODE = 4


def packed(replicas: int) -> tuple[int, ...]:
    full, rest = divmod(replicas, GPUS_PER_NODE)
    return (GPUS_PER_NODE,) * full + ((rest,) if rest else ())


class AppLimit:
    """Best-configuration epoch times of one application."""

    def __init__(self, app: AppTrace) -> None:
        self.app = app
        fixed = FIXED_ADAPTIVE_BATCH.get(app.name)
        m_grid = np.unique(np.round(np.geomspace(app.min_local_bsz, app.max_local_bsz, 48)))
        # (replicas, micro-batch, accumulation steps) candidates and their step times
        configs: list[tuple[int, float, int, float]] = []
        for k in range(1, (1 if fixed else MAX_REPLICAS) + 1):
            for m in [float(fixed)] if fixed else m_grid.tolist():
                step, sync = app.step_sync_time(packed(k), m)
                for s in range(64):
                    batch = k * m * (s + 1)
                    if batch > (fixed or app.max_batch_size) + 1e-9:
                        break
                    if batch >= (fixed or app.init_batch_size) - 1e-9:
                        configs.append((k, batch, s, step + s * (step - sync)))
        self.batch = np.array([c[1] for c in configs])
        self.step = np.array([c[3] for c in configs])
        self.epoch_time = np.array([self._best_epoch_time(e) for e in range(app.max_epochs)])

    def _best_epoch_time(self, epoch: int) -> float:
        stats = np.array([self.app.grad_stats(b, epoch) for b in self.batch])
        sqr, var = stats[:, 0], stats[:, 1]
        scale = self.batch / self.app.init_batch_size
        denom = var / scale + sqr
        gain = np.where(denom > 0, (var + sqr) / np.where(denom > 0, denom, 1.0), 1.0)
        rate = float((gain / self.step).max())
        work = self.app.progress_at(epoch + 1) - self.app.progress_at(epoch)
        return float(work / rate)

    @property
    def job_time(self) -> float:
        return float(self.epoch_time.sum())


def app_limits(traces: Path) -> dict[str, float]:
    """Alone-on-the-cluster job time (s) of every traced application."""
    return {name: AppLimit(app).job_time for name, app in sorted(load_traces(traces).items())}


def workload_limit(
    limits: dict[str, float], workload: Path, start_delay: float
) -> dict[str, float]:
    jobs = load_workload(workload)
    jcts = [limits[job.application] + start_delay for job in jobs]
    apps = sorted({job.application for job in jobs})
    return {
        "avg_jct_s": float(np.mean(jcts)),
        "p99_jct_s": float(np.percentile(jcts, 99)),
        "jobs": len(jcts),
        **{f"alone_{name}_s": limits[name] for name in apps},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=Path, default=DEFAULT_TRACES)
    parser.add_argument("--start-delay", type=float, default=0.0, help="seconds per job start")
    parser.add_argument("--json", type=str, default=None)
    args = parser.parse_args()
    limits = app_limits(args.traces)
    results = {}
    print(f"{'workload':<12} {'limit avg JCT s':>16} {'limit p99 s':>12}")
    for wl in sorted((args.traces / "workloads").glob("*.csv")):
        res = workload_limit(limits, wl, args.start_delay)
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
