"""How AdlPolicy.optimize latency grows with jobs and GPUs (synthetic goodput models).

Every job gets a random throughput model, gradient statistics and batch bounds, so its speedup
function is a real :class:`SpeedupFunction` (batch size re-picked per configuration). Each round
feeds back the previous allocation (warm start), ages jobs, and replaces a fraction of the jobs'
speedup functions with freshly fitted ones, as happens when jobs report new hints, so caches are
only partly warm. Prints a table of p50/p95 latency per (jobs, GPUs), wall-clock and CPU time
(``time.process_time``: less sensitive to other processes on the machine); ``--json`` writes it.
``--tiers N`` spreads the jobs over N priorities (each tier is solved on what the ones above left).
``--gpu-types N`` makes a mixed cluster: nodes of N GPU types in turn, each job a random speed
on each type (0.5-2x its model) and one in five restricted to one type; every allocation is
checked to keep each job on one type it allows (1, the default: a uniform cluster as before).

    .venv/bin/python benchmarks/sched_scale.py [--rounds 12] [--tiers 1] [--gpu-types 1]
        [--policy-knob NAME=VALUE ...] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace

import numpy as np

from adl.sched.goodput import BatchBounds, GoodputFunction, GradParams, PerfParams
from adl.sched.placement import validate_allocation
from adl.sched.policy import AdlPolicy
from adl.sched.policy_knobs import parse_knobs
from adl.sched.speedup import SpeedupFunction
from adl.sched.types import JobInfo, NodeInfo

GPUS_PER_NODE = 4


def random_speedup(rng: np.random.Generator) -> SpeedupFunction:
    """A plausible job: compute-bound to sync-bound, low to high gradient noise."""
    beta_c = float(rng.uniform(1e-4, 5e-3))
    perf = PerfParams(
        alpha_c=float(rng.uniform(0.005, 0.05)),
        beta_c=beta_c,
        alpha_n=float(rng.uniform(0.02, 0.3)),
        beta_n=float(rng.uniform(0.0, 0.02)),
        alpha_r=float(rng.uniform(0.005, 0.05)),
        beta_r=float(rng.uniform(0.0, 0.005)),
        gamma=float(rng.uniform(1.0, 3.0)),
    )
    sqr = float(rng.uniform(0.1, 1.0))
    grad = GradParams(sqr=sqr, var=sqr * float(10 ** rng.uniform(-1, 3)))
    b0 = int(2 ** rng.integers(5, 9))
    lo = max(b0 // 8, 1)
    bounds = BatchBounds(
        init_batch_size=b0,
        max_batch_size=b0 * int(2 ** rng.integers(2, 7)),
        local_bsz_bounds=(lo, b0 * 2),
        gradient_accumulation=bool(rng.integers(0, 2)),
    )
    return SpeedupFunction(GoodputFunction(perf, grad, bounds))


def gpu_type_names(count: int) -> list[str]:
    """The cluster's GPU types: "" (unknown) for a uniform one."""
    return [""] if count <= 1 else [f"gpu-type-{t}" for t in range(count)]


def typed(rng: np.random.Generator, job: JobInfo, types: list[str]) -> JobInfo:
    """``job`` with a random speed on each type, and one in five restricted to one type."""
    if len(types) <= 1:
        return job
    speed = {t: float(rng.uniform(0.5, 2.0)) for t in types}
    only = (str(rng.choice(types)),) if rng.random() < 0.2 else ()
    return replace(job, type_speed=speed, gpu_types=only)


def random_job(rng: np.random.Generator, i: int, tiers: int = 1) -> JobInfo:
    known = rng.random() < 0.8
    return JobInfo(
        name=f"job-{i}",
        speedup=random_speedup(rng),
        min_replicas=0,
        max_replicas=int(rng.choice([8, 16, 32, 64])),
        age_s=float(rng.uniform(0, 20000)),
        restarts=int(rng.integers(0, 6)),
        restart_cost_s=float(rng.uniform(20, 60)),
        attained_service_s=float(rng.uniform(0, 50000)),
        remaining_s=float(10 ** rng.uniform(2, 5.5)) if known else None,
        max_profiled_replicas=int(rng.choice([0, 1, 2, 4, 8, 16, 32])),
        submit_order=i,
        priority=i % tiers,
    )


def run_case(
    num_jobs: int,
    num_gpus: int,
    rounds: int,
    seed: int,
    refresh: float,
    tiers: int = 1,
    gpu_types: int = 1,
    knobs: dict[str, float | bool] | None = None,
) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    types = gpu_type_names(gpu_types)
    nodes = [
        NodeInfo(f"node-{i}", GPUS_PER_NODE, gpu_type=types[i % len(types)])
        for i in range(num_gpus // GPUS_PER_NODE)
    ]
    jobs = [random_job(rng, i, tiers) for i in range(num_jobs)]
    # drawn after the jobs, so that a uniform run draws what it drew before types existed
    jobs = [typed(rng, job, types) for job in jobs]
    allowed = {job.name: job.gpu_types for job in jobs}
    policy = AdlPolicy(seed=seed, **(knobs or {}))
    previous: dict[str, list[str]] = {}
    latencies: list[float] = []
    cpu: list[float] = []  # the same rounds in CPU time: less sensitive to other processes
    for _ in range(rounds):
        start, cpu_start = time.perf_counter(), time.process_time()
        allocation = policy.optimize(jobs, nodes, previous)
        latencies.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu_start)
        problems = validate_allocation(allocation, nodes, gpu_types=allowed)
        if problems:
            raise AssertionError(f"invalid allocation: {problems[:3]}")
        previous = allocation
        jobs = [
            replace(
                job,
                age_s=job.age_s + 60.0,
                attained_service_s=job.attained_service_s + 60.0 * len(allocation[job.name]),
                remaining_s=None
                if job.remaining_s is None
                else max(job.remaining_s - 60.0 * len(allocation[job.name]), 1.0),
                max_profiled_replicas=max(job.max_profiled_replicas, len(allocation[job.name])),
                speedup=random_speedup(rng) if rng.random() < refresh else job.speedup,
            )
            for job in jobs
        ]
    ms = sorted(x * 1e3 for x in latencies)
    cpu_ms = sorted(x * 1e3 for x in cpu)
    return {
        "jobs": num_jobs,
        "gpus": num_gpus,
        "tiers": tiers,
        "gpu_types": gpu_types,
        "rounds": rounds,
        "p50_ms": statistics.median(ms),
        "p95_ms": float(np.percentile(ms, 95)),
        "max_ms": ms[-1],
        "cpu_p50_ms": statistics.median(cpu_ms),
        "cpu_p95_ms": float(np.percentile(cpu_ms, 95)),
        "allocated_gpus": sum(len(v) for v in previous.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[100, 300, 1000])
    parser.add_argument("--gpus", type=int, nargs="+", default=[64, 512, 2048])
    parser.add_argument("--rounds", type=int, default=12)
    parser.add_argument("--refresh", type=float, default=0.1, help="fraction of new hints/round")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tiers", type=int, default=1, help="priorities the jobs are spread over")
    parser.add_argument("--gpu-types", type=int, default=1, help="GPU types of the cluster")
    parser.add_argument("--json", type=str, default=None)
    parser.add_argument(
        "--policy-knob", action="append", default=[], metavar="NAME=VALUE", help="adl knobs"
    )
    args = parser.parse_args()
    try:
        knobs = parse_knobs(args.policy_knob)
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None

    rows = []
    print(
        f"{'jobs':>6} {'GPUs':>6} {'p50 ms':>9} {'p95 ms':>9} {'max ms':>9}"
        f" {'CPU p50':>9} {'CPU p95':>9} {'alloc':>6}"
    )
    for num_jobs in args.jobs:
        for num_gpus in args.gpus:
            row = run_case(
                num_jobs,
                num_gpus,
                args.rounds,
                args.seed,
                args.refresh,
                args.tiers,
                args.gpu_types,
                knobs,
            )
            rows.append(row)
            print(
                f"{num_jobs:>6} {num_gpus:>6} {row['p50_ms']:>9.1f} {row['p95_ms']:>9.1f}"
                f" {row['max_ms']:>9.1f} {row['cpu_p50_ms']:>9.1f} {row['cpu_p95_ms']:>9.1f}"
                f" {row['allocated_gpus']:>6}",
                flush=True,
            )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"rows": rows, "args": vars(args)}, fh, indent=2)


if __name__ == "__main__":
    main()
