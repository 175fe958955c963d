"""Policy exploration: named AdlPolicy variants on published + generated workloads, with a
per-application breakdown (JCT, queueing before the first start, GPUs while running) beside the
physical limit of each application (alone on the cluster from submission).

    PYTHONPATH=. .venv/bin/python benchmarks/policy_explore.py --variants base,srpt1
        [--workloads 1,2,3,4] [--generated 2] [--jobs 2] [--traces DIR] [--json PATH]
        [--breakdown] [--hide-remaining] [--restart-delay 30] [--reported-restart-delay S]
        [--oracle-info] [--fixed-rounds] [--load 1.0] [--sia-restarts] [--nodes 16]
        [--no-predict]

A variant ``@pollux`` (any registry name after ``@``) replays that baseline in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from adl.sched.policy import AdlPolicy  # noqa: E402
from adl.sched.sim.generate import generate_workload  # noqa: E402
from adl.sched.sim.metrics import summarize  # noqa: E402
from adl.sched.sim.policies import make_policy, rounds_on_events  # noqa: E402
from adl.sched.sim.published import (  # noqa: E402
    POLLUX_MAKESPAN_S,
    POLLUX_P99_JCT_S,
    published_avg_jct,
)
from adl.sched.sim.simulator import SIA_RESTART_S, SimConfig, simulate  # noqa: E402
from adl.sched.sim.traces import default_traces_dir, load_traces  # noqa: E402
from adl.sched.sim.workload import load_workload  # noqa: E402
from adl.sched.types import Policy  # noqa: E402

#: variant name -> AdlPolicy knobs (empty = defaults)
VARIANTS: dict[str, dict[str, float]] = {
    "base": {},
    "srpt1": {"srpt_power": 1.0},
    "srpt075": {"srpt_power": 0.75},
    "srpt025": {"srpt_power": 0.25},
    "fair0": {"fairness": 0.0},
    "fair05": {"fairness": 0.5},
    "ramp4": {"ramp_factor": 4.0},
    "grow1": {"grow_restarts": 1.0},
    "horizon3600": {"restart_horizon_s": 3600.0},
    "horizon900": {"restart_horizon_s": 900.0},
}


def parse_variant(spec: str) -> tuple[str, dict[str, float]]:
    """``name`` from :data:`VARIANTS`, ``name:knob=value+knob=value`` ad hoc, or ``@policy``:
    a baseline from the registry (``@pollux``), replayed as its figures were produced."""
    if spec.startswith("@"):
        return spec, {}
    if ":" not in spec:
        return spec, VARIANTS[spec]
    name, rest = spec.split(":", 1)
    knobs = {k: float(v) for k, v in (kv.split("=") for kv in rest.split("+"))}
    return name, knobs


def app_limits(traces: Path) -> dict[str, float]:
    from physical_limit import app_limits as limits

    return limits(traces)


def run_one(
    args: tuple[str, dict[str, float], str, str, int | None, str | None, SimConfig, float],
) -> dict[str, Any]:
    variant, knobs, workload, traces, gen_seed, path, config, load = args
    apps = load_traces(traces)
    jobs = load_workload(path) if path else generate_workload(int(gen_seed or 1), load=load)
    t0 = time.perf_counter()
    policy: Policy
    if variant.startswith("@"):
        policy = make_policy(variant[1:], 0, None)
        config = replace(config, rounds_on_events=rounds_on_events(variant[1:]))
    else:
        policy = AdlPolicy(seed=0, **knobs)
    result = simulate(jobs, policy, traces=apps, config=config)
    row = summarize(result)
    row.update(variant=variant, workload=workload, wall_s=time.perf_counter() - t0)
    # per-application breakdown from the timeline
    first: dict[str, int] = {}
    gpu_s: dict[str, float] = defaultdict(float)
    run_s: dict[str, float] = defaultdict(float)
    # GPUs held per round: the allocation made at time t holds for the next round
    times = [t for t, _ in result.timeline]
    finished = max((j.completion_s or 0 for j in result.jobs), default=0)
    held = 0.0
    for i, (t, alloc) in enumerate(result.timeline):
        nxt = times[i + 1] if i + 1 < len(times) else t + 60
        held += sum(alloc.values()) * (min(nxt, max(finished, t)) - t)  # none after the last job
        for name, g in alloc.items():
            if g > 0:
                first.setdefault(name, t)
                gpu_s[name] += g * (nxt - t)
                run_s[name] += nxt - t
    per_app: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for j in result.jobs:
        if j.jct_s is None:
            continue
        a = per_app[j.application]
        a["jct"].append(j.jct_s)
        a["queue"].append(first.get(j.name, j.submit_s) - j.submit_s)
        a["gpus"].append(gpu_s[j.name] / max(run_s[j.name], 1.0))
        a["restarts"].append(j.restarts)
    # The makespan's anatomy: every GPU-second of it is either held by a job or idle, so
    # makespan x GPUs = held + idle (GPU-hours), whichever policy ran.
    row["held_gpu_h"] = held / 3600
    row["idle_gpu_h"] = row["makespan_s"] * result.total_gpus / 3600 - row["held_gpu_h"]
    row["restart_kinds"] = restart_kinds(
        result.timeline, {j.name: j.completion_s for j in result.jobs}
    )
    row["apps"] = {
        app: {k: float(np.mean(v)) for k, v in d.items()} | {"n": len(d["jct"])}
        for app, d in per_app.items()
    }
    return row


def restart_kinds(
    timeline: list[tuple[int, dict[str, int]]], done_at: dict[str, int | None]
) -> dict[str, float]:
    """Allocation changes per job by kind, from the GPU counts after each round: the first
    start, a resume after a preemption, a grow, a shrink, a preemption to 0 GPUs (no restart
    by itself; the resume is one), and a move at the same count (counts alone cannot see it,
    so it is what is left of the job's restarts)."""
    kinds: dict[str, float] = defaultdict(float)
    last: dict[str, int] = {}
    started: set[str] = set()
    for t, alloc in timeline:
        for name in set(last) | set(alloc):
            before, after = last.get(name, 0), alloc.get(name, 0)
            end = done_at.get(name)
            if before == after or (after == 0 and end is not None and end <= t):
                continue
            if before == 0:
                kinds["resume" if name in started else "start"] += 1
                started.add(name)
            elif after == 0:
                kinds["preempt"] += 1
            else:
                kinds["grow" if after > before else "shrink"] += 1
        last = {n: g for n, g in alloc.items() if g > 0}
    return {k: v / max(len(done_at), 1) for k, v in sorted(kinds.items())}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default="base")
    ap.add_argument("--workloads", default="1,2,3,4")
    ap.add_argument("--generated", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--traces", default=str(default_traces_dir()))
    ap.add_argument("--json")
    ap.add_argument("--breakdown", action="store_true")
    ap.add_argument("--hide-remaining", action="store_true", help="jobs do not declare lengths")
    ap.add_argument(
        "--restart-delay", type=int, default=30, help="what-if: seconds lost per (re)start"
    )
    ap.add_argument(
        "--reported-restart-delay",
        type=int,
        help="what-if: the restart cost jobs report to the policy (default: --restart-delay)",
    )
    ap.add_argument(
        "--oracle-info",
        action="store_true",
        help="what-if: jobs report true speedups and remaining work (no learning, no ramp cap)",
    )
    ap.add_argument(
        "--fixed-rounds",
        action="store_true",
        help="reschedule only every 60 s, not also when a job arrives or finishes",
    )
    ap.add_argument("--load", type=float, default=1.0, help="job load of generated workloads")
    ap.add_argument(
        "--sia-restarts",
        action="store_true",
        help="what-if: Sia's measured restart cost per model instead of a flat --restart-delay",
    )
    ap.add_argument("--nodes", type=int, default=16, help="what-if: nodes of 4 GPUs")
    ap.add_argument(
        "--no-predict",
        action="store_true",
        help="with --hide-remaining: no prediction from completed jobs (LAS only)",
    )
    a = ap.parse_args()
    config = SimConfig(
        num_nodes=a.nodes,
        restart_delay_by_app=SIA_RESTART_S if a.sia_restarts else (),
        predict_remaining=not a.no_predict,
        hide_remaining=a.hide_remaining,
        restart_delay_s=a.restart_delay,
        reported_restart_s=a.reported_restart_delay,
        oracle_info=a.oracle_info,
        rounds_on_events=not a.fixed_rounds,
    )
    traces = Path(a.traces)
    tasks = []
    for spec in a.variants.split(","):
        name, knobs = parse_variant(spec)
        for w in [x for x in a.workloads.split(",") if x]:
            path = str(traces / "workloads" / f"workload-{w}.csv")
            tasks.append((name, knobs, f"workload-{w}", str(traces), None, path, config, 1.0))
        for s in range(1, a.generated + 1):
            label = f"generated-{s}" if a.load == 1.0 else f"gen-{s}@{a.load:g}x"
            tasks.append((name, knobs, label, str(traces), s, None, config, a.load))
    with ProcessPoolExecutor(a.jobs) as pool:
        rows = list(pool.map(run_one, tasks))
    limits = app_limits(traces)
    print(
        f"{'variant':14s} {'workload':12s} {'avgJCT':>7s} {'xPollux':>7s} {'p99':>7s} "
        f"{'p99/P':>6s} {'makesp':>7s} {'mk/P':>5s} {'heldGh':>6s} {'idleGh':>6s} {'rst':>4s} "
        f"{'ms95':>5s} {'wall':>5s}"
    )
    by_variant: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_variant[r["variant"]].append(r)
        pub = published_avg_jct(r["workload"], "adl")
        p99 = POLLUX_P99_JCT_S.get(r["workload"])
        mk = POLLUX_MAKESPAN_S.get(r["workload"])
        print(
            f"{r['variant']:14s} {r['workload']:12s} {r['avg_jct_s']:7.0f} "
            f"{(r['avg_jct_s'] / pub if pub else float('nan')):7.3f} {r['p99_jct_s']:7.0f} "
            f"{(r['p99_jct_s'] / p99 if p99 else float('nan')):6.3f} {r['makespan_s']:7.0f} "
            f"{(r['makespan_s'] / mk if mk else float('nan')):5.2f} {r['held_gpu_h']:6.0f} "
            f"{r['idle_gpu_h']:6.0f} {r['restarts_per_job']:4.1f} "
            f"{r['round_ms_p95']:5.1f} {r['wall_s']:5.0f}"
        )
        if a.breakdown:
            kinds = r["restart_kinds"]
            print("    changes/job: " + " ".join(f"{k}={v:.2f}" for k, v in kinds.items()))
            for app, d in sorted(r["apps"].items()):
                print(
                    f"    {app:12s} n={d['n']:3d} jct={d['jct']:7.0f} alone={limits[app]:6.0f} "
                    f"queue={d['queue']:6.0f} gpus={d['gpus']:5.1f} rst={d['restarts']:4.1f} "
                    f"share={d['jct'] * d['n'] / (r['avg_jct_s'] * r['jobs']):.2f}"
                )
    for v, rs in by_variant.items():
        pub = [r for r in rs if r["workload"].startswith("workload")]
        gen = [r for r in rs if r["workload"].startswith(("generated", "gen-"))]
        print(
            f"MEAN {v:14s} "
            f"published={np.mean([r['avg_jct_s'] for r in pub]) if pub else float('nan'):.0f} "
            f"generated={np.mean([r['avg_jct_s'] for r in gen]) if gen else float('nan'):.0f} "
            f"per-wl={'/'.join(str(round(r['avg_jct_s'])) for r in rs)}"
        )
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
