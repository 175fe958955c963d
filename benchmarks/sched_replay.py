"""Replay workloads under several policies: avg/p99 JCT, makespan, restarts, round latency.

Prints one row per (policy, workload) with the published average JCT beside ours for
workload-1..4 (Pollux for ``adl``, ``pollux`` and ``pollux-objective``, Optimus+Oracle,
Tiresias), then every policy side by side (average JCT per workload, and each policy's means of
every column), then per-policy means against the published figures. By default it replays
adl, Sia, Pollux, Tiresias and Optimus+Oracle (Pollux's genetic search takes several minutes
per workload). ``--bound`` adds the LP lower bound on average JCT of each workload
(:mod:`adl.sched.sim.bound`, minutes per workload) and every policy's ratio to it.

    .venv/bin/python benchmarks/sched_replay.py [--policies adl,sia,pollux,tiresias,optimus]
        [--workloads 1,2,3,4] [--generated K] [--load 1.0] [--hide-remaining]
        [--jobs N] [--traces DIR] [--seed 0] [--json PATH] [--policy-knob NAME=VALUE ...]
        [--fixed-rounds] [--peer-conditions] [--bound]

``--generated K`` adds K workloads from :mod:`adl.sched.sim.generate` (seeds 1..K, jobs the
policies were never tuned on); ``--jobs N`` runs N replays in parallel processes. adl is
replayed as its operator runs it, with a round also when a job arrives or finishes;
``--fixed-rounds`` makes it reschedule only every 60 s, as the published baselines do.
``--peer-conditions`` replays every policy in the peer-conditions mode of issue 34
(:func:`adl.sched.sim.simulator.peer_conditions`: 60 s rounds only, per-model restart delays,
models fitted online) and adds a table of restarts per job per application and the most
resumes of one job within an hour.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
# Tiny linear algebra only: BLAS worker threads just spin (see adl.cli.cmd_simulate).
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

from adl.sched.policy_knobs import parse_knobs  # noqa: E402
from adl.sched.sim.generate import generate_workload  # noqa: E402
from adl.sched.sim.metrics import summarize  # noqa: E402
from adl.sched.sim.policies import (  # noqa: E402
    POLICY_NAMES,
    make_policy,
    rounds_on_events,
    uses_oracle,
)
from adl.sched.sim.published import PUBLISHED_LABEL, published_avg_jct  # noqa: E402
from adl.sched.sim.simulator import SimConfig, peer_conditions, simulate  # noqa: E402
from adl.sched.sim.traces import default_traces_dir, load_traces  # noqa: E402
from adl.sched.sim.workload import WorkloadJob, load_workload  # noqa: E402

#: the side-by-side default: adl and the four peers it is judged against
DEFAULT_POLICIES = ("adl", "sia", "pollux", "tiresias", "optimus")


@dataclass(frozen=True)
class Task:
    """One replay: a policy on a published workload (path) or a generated one (seed)."""

    policy: str
    workload: str
    traces: str
    seed: int
    hide_remaining: bool
    path: str | None = None
    gen_seed: int | None = None
    load: float = 1.0
    knobs: tuple[tuple[str, float], ...] = ()  # adl policy constants (adl only)
    fixed_rounds: bool = False  # adl too reschedules only every 60 s
    peer: bool = False  # the peer-conditions mode (issue 34)

    def jobs(self) -> list[WorkloadJob]:
        if self.path is not None:
            return load_workload(self.path)
        assert self.gen_seed is not None
        return generate_workload(self.gen_seed, load=self.load)


def run_task(task: Task) -> dict[str, Any]:
    """Replay one task; the summary of :func:`summarize` plus wall seconds of the replay alone
    (trace parsing, cached per process, is timed apart as ``load_s``)."""
    t0 = time.perf_counter()
    apps = load_traces(task.traces)
    load_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    result = simulate(
        task.jobs(),
        make_policy(task.policy, task.seed, dict(task.knobs) if task.policy == "adl" else None),
        traces=apps,
        config=(
            peer_conditions(hide_remaining=task.hide_remaining)
            if task.peer
            else SimConfig(
                hide_remaining=task.hide_remaining,
                rounds_on_events=rounds_on_events(task.policy) and not task.fixed_rounds,
            )
        ),
    )
    row = summarize(result)
    wall = time.perf_counter() - t0
    row.update(policy=task.policy, workload=task.workload, wall_s=wall, load_s=load_s)
    published = published_avg_jct(task.workload, task.policy)
    row["published_avg_jct_s"] = published
    return row


def lower_bound_s(jobs: list[WorkloadJob], traces: str) -> float:
    """The LP lower bound on a workload's average JCT (:mod:`adl.sched.sim.bound`; minutes per
    workload on 2 cores, so only with ``--bound``)."""
    from adl.sched.sim.bound import lower_bound

    return float(lower_bound(jobs, traces=load_traces(traces)).avg_jct_s)


def bounds_for(tasks: list[Task], enabled: bool) -> dict[str, float | None]:
    """The lower bound of each workload replayed (computed once per workload), or None each
    when not asked for."""
    out: dict[str, float | None] = {}
    for task in tasks:
        if task.workload not in out:
            out[task.workload] = lower_bound_s(task.jobs(), task.traces) if enabled else None
    return out


def build_tasks(args: argparse.Namespace) -> list[Task]:
    traces = str(args.traces or default_traces_dir())
    base = Path(traces) / "workloads"
    sources: list[tuple[str, str | None, int | None]] = []
    for w in [x for x in args.workloads.split(",") if x.strip()]:
        path = base / f"workload-{w.strip()}.csv"
        if not path.exists():
            raise SystemExit(f"error: {path} not found")
        sources.append((path.stem, str(path), None))
    for k in range(1, args.generated + 1):
        label = f"gen-{k}" if args.load == 1.0 else f"gen-{k}@{args.load:g}x"
        sources.append((label, None, k))
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    bad = [p for p in policies if p not in POLICY_NAMES]
    if bad:
        raise SystemExit(f"error: unknown policies {bad}; choose from {', '.join(POLICY_NAMES)}")
    try:
        knobs = tuple(sorted(parse_knobs(args.policy_knob or []).items()))
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    if knobs and "adl" not in policies:
        raise SystemExit("error: --policy-knob applies to the adl policy only")
    return [
        Task(
            policy=p,
            workload=label,
            traces=traces,
            seed=args.seed,
            hide_remaining=args.hide_remaining,
            path=path,
            gen_seed=gen,
            load=args.load,
            knobs=knobs,
            fixed_rounds=args.fixed_rounds,
            peer=args.peer_conditions,
        )
        for p in policies
        for label, path, gen in sources
    ]


def _fmt(x: float | None, spec: str = ",.0f") -> str:
    return "-" if x is None else format(x, spec)


#: columns of the side-by-side means: (summary key, heading, format)
MEAN_COLUMNS = (
    ("avg_jct_s", "avg JCT s", ",.0f"),
    ("p99_jct_s", "p99 JCT s", ",.0f"),
    ("makespan_s", "makespan s", ",.0f"),
    ("restarts_per_job", "restarts", ".2f"),
    ("round_ms_p50", "round p50 ms", ".1f"),
    ("round_ms_p95", "round p95 ms", ".1f"),
    ("max_resumes_per_hour", "resumes/h max", ".0f"),
)


def side_by_side(rows: list[dict[str, Any]], bounds: dict[str, float | None]) -> dict[str, Any]:
    """Average JCT per workload with one column per policy (and the lower bound, where known),
    and each policy's mean of every summary column over the workloads."""
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    by = {(r["policy"], r["workload"]): r for r in rows}
    table = {w: {p: by[(p, w)]["avg_jct_s"] for p in policies if (p, w) in by} for w in workloads}
    means: dict[str, dict[str, float | None]] = {}
    for p in policies:
        mine = [r for r in rows if r["policy"] == p]
        means[p] = {}
        for key, _, _ in MEAN_COLUMNS:
            values = [r[key] for r in mine if r.get(key) is not None]
            if key == "max_resumes_per_hour":  # the worst job of any workload, not a mean
                means[p][key] = max(values) if values else None
            else:
                means[p][key] = sum(values) / len(values) if values else None
    known = [b for b in bounds.values() if b is not None]
    return {
        "avg_jct_s": table,
        "means": means,
        "lower_bound_s": bounds,
        "mean_lower_bound_s": sum(known) / len(known) if len(known) == len(bounds) else None,
    }


def render_side_by_side(view: dict[str, Any]) -> str:
    table, means, bounds = view["avg_jct_s"], view["means"], view["lower_bound_s"]
    policies = list(means)
    has_bound = any(b is not None for b in bounds.values())
    head = f"{'avg JCT s':<12}" + "".join(f"{p:>12}" for p in policies)
    if has_bound:
        head += f"{'lower bound':>12}"
    lines = [head, "-" * len(head)]
    for w, cells in table.items():
        line = f"{w:<12}" + "".join(f"{_fmt(cells.get(p)):>12}" for p in policies)
        if has_bound:
            line += f"{_fmt(bounds.get(w)):>12}"
        lines.append(line)
    line = f"{'mean':<12}" + "".join(f"{_fmt(means[p]['avg_jct_s']):>12}" for p in policies)
    if has_bound:
        line += f"{_fmt(view['mean_lower_bound_s']):>12}"
    lines.append(line)
    if view["mean_lower_bound_s"]:
        lines.append(
            f"{'x bound':<12}"
            + "".join(
                f"{means[p]['avg_jct_s'] / view['mean_lower_bound_s']:>12.2f}"
                if means[p]["avg_jct_s"]
                else f"{'-':>12}"
                for p in policies
            )
        )
    lines.append("")
    head = f"{'means':<12}" + "".join(f"{h:>14}" for _, h, _ in MEAN_COLUMNS)
    lines += [head, "-" * len(head)]
    for p in policies:
        lines.append(
            f"{p:<12}" + "".join(f"{_fmt(means[p][k], spec):>14}" for k, _, spec in MEAN_COLUMNS)
        )
    return "\n".join(lines)


def restarts_table(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Restarts per job of each application, per policy (the mean over the workloads in which
    the application appears)."""
    out: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        for app, v in r.get("restarts_per_job_by_app", {}).items():
            out.setdefault(r["policy"], {}).setdefault(app, []).append(v)
    return {p: {a: sum(v) / len(v) for a, v in apps.items()} for p, apps in out.items()}


def render_restarts(table: dict[str, dict[str, float]]) -> str:
    policies = list(table)
    apps = sorted({a for t in table.values() for a in t})
    head = f"{'restarts/job':<14}" + "".join(f"{p:>12}" for p in policies)
    lines = [head, "-" * len(head)]
    for app in apps:
        lines.append(
            f"{app:<14}" + "".join(f"{_fmt(table[p].get(app), '.2f'):>12}" for p in policies)
        )
    return "\n".join(lines)


def render(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'policy':<16} {'workload':<12} {'avg JCT s':>10} {'p99 JCT s':>10} {'makespan s':>11} "
        f"{'restarts':>8} {'round p50':>10} {'round p95':>10} {'wall s':>7}   published"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        pub = r["published_avg_jct_s"]
        pub_s = "-"
        if pub is not None and r["avg_jct_s"] is not None:
            label = PUBLISHED_LABEL[r["policy"]]
            pub_s = f"{label} {pub:,.0f} ({100 * (r['avg_jct_s'] / pub - 1):+.1f}%)"
        lines.append(
            f"{r['policy']:<16} {r['workload']:<12} {_fmt(r['avg_jct_s']):>10} "
            f"{_fmt(r['p99_jct_s']):>10} {_fmt(r['makespan_s']):>11} "
            f"{r['restarts_per_job']:>8.2f} "
            f"{r['round_ms_p50']:>8.2f}ms {r['round_ms_p95']:>8.2f}ms "
            f"{r['wall_s']:>7.1f}   {pub_s}"
        )
    lines.append("")
    lines.append("means per policy (avg JCT s):")
    for policy in dict.fromkeys(r["policy"] for r in rows):
        mine = [r for r in rows if r["policy"] == policy]
        pub = [r for r in mine if r["published_avg_jct_s"] is not None]
        gen = [r for r in mine if r["workload"].startswith("gen-")]
        parts = []
        if pub:
            ours = sum(r["avg_jct_s"] for r in pub) / len(pub)
            theirs = sum(r["published_avg_jct_s"] for r in pub) / len(pub)
            parts.append(
                f"published workloads {ours:,.0f} vs {PUBLISHED_LABEL[policy]} {theirs:,.0f} "
                f"({100 * (ours / theirs - 1):+.1f}%)"
            )
        if gen:
            parts.append(f"generated {sum(r['avg_jct_s'] for r in gen) / len(gen):,.0f}")
        others = [r for r in mine if r not in pub and r not in gen]
        if others:
            parts.append(f"other {sum(r['avg_jct_s'] for r in others) / len(others):,.0f}")
        wall = max(r["wall_s"] for r in mine)
        lines.append(f"  {policy:<16} " + "; ".join(parts) + f"; slowest replay {wall:.1f} s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--policies", default=",".join(DEFAULT_POLICIES))
    ap.add_argument("--workloads", default="1,2,3,4", help="published workloads ('' for none)")
    ap.add_argument("--generated", type=int, default=0, help="also K generated workloads")
    ap.add_argument("--load", type=float, default=1.0, help="job load of generated workloads")
    ap.add_argument("--hide-remaining", action="store_true", help="jobs hide their length")
    ap.add_argument("--jobs", type=int, default=1, help="replays run in parallel processes")
    ap.add_argument("--traces", type=Path, default=None)
    ap.add_argument("--seed", type=int, default=0, help="policy seed")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--bound",
        action="store_true",
        help="add the LP lower bound on avg JCT per workload (adl.sched.sim.bound; slow)",
    )
    ap.add_argument(
        "--policy-knob",
        action="append",
        metavar="NAME=VALUE",
        help="an adl policy constant (repeatable), e.g. srpt_power=0.25",
    )
    ap.add_argument(
        "--fixed-rounds",
        action="store_true",
        help="adl too reschedules only every 60 s, not also when a job arrives or finishes",
    )
    ap.add_argument(
        "--peer-conditions",
        action="store_true",
        help="every policy in the peer-conditions mode (issue 34): 60 s rounds only, per-model "
        "restart delays, models fitted online",
    )
    args = ap.parse_args(argv)

    tasks = build_tasks(args)
    if not tasks:
        raise SystemExit("error: nothing to replay")
    if args.hide_remaining and any(uses_oracle(t.policy) for t in tasks):
        print("note: optimus is an oracle baseline; --hide-remaining does not apply to it")
    t0 = time.perf_counter()
    if args.jobs > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            rows = list(pool.map(run_task, tasks))
    else:
        rows = []
        for task in tasks:
            rows.append(run_task(task))
            r = rows[-1]
            print(
                f"  {task.policy} {task.workload}: avg JCT {_fmt(r['avg_jct_s'])} s "
                f"({r['wall_s']:.1f} s)",
                file=sys.stderr,
                flush=True,
            )
    total = time.perf_counter() - t0
    bounds = bounds_for(tasks, args.bound)
    for r in rows:
        r["lower_bound_s"] = bounds.get(r["workload"])
    view = side_by_side(rows, bounds)
    print(render(rows))
    print()
    print(render_side_by_side(view))
    by_app = restarts_table(rows)
    print()
    print(render_restarts(by_app))
    print(f"\n{len(rows)} replays in {total:.1f} s wall ({args.jobs} process(es))")
    if args.json is not None:
        doc = {
            "hide_remaining": args.hide_remaining,
            "policy_knobs": dict(tasks[0].knobs),
            "fixed_rounds": args.fixed_rounds,
            "peer_conditions": args.peer_conditions,
            "seed": args.seed,
            "load": args.load,
            "results": rows,
            "side_by_side": view,
            "restarts_per_job_by_app": by_app,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
