"""Latency of one full scheduling round as the backends run it (``adl.controller.rounds``):
JobInfos built from job records and their hints, then ``AdlPolicy.optimize``.

Each job carries synthetic hints (a random throughput model, gradient statistics, batch
bounds), as a running job would have reported. Every round feeds the previous answer back as
the jobs' desired allocations, and a fraction of the jobs report refitted gradient statistics
(a new speedup model), as happens every ~30 s in a real cluster. Rounds run with and without a
``SpeedupCache`` (the cache keeps a job's speedup function while its model is unchanged, so the
policy's per-function tables stay warm). Prints p50/p95 per configuration; ``--json`` writes it.

    .venv/bin/python benchmarks/round_latency.py [--rounds 10] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np

from adl.controller.rounds import JobRecord, SpeedupCache, run_round
from adl.models import (
    AdaptiveJobSpec,
    AdaptiveJobStatus,
    GradParamsModel,
    Hints,
    PerfParamsModel,
    Phase,
)
from adl.sched.policy import AdlPolicy
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


def bench(n_jobs: int, n_gpus: int, rounds: int, cached: bool, refit: float) -> dict[str, float]:
    rng = np.random.default_rng(0)
    jobs = make_jobs(n_jobs, rng)
    nodes = [NodeInfo(f"node-{i}", GPUS_PER_NODE) for i in range(n_gpus // GPUS_PER_NODE)]
    policy, cache = AdlPolicy(seed=0), SpeedupCache() if cached else None
    durations = []
    for r in range(rounds):
        now = NOW + timedelta(seconds=60 * r)
        result = run_round(policy, jobs, nodes, now, cache)
        durations.append(result.duration_s)
        updated = []
        for job in jobs:
            hints = job.status.hints
            assert hints is not None
            if rng.random() < refit:
                grad = GradParamsModel(sqr=1.0, var=float(rng.uniform(0.5, 200.0)))
                hints = hints.model_copy(update={"grad_params": grad})
            status = job.status.model_copy(
                update={"hints": hints, "allocation": result.allocation.get(job.key, [])}
            )
            updated.append(replace(job, status=status, desired=result.allocation.get(job.key)))
        jobs = updated
    steady = durations[1:] or durations  # the first round builds every table from scratch
    return {
        "jobs": n_jobs,
        "gpus": n_gpus,
        "cache": cached,
        "first_ms": 1000 * durations[0],
        "p50_ms": 1000 * statistics.median(steady),
        "p95_ms": 1000 * float(np.percentile(steady, 95)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--refit", type=float, default=0.2, help="fraction of jobs refitted/round")
    ap.add_argument("--configs", default="16x16,64x64,200x64", help="JOBSxGPUS,...")
    ap.add_argument("--json", dest="json_path", default=None)
    args = ap.parse_args()
    rows = []
    for config in args.configs.split(","):
        n_jobs, n_gpus = (int(x) for x in config.split("x"))
        for cached in (False, True):
            rows.append(bench(n_jobs, n_gpus, args.rounds, cached, args.refit))
    print(f"{'jobs':>5} {'gpus':>5} {'cache':>6} {'first ms':>9} {'p50 ms':>8} {'p95 ms':>8}")
    for row in rows:
        print(
            f"{row['jobs']:>5} {row['gpus']:>5} {row['cache']!s:>6} {row['first_ms']:>9.1f} "
            f"{row['p50_ms']:>8.1f} {row['p95_ms']:>8.1f}"
        )
    if args.json_path:
        with open(args.json_path, "w") as fh:
            json.dump({"rounds": args.rounds, "refit": args.refit, "rows": rows}, fh, indent=2)


if __name__ == "__main__":
    main()
