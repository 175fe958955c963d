"""The LP lower bound on average JCT beside the alone-on-the-cluster bound and simulated policies.

For each workload: the alone bound (every job alone on the cluster from submission, restart
delay included), the LP bound of :mod:`adl.sched.sim.bound`, each replayed policy's average
JCT and its ratio to the LP bound. It also checks what the bound promises: LP bound >= alone
bound and <= every replayed policy (a violation is printed and makes the exit status 1).

    .venv/bin/python benchmarks/lower_bound.py [--workloads 1,2,3,4] [--generated 2]
        [--loads 1.0] [--policies adl,tiresias,optimus] [--slot 600] [--slots 1200,600]
        [--jobs 1] [--json PATH]

``--slots`` also solves each workload at these slot lengths (how the bound moves with them);
``--policies ''`` skips the replays. ``--makespan`` adds the makespan bound of
:mod:`adl.sched.sim.bound_makespan` beside each policy's makespan, and ``--deadline-of POLICY``
the lowest average JCT the relaxation allows a schedule whose makespan is no longer than that
policy's (what a policy could reach on the mean without a longer makespan).
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
from adl.sched.sim.bound_makespan import deadline_avg_jct_bound, makespan_bound  # noqa: E402
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
    return {
        "avg_jct_s": row["avg_jct_s"],
        "makespan_s": row["makespan_s"],
        "wall_s": time.perf_counter() - t0,
    }


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


def span_bound(label: str, slot: int) -> dict[str, Any]:
    res = makespan_bound(workload_jobs(label), slot_s=slot, traces=load_traces())
    return {
        "makespan_s": res.makespan_s,
        "alone_s": res.alone_s,
        "solves": res.solves,
        "unsettled": res.unsettled,
        "solve_s": res.solve_s,
    }


def deadline_bound(label: str, slot: int, makespan_s: float) -> dict[str, Any]:
    t0 = time.perf_counter()
    jobs = workload_jobs(label)
    value = deadline_avg_jct_bound(jobs, makespan_s, slot_s=slot, traces=load_traces())
    return {"avg_jct_s": value, "makespan_s": makespan_s, "solve_s": time.perf_counter() - t0}


def run(kind: str, label: str, arg: str | int) -> tuple[str, str, str | int, dict[str, Any]]:
    if kind == "bound":
        out = bound(label, int(arg))
    elif kind == "makespan":
        out = span_bound(label, int(arg))
    else:
        out = replay(label, str(arg))
    return kind, label, arg, out


def run_deadline(label: str, slot: int, makespan_s: float) -> tuple[str, dict[str, Any]]:
    return label, deadline_bound(label, slot, makespan_s)


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
    parser.add_argument("--makespan", action="store_true", help="also the makespan bound")
    parser.add_argument(
        "--deadline-of",
        default="",
        metavar="POLICY",
        help="also the mean-JCT bound of schedules no longer than this replayed policy's",
    )
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
    if args.makespan:
        tasks += [("makespan", w, args.slot) for w in labels]
    if args.deadline_of and args.deadline_of not in policies:
        raise SystemExit("--deadline-of must name one of --policies")
    results: dict[str, dict[str, Any]] = {
        w: {"bound": {}, "policies": {}, "makespan": {}} for w in labels
    }
    keys = {"bound": "bound", "replay": "policies", "makespan": "makespan"}
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        for kind, label, arg, out in pool.map(run, *zip(*tasks, strict=True)):
            results[label][keys[kind]][str(arg)] = out
            print(f"  done {kind} {label} {arg}", file=sys.stderr, flush=True)
        if args.deadline_of:
            spans = [results[w]["policies"][args.deadline_of]["makespan_s"] for w in labels]
            slots_ = [args.slot] * len(labels)
            for label, out in pool.map(run_deadline, labels, slots_, spans):
                results[label]["deadline"] = out
                print(f"  done deadline {label}", file=sys.stderr, flush=True)
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
    if args.makespan:
        print(f"\n{'workload':<16} {'alone s':>8} {'makespan LB':>11} {'unsettled':>9}", end="")
        print("".join(f" {p + ' s':>11} {p + '/LB':>9}" for p in policies))
        for w in labels:
            m = results[w]["makespan"][str(args.slot)]
            line = f"{w:<16} {m['alone_s']:>8.0f} {m['makespan_s']:>11.0f} {m['unsettled']:>9d}"
            for p in policies:
                span = results[w]["policies"][p]["makespan_s"]
                line += f" {span:>11.0f} {span / m['makespan_s']:>9.2f}"
                if span < m["makespan_s"] - 1e-6:
                    failures.append(f"{w}: {p}'s makespan beats the makespan bound")
            print(line)
    if args.deadline_of:
        p = args.deadline_of
        print(f"\nmean-JCT bound of schedules no longer than {p}'s makespan")
        print(f"{'workload':<16} {'makespan s':>10} {'LB s':>8} {'free LB s':>9} {p + ' s':>9}")
        for w in labels:
            d = results[w]["deadline"]
            free = results[w]["bound"][str(args.slot)]["avg_jct_s"]
            jct = results[w]["policies"][p]["avg_jct_s"]
            value = d["avg_jct_s"]
            shown = f"{value:>8.0f}" if value is not None else f"{'none':>8}"
            print(f"{w:<16} {d['makespan_s']:>10.0f} {shown} {free:>9.0f} {jct:>9.0f}")
            if value is None or value > jct + 1e-6:
                failures.append(f"{w}: {p} beats the deadline bound of its own makespan")
    for f in failures:
        print("VIOLATION:", f)
    if args.json:
        payload = {"slot_s": args.slot, "slots": slots, "workloads": results, "failures": failures}
        Path(args.json).write_text(json.dumps(payload, indent=2))
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
