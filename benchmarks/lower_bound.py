"""The LP lower bound on average JCT beside the alone-on-the-cluster bound and simulated policies.

For each workload: the alone bound (every job alone on the cluster from submission, restart
delay included), the LP bound of :mod:`adl.sched.sim.bound`, each replayed policy's average
JCT and its ratio to the LP bound. It also checks what the bound promises: LP bound >= alone
bound and <= every replayed policy (a violation is printed and makes the exit status 1).

    .venv/bin/python benchmarks/lower_bound.py [--workloads 1,2,3,4] [--generated 2]
        [--loads 1.0] [--policies adl,tiresias,optimus] [--slot 600] [--slots 1200,600]
        [--jobs 1] [--json PATH]

``--slots`` also solves each workload at these slot lengths (how the bound moves with them);
``--policies ''`` skips the replays.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from adl.sched.sim.bound import lower_bound  # noqa: E402
from adl.sched.sim.generate import generate_workload  # noqa: E402
from adl.sched.sim.metrics import summarize  # noqa: E402
from adl.sched.sim.policies import make_policy, rounds_on_events  # noqa: E402
from adl.sched.sim.simulator import SimConfig, simulate  # noqa: E402
from adl.sched.sim.traces import default_traces_dir, load_traces  # noqa: E402
from adl.sched.sim.workload import WorkloadJob, load_workload  # noqa: E402


def workload_jobs(label: str) -> list[WorkloadJob]:
    """``workload-N`` (packaged) or ``gen-SEED@LOADx`` (generated)."""
    if label.startswith("gen-"):
        seed, _, load = label[4:].partition("@")
        return generate_workload(int(seed), load=float(load.rstrip("x") or 1.0))
    return load_workload(default_traces_dir() / "workloads" / f"{label}.csv")


def replay(label: str, policy: str) -> dict[str, Any]:
    t0 = time.perf_counter()
    result = simulate(
        workload_jobs(label),
        make_policy(policy, 0),
        traces=load_traces(),
        config=SimConfig(rounds_on_events=rounds_on_events(policy)),
    )
    row = summarize(result)
    return {"avg_jct_s": row["avg_jct_s"], "wall_s": time.perf_counter() - t0}


def bound(label: str, slot: int) -> dict[str, Any]:
    res = lower_bound(workload_jobs(label), slot_s=slot, traces=load_traces())
    return {
        "avg_jct_s": res.avg_jct_s,
        "alone_avg_jct_s": res.alone_avg_jct_s,
        "solve_s": res.solve_s,
        "lp_rounds": res.rounds,
        "variables": res.variables,
        "constraints": res.constraints,
    }


def run(kind: str, label: str, arg: str | int) -> tuple[str, str, str | int, dict[str, Any]]:
    out = bound(label, int(arg)) if kind == "bound" else replay(label, str(arg))
    return kind, label, arg, out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", default="1,2,3,4")
    parser.add_argument("--generated", type=int, default=2)
    parser.add_argument("--loads", default="1.0")
    parser.add_argument("--policies", default="adl,tiresias,optimus")
    parser.add_argument("--slot", type=int, default=600)
    parser.add_argument("--slots", default="", help="extra slot lengths to show the trend")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    if not 1 <= args.jobs <= 8:
        raise SystemExit("--jobs must be 1..8")
    labels = [f"workload-{w.strip()}" for w in args.workloads.split(",") if w.strip()]
    loads = [float(x) for x in args.loads.split(",") if x.strip()]
    labels += [f"gen-{k}@{load:g}x" for load in loads for k in range(1, args.generated + 1)]
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    slots = sorted({args.slot, *(int(s) for s in args.slots.split(",") if s.strip())})
    tasks: list[tuple[str, str, str | int]] = [("bound", w, s) for w in labels for s in slots]
    tasks += [("replay", w, p) for w in labels for p in policies]
    results: dict[str, dict[str, Any]] = {w: {"bound": {}, "policies": {}} for w in labels}
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for kind, label, arg, out in pool.map(run, *zip(*tasks, strict=True)):
            key = "bound" if kind == "bound" else "policies"
            results[label][key][str(arg)] = out
            print(f"  done {kind} {label} {arg}", file=sys.stderr, flush=True)
    head = f"{'workload':<16} {'alone s':>8} {'LP bound s':>10} {'solve s':>8}"
    head += "".join(f" {p + ' s':>11} {p + '/LB':>9}" for p in policies)
    print(head)
    failures = []
    for w in labels:
        b = results[w]["bound"][str(args.slot)]
        line = f"{w:<16} {b['alone_avg_jct_s']:>8.0f} {b['avg_jct_s']:>10.0f} {b['solve_s']:>8.1f}"
        if b["avg_jct_s"] < b["alone_avg_jct_s"] - 1e-6:
            failures.append(f"{w}: LP bound below the alone bound")
        for p in policies:
            jct = results[w]["policies"][p]["avg_jct_s"]
            line += f" {jct:>11.0f} {jct / b['avg_jct_s']:>9.2f}"
            if jct < b["avg_jct_s"]:
                failures.append(f"{w}: {p} ({jct:.0f} s) beats the bound ({b['avg_jct_s']:.0f} s)")
        print(line)
    if len(slots) > 1:
        print("\nLP bound (s) by slot length: " + "  ".join(f"{s} s" for s in slots))
        for w in labels:
            row = results[w]["bound"]
            print(f"{w:<16} " + "  ".join(f"{row[str(s)]['avg_jct_s']:.0f}" for s in slots))
    for f in failures:
        print("VIOLATION:", f)
    if args.json:
        payload = {"slot_s": args.slot, "slots": slots, "workloads": results, "failures": failures}
        Path(args.json).write_text(json.dumps(payload, indent=2))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
