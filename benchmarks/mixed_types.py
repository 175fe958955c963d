"""adl against Sia, Gavel and a type-agnostic Pollux on mixed GPU-type clusters (issue 33).

Replays the Pollux workloads on two 64-GPU clusters of several types
(:mod:`adl.sched.sim.gpu_mix`: three types, 16 x V100 + 24 x P100 + 24 x K80; two types,
32 x V100 + 32 x K80), each application's compute speed per type derived from Gavel's
published throughputs (``adl/sched/sim/data/gavel/README.md``). Policies, in one run:

- ``adl``: adl's own policy, per type (a round also when a job arrives or finishes);
- ``sia``: Sia's heterogeneous program (configurations per type, one type per job);
- ``gavel``: Gavel's max-min fairness over per-type time fractions (an LP, HiGHS), rounded
  each 6-minute round; fixed batch and GPU count (the workload's), true per-type
  throughputs known up front as Gavel assumes;
- ``pollux-agnostic``: Pollux's genetic search, blind to GPU types (a job may span types
  and then runs at its slowest type's pace).

Adaptive jobs learn one throughput model per type they ran on; with the default settings
the driver estimates a job's speed on a type it has not run on from jobs of its application
that ran on both (:mod:`adl.sched.type_history`, as the operator's round does too);
``--no-learn-types`` counts such types as 1.0. Every adaptive job profiles one GPU of each
type on arrival (Sia's bootstrapping), adl's included; ``--explore-types`` replays adl as
production runs it instead: no profiling, and a running job tries a free type it has not
measured (:mod:`adl.sched.type_explore`). Prints, per cluster, every policy's means over the
workloads (average JCT, p99 JCT, makespan, GPU-hours, restarts per job, round p95, and the
rounds in which some job spanned types), the average JCT per workload, and adl against Sia.

    nice -n 19 flock /tmp/adl-heavy.lock .venv/bin/python benchmarks/mixed_types.py \
        [--clusters three-types,two-types] [--workloads 1,2,3,4] \
        [--policies adl,sia,gavel,pollux-agnostic] [--first N] [--no-learn-types] \
        [--explore-types] \
        [--policy-knob NAME=VALUE ...] \
        [--jobs N] [--json benchmarks/results/cpu-2026-11-28/mixed_types.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from adl.sched import registry  # noqa: E402
from adl.sched.policy_knobs import parse_knobs  # noqa: E402
from adl.sched.sim.gpu_mix import MIXES, mixed_config  # noqa: E402
from adl.sched.sim.metrics import summarize  # noqa: E402
from adl.sched.sim.policies import make_policy, rounds_on_events  # noqa: E402
from adl.sched.sim.simulator import simulate  # noqa: E402
from adl.sched.sim.traces import default_traces_dir  # noqa: E402
from adl.sched.sim.workload import load_workload  # noqa: E402
from adl.sched.types import Allocation, JobInfo, NodeInfo, Policy  # noqa: E402

DEFAULT_POLICIES = ("adl", "sia", "gavel", "pollux-agnostic")


class TypeCheck:
    """Wraps a policy and counts the rounds in which some job's GPUs span types, and the moves
    of a running job from one type to another."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.mixed_rounds = 0
        self.type_changes = 0
        #: type moves of each job that moved (the per-application account reads them)
        self.moves_by_job: dict[str, int] = {}

    def bind_oracle(self, oracle: Any) -> None:
        # the simulator hands it over where the inner policy's registry entry says so (the
        # entry is passed to ``simulate``: the wrapper has none of its own)
        self.inner.bind_oracle(oracle)  # type: ignore[attr-defined]

    def optimize(
        self, jobs: Sequence[JobInfo], nodes: Sequence[NodeInfo], previous: Mapping[str, list[str]]
    ) -> Allocation:
        answer = self.inner.optimize(jobs, nodes, previous)
        kind = {n.name: n.gpu_type for n in nodes}
        if any(len({kind[n] for n in held}) > 1 for held in answer.values()):
            self.mixed_rounds += 1
        for name, held in answer.items():
            before = previous.get(name)
            if held and before and kind.get(before[0]) != kind.get(held[0]):
                self.type_changes += 1
                self.moves_by_job[name] = self.moves_by_job.get(name, 0) + 1
        return answer


@dataclass(frozen=True)
class Task:
    cluster: str
    workload: int
    policy: str
    first: int | None
    learn_types: bool
    knobs: tuple[tuple[str, float], ...] = ()
    #: adl only: no profiling on arrival; running jobs try unmeasured types instead
    explore: bool = False


def run_task(task: Task) -> dict[str, Any]:
    path = default_traces_dir() / "workloads" / f"workload-{task.workload}.csv"
    jobs = load_workload(path)[: task.first]
    config = mixed_config(
        MIXES[task.cluster],
        rounds_on_events=rounds_on_events(task.policy),
        learn_type_speeds=task.learn_types,
    )
    if task.explore and task.policy == "adl":
        config = replace(config, profile_types=False, explore_types=True)
    knobs = dict(task.knobs) if task.policy == "adl" else None
    policy = TypeCheck(make_policy(task.policy, knobs=knobs))
    t0 = time.perf_counter()
    result = simulate(jobs, policy, config=config, entry=registry.entry(task.policy))
    summary = summarize(result)
    summary["gpu_hours"] = sum(j.gpu_seconds for j in result.jobs) / 3600
    summary["mixed_rounds"] = policy.mixed_rounds
    summary["type_changes_per_job"] = policy.type_changes / max(len(result.jobs), 1)
    summary["type_moves_by_job"] = dict(policy.moves_by_job)
    summary["wall_s"] = time.perf_counter() - t0
    summary["jct_by_job"] = {j.name: j.jct_s for j in result.jobs}
    by_type: dict[str, dict[str, float]] = {}
    for j in result.jobs:
        for gpu_type, seconds in j.gpu_seconds_by_type:
            per = by_type.setdefault(j.application, {})
            per[gpu_type] = per.get(gpu_type, 0.0) + seconds / 3600
    summary["gpu_hours_by_app_and_type"] = by_type
    return {"cluster": task.cluster, "workload": task.workload, "policy": task.policy, **summary}


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    return float(np.mean([r[key] for r in rows]))


def report(rows: list[dict[str, Any]], policies: list[str], clusters: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for cluster in clusters:
        mix = MIXES[cluster]
        mine = [r for r in rows if r["cluster"] == cluster]
        workloads = sorted({r["workload"] for r in mine})
        print(f"\n### {cluster}: {mix.describe()} (means over workloads {workloads})\n")
        print(
            "| policy | avg JCT (h) | p99 JCT (h) | makespan (h) | GPU-hours | restarts/job "
            "| round p95 (ms) | rounds mixing types | type changes/job |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        means: dict[str, dict[str, float]] = {}
        for policy in policies:
            rs = [r for r in mine if r["policy"] == policy]
            if not rs:
                continue
            m = {
                k: _mean(rs, k)
                for k in (
                    "avg_jct_s",
                    "p99_jct_s",
                    "makespan_s",
                    "gpu_hours",
                    "restarts_per_job",
                    "round_ms_p95",
                    "mixed_rounds",
                )
            }
            # saved runs from before the column existed have none
            m["type_changes_per_job"] = float(
                np.mean([r.get("type_changes_per_job", np.nan) for r in rs])
            )
            means[policy] = m
            print(
                f"| {policy} | {m['avg_jct_s'] / 3600:.2f} | {m['p99_jct_s'] / 3600:.2f} "
                f"| {m['makespan_s'] / 3600:.2f} | {m['gpu_hours']:.0f} "
                f"| {m['restarts_per_job']:.2f} | {m['round_ms_p95']:.1f} "
                f"| {m['mixed_rounds']:.0f} | {m['type_changes_per_job']:.2f} |"
            )
        print("\naverage JCT (h) per workload:\n")
        print("| policy | " + " | ".join(f"workload-{w}" for w in workloads) + " |")
        print("|---|" + "---|" * len(workloads))
        for policy in policies:
            cells = []
            for w in workloads:
                hit = [r for r in mine if r["policy"] == policy and r["workload"] == w]
                cells.append(f"{hit[0]['avg_jct_s'] / 3600:.2f}" if hit else "")
            print(f"| {policy} | " + " | ".join(cells) + " |")
        if "adl" in means and "sia" in means:
            a, s = means["adl"], means["sia"]
            jct = a["avg_jct_s"] / s["avg_jct_s"] - 1
            p99 = a["p99_jct_s"] / s["p99_jct_s"] - 1
            print(f"\nadl vs sia: average JCT {jct:+.1%}, p99 {p99:+.1%} (goal: <= -20%, <= 0%)")
            by_app(mine, policies)
        by_type(mine, policies)
        out[cluster] = means
    return out


def by_app(rows: list[dict[str, Any]], policies: list[str]) -> None:
    """Mean JCT per application (over every workload's jobs of it), and the share of the sum
    of JCTs each application makes up under Sia: which jobs move the average."""
    apps: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        for name, jct in r["jct_by_job"].items():
            app = name.rsplit("-", 1)[0]
            apps.setdefault(app, {}).setdefault(r["policy"], []).append(float(jct))
    total = sum(sum(v.get("sia", [])) for v in apps.values()) or 1.0
    print("\nmean JCT (h) per application, all workloads:\n")
    print("| application | jobs | " + " | ".join(policies) + " | adl / sia | share of Sia's sum |")
    print("|---|---|" + "---|" * (len(policies) + 2))
    for app, per in sorted(apps.items()):
        cells = [f"{np.mean(per[p]) / 3600:.2f}" if per.get(p) else "" for p in policies]
        ratio = np.mean(per["adl"]) / np.mean(per["sia"]) if "adl" in per and "sia" in per else 0
        share = sum(per.get("sia", [])) / total
        jobs = len(next(iter(per.values())))
        print(f"| {app} | {jobs} | " + " | ".join(cells) + f" | {ratio:.2f} | {share:.0%} |")


def by_type(rows: list[dict[str, Any]], policies: list[str]) -> None:
    """GPU-hours per application on each type, summed over the workloads: where each policy
    put the work."""
    if not all("gpu_hours_by_app_and_type" in r for r in rows):
        return  # a saved run from before this table
    types = sorted(
        {t for r in rows for per in r["gpu_hours_by_app_and_type"].values() for t in per}
    )
    apps = sorted({a for r in rows for a in r["gpu_hours_by_app_and_type"]})
    print("\nGPU-hours per application and type, all workloads:\n")
    print("| policy | application | " + " | ".join(types) + " |")
    print("|---|---|" + "---|" * len(types))
    for policy in policies:
        for app in apps:
            cells = [
                sum(
                    r["gpu_hours_by_app_and_type"].get(app, {}).get(t, 0.0)
                    for r in rows
                    if r["policy"] == policy
                )
                for t in types
            ]
            print(f"| {policy} | {app} | " + " | ".join(f"{c:.0f}" for c in cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", default="three-types,two-types")
    parser.add_argument("--workloads", default="1,2,3,4")
    parser.add_argument("--policies", default=",".join(DEFAULT_POLICIES))
    parser.add_argument("--first", type=int, default=None, help="only each workload's first N")
    parser.add_argument("--no-learn-types", action="store_true")
    parser.add_argument(
        "--explore-types",
        action="store_true",
        help="adl as production runs it: no profiling on arrival, tries of unmeasured types",
    )
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument(
        "--policy-knob",
        action="append",
        metavar="NAME=VALUE",
        help="an adl policy constant (repeatable), e.g. min_tenure_s=600",
    )
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--report", type=Path, default=None, help="print the tables of a --json file, no replay"
    )
    args = parser.parse_args()
    if args.report is not None:
        saved = json.loads(args.report.read_text())
        print(f"(from {args.report}: {saved['command']})")
        names = saved.get("policies") or list(dict.fromkeys(r["policy"] for r in saved["runs"]))
        report(saved["runs"], names, list(saved["clusters"]))
        return
    clusters = [c for c in args.clusters.split(",") if c]
    unknown = [c for c in clusters if c not in MIXES]
    if unknown:
        parser.error(f"unknown cluster(s) {unknown}; choose from {sorted(MIXES)}")
    policies = [p for p in args.policies.split(",") if p]
    workloads = [int(w) for w in args.workloads.split(",") if w]
    if args.first is not None and not 1 <= args.first <= 10_000:
        parser.error("--first must be 1..10000")
    try:
        knobs = tuple(sorted(parse_knobs(args.policy_knob or []).items()))
    except ValueError as err:
        parser.error(str(err))
    tasks = [
        Task(c, w, p, args.first, not args.no_learn_types, knobs, args.explore_types)
        for c in clusters
        for w in workloads
        for p in policies
    ]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        rows = list(pool.map(run_task, tasks))
    means = report(rows, policies, clusters)
    print(f"\n{len(tasks)} replays in {time.perf_counter() - t0:.0f} s")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "command": " ".join(sys.argv),
            "clusters": {c: MIXES[c].describe() for c in clusters},
            "learn_type_speeds": not args.no_learn_types,
            "explore_types": args.explore_types,
            "adl_knobs": dict(knobs),
            "policies": policies,
            "means": means,
            "runs": rows,
        }
        args.json.write_text(json.dumps(payload, indent=1) + "\n")


if __name__ == "__main__":
    main()
