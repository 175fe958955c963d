"""Latency of one scheduling round on the production path: the shared driver
(``adl.controller.driver.Driver.run_round``) over a backend, as the operator and the local daemon
run it: read every job, accrue service, build JobInfos from the jobs' hints with the speedup
tables kept across rounds, ``AdlPolicy.optimize``, record the answers and explain the changes.

Each job carries synthetic hints (a random throughput model, gradient statistics, batch
bounds), as a running job would have reported; a fraction of the jobs report refitted gradient
statistics each round (a new speedup model), as happens every ~30 s in a real cluster.
Backends: ``memory`` (the driver over job records in memory, N nodes of 4 GPUs: the operator's
path without its API calls) and ``local`` (the local daemon's own round over its SQLite store,
one node). ``--no-cache-too`` adds rows for the old path that rebuilt every table each round.
Prints first/p50/p95 per configuration; ``--json`` writes them.

    .venv/bin/python benchmarks/round_latency.py [--rounds 10] [--configs 100x64,1000x2048]
        [--backend memory|local] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from adl.controller.driver import Driver
from adl.controller.job_record import JobRecord
from adl.controller.memory import MemoryWorkerBackend
from adl.controller.rounds import SpeedupCache
from adl.models import (
    AdaptiveJobSpec,
    AdaptiveJobStatus,
    GradParamsModel,
    Hints,
    PerfParamsModel,
    Phase,
)
from adl.sched.hints import speedup_from_hints
from adl.sched.policy import AdlPolicy
from adl.sched.policy_knobs import parse_knobs
from adl.sched.types import NodeInfo

GPUS_PER_NODE = 4
NOW = datetime(2024, 1, 1, tzinfo=UTC)
TEMPLATE = {"spec": {"containers": [{"name": "t", "command": ["python", "train.py"]}]}}


def synthetic_hints(rng: np.random.Generator) -> Hints:
    b0 = int(rng.choice([32, 64, 128]))
    return Hints(
        init_batch_size=b0,
        max_batch_size=b0 * int(rng.choice([4, 8, 16])),
        local_bsz_bounds=(b0 // 4, b0 * 2),
        gradient_accumulation=bool(rng.random() < 0.5),
        perf_params=PerfParamsModel(
            alpha_c=float(rng.uniform(0.005, 0.05)),
            beta_c=float(rng.uniform(1e-4, 1e-3)),
            alpha_n=float(rng.uniform(0.01, 0.1)),
            beta_n=float(rng.uniform(0.001, 0.02)),
            alpha_r=float(rng.uniform(0.001, 0.02)),
            beta_r=float(rng.uniform(1e-4, 0.005)),
            gamma=float(rng.uniform(1.0, 3.0)),
        ),
        grad_params=GradParamsModel(sqr=1.0, var=float(rng.uniform(0.5, 200.0))),
        max_profiled_replicas=int(rng.integers(1, 9)),
        progress=float(rng.uniform(0, 500)),
        total_progress=float(rng.uniform(1000, 5000)),
        restart_cost_s=float(rng.uniform(10, 60)),
    )


def make_jobs(n: int, rng: np.random.Generator) -> list[JobRecord]:
    return [
        JobRecord(
            key=f"default/job-{i:04d}",
            spec=AdaptiveJobSpec(template=TEMPLATE, min_replicas=1, max_replicas=16),
            status=AdaptiveJobStatus(phase=Phase.RUNNING, hints=synthetic_hints(rng)),
            created=NOW - timedelta(seconds=10 * (n - i)),
        )
        for i in range(n)
    ]


class LocalBackend:
    """The local daemon (SQLite store, one node of ``gpus`` slots), its round only."""

    def __init__(self, jobs: list[JobRecord], gpus: int, home: Path, policy: AdlPolicy) -> None:
        from adl.local.daemon import Daemon, Settings

        self.daemon = Daemon(
            Settings(home=home, slots=gpus, api=False), policy_factory=lambda: policy
        )
        for job in jobs:
            ns, name = job.key.split("/")
            self.daemon.store.add_job(ns, name, job.spec)
            self.daemon.store.set_status(job.key, job.status)
            assert job.status.hints is not None
            self.daemon.store.set_hints(job.key, job.status.hints)
        self.daemon.reload()

    def set_hints(self, key: str, hints: Hints) -> None:
        self.daemon.store.set_hints(key, hints)


def bench(
    n_jobs: int,
    n_gpus: int,
    rounds: int,
    cached: bool,
    refit: float,
    backend: str,
    knobs: dict[str, float] | None = None,
) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    jobs = make_jobs(n_jobs, rng)
    nodes = [NodeInfo(f"node-{i}", GPUS_PER_NODE) for i in range(n_gpus // GPUS_PER_NODE)]
    policy = AdlPolicy(seed=0, **(knobs or {}))
    with tempfile.TemporaryDirectory() as tmp:
        if backend == "local":
            local = LocalBackend(jobs, n_gpus, Path(tmp), policy)
            driver, target = local.daemon.driver, local
        else:
            memory = MemoryWorkerBackend(jobs, nodes)
            driver, target = Driver(memory, policy), memory  # type: ignore[arg-type]
        if not cached:
            driver.speedups = _NoCache()  # type: ignore[assignment]
        durations = []
        hints = {j.key: j.status.hints for j in jobs}
        for r in range(rounds):
            now = NOW + timedelta(seconds=60 * r)
            t0 = time.perf_counter()
            if backend == "local":
                local.daemon.reload()
                local.daemon.schedule(now)  # exactly the daemon's round
            else:
                driver.run_round(now)
            durations.append(time.perf_counter() - t0)
            for key, h in hints.items():
                if h is not None and rng.random() < refit:
                    grad = GradParamsModel(sqr=1.0, var=float(rng.uniform(0.5, 200.0)))
                    hints[key] = h.model_copy(update={"grad_params": grad})
                    target.set_hints(key, hints[key])  # type: ignore[arg-type]
        if backend == "local":
            local.daemon.store.close()
    steady = durations[1:] or durations  # the first round builds every table from scratch
    return {
        "backend": backend,
        "jobs": n_jobs,
        "gpus": n_gpus,
        "cache": cached,
        "first_ms": 1000 * durations[0],
        "p50_ms": 1000 * statistics.median(steady),
        "p95_ms": 1000 * float(np.percentile(steady, 95)),
        "max_ms": 1000 * max(steady),
    }


class _NoCache(SpeedupCache):
    """The old path: a new speedup function (cold tables) for every job every round."""

    def get(self, job: str, hints: Hints | None) -> Any:
        return speedup_from_hints(hints)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--refit", type=float, default=0.2, help="fraction of jobs refitted/round")
    ap.add_argument(
        "--configs", default="100x64,300x512,1000x2048", help="JOBSxGPUS,... (GPUs: 4 per node)"
    )
    ap.add_argument("--backend", choices=("memory", "local"), default="memory")
    ap.add_argument(
        "--no-cache-too", action="store_true", help="also time the old path (tables rebuilt)"
    )
    ap.add_argument("--json", dest="json_path", default=None)
    ap.add_argument(
        "--policy-knob",
        action="append",
        metavar="NAME=VALUE",
        help="an adl policy constant (repeatable), e.g. ramp_factor=2",
    )
    args = ap.parse_args()
    knobs = parse_knobs(args.policy_knob or [])
    rows = []
    print(f"{'backend':>7} {'jobs':>5} {'gpus':>5} {'cache':>6} {'first ms':>9} {'p50 ms':>8} "
          f"{'p95 ms':>8} {'max ms':>8}")  # fmt: skip
    for config in args.configs.split(","):
        n_jobs, n_gpus = (int(x) for x in config.split("x"))
        for cached in (False, True) if args.no_cache_too else (True,):
            row = bench(n_jobs, n_gpus, args.rounds, cached, args.refit, args.backend, knobs)
            rows.append(row)
            print(
                f"{row['backend']:>7} {row['jobs']:>5} {row['gpus']:>5} {row['cache']!s:>6} "
                f"{row['first_ms']:>9.1f} {row['p50_ms']:>8.1f} {row['p95_ms']:>8.1f} "
                f"{row['max_ms']:>8.1f}",
                flush=True,
            )
    if args.json_path:
        with open(args.json_path, "w") as fh:
            json.dump({"rounds": args.rounds, "refit": args.refit, "rows": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
