"""adl, Sia and Pollux in today's mode and in the peer-conditions mode (issue 34), side by side.

Replays each policy on the published workloads (and ``--generated K`` generated ones) twice:
in today's mode (adl with a round also on each arrival and finish, a flat 30 s restart) and in
the peer-conditions mode (:func:`adl.sched.sim.simulator.peer_conditions`: 60 s rounds only,
per-model restart delays, models fitted online). For each mode it prints every policy's mean
avg JCT, p99 JCT and makespan over the workloads with its ratio to Sia's, restarts per job,
the most resumes of one job within an hour and how many jobs were resumed more than 5 times
within an hour; then restarts per job of each application with the ratio to Sia's, and issue
34's goals met or not (restarts per application at most 1.5x Sia's, no job resumed more than
5 times in an hour, mean at most 0.90x Sia's with p99 and makespan no worse).

adl variants are named ``NAME:knob=value+knob=value`` (``--adl base,t:min_tenure_s=720``;
``base`` is the defaults); each is replayed like a policy of its own. ``--reuse PATH`` takes
the rows of the peers (not adl's) from an earlier ``--json`` of the same workloads instead of
replaying them again (the peers do not change with adl's knobs).

    .venv/bin/python benchmarks/peer_conditions.py [--policies sia,pollux] [--adl base,...]
        [--workloads 1,2,3,4] [--generated K] [--modes today,peer] [--jobs N] [--json PATH]
        [--reuse PATH]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sched_replay import Task, run_task

from adl.sched.policy_knobs import parse_knobs
from adl.sched.sim.traces import default_traces_dir

MODES = ("today", "peer")
#: issue 34's bounds: restarts per job of each application against Sia's, and the mean JCT
RESTART_RATIO_GOAL = 1.5
MEAN_RATIO_GOAL = 0.90
#: the columns averaged over workloads: (key, heading, format, compared with Sia's)
COLUMNS = (
    ("avg_jct_s", "avg JCT s", ",.0f", True),
    ("p99_jct_s", "p99 JCT s", ",.0f", True),
    ("makespan_s", "makespan s", ",.0f", True),
    ("restarts_per_job", "restarts", ".2f", False),
    ("round_ms_p95", "round p95 ms", ".1f", False),
)


def parse_variants(spec: str) -> list[tuple[str, tuple[tuple[str, float | bool], ...]]]:
    """``"base,t:min_tenure_s=720+victim_charge=1"`` -> [(name, knobs)], knobs validated."""
    out = []
    for item in (x.strip() for x in spec.split(",") if x.strip()):
        name, _, raw = item.partition(":")
        try:
            knobs = parse_knobs(raw.split("+")) if raw else {}
        except ValueError as err:
            raise SystemExit(f"error: adl variant {name!r}: {err}") from None
        out.append((name.strip(), tuple(sorted(knobs.items()))))
    if len({n for n, _ in out}) != len(out):
        raise SystemExit("error: adl variant names must differ")
    return out


def build_tasks(args: argparse.Namespace) -> list[tuple[str, str, Task]]:
    """(mode, label, task) for every mode, policy (each adl variant apart) and workload."""
    traces = str(args.traces or default_traces_dir())
    sources: list[tuple[str, str | None, int | None]] = []
    for w in (x.strip() for x in args.workloads.split(",") if x.strip()):
        path = Path(traces) / "workloads" / f"workload-{w}.csv"
        if not path.exists():
            raise SystemExit(f"error: {path} not found")
        sources.append((path.stem, str(path), None))
    sources += [(f"gen-{k}", None, k) for k in range(1, args.generated + 1)]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        raise SystemExit(f"error: --modes takes {', '.join(MODES)}")
    policies: list[tuple[str, str, tuple[tuple[str, float | bool], ...]]] = [
        (f"adl {name}" if name != "base" else "adl", "adl", knobs)
        for name, knobs in parse_variants(args.adl)
    ]
    policies += [(p, p, ()) for p in (x.strip() for x in args.policies.split(",")) if p]
    if not any(p == "sia" for _, p, _ in policies):
        raise SystemExit("error: the figures are judged against Sia: keep sia in --policies")
    tasks = []
    for mode in modes:
        for label, policy, knobs in policies:
            for workload, path, gen in sources:
                task = Task(
                    policy=policy,
                    workload=workload,
                    traces=traces,
                    seed=args.seed,
                    hide_remaining=args.hide_remaining,
                    path=path,
                    gen_seed=gen,
                    knobs=knobs,  # type: ignore[arg-type]  # a switch is a bool
                    peer=mode == "peer",
                )
                tasks.append((mode, label, task))
    return tasks


def _one(item: tuple[str, str, Task]) -> dict[str, Any]:
    mode, label, task = item
    row = run_task(task)
    row.update(mode=mode, policy=label)
    return row


def reused_rows(path: Path, tasks: list[tuple[str, str, Task]]) -> dict[tuple[str, str, str], Any]:
    """The peers' rows of an earlier run, keyed (mode, policy, workload), for those tasks of
    this run that it holds (adl's rows are always replayed: they are what is being judged)."""
    try:
        doc = json.loads(path.read_text())
        old = [r for m in doc["modes"].values() for r in m["results"]]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise SystemExit(f"error: --reuse {path}: not a peer_conditions.py JSON ({err})") from None
    wanted = {(m, label, t.workload) for m, label, t in tasks if t.policy != "adl"}
    return {key: r for r in old if (key := (r["mode"], r["policy"], r["workload"])) in wanted}


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def means(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per policy: the mean of each column over the workloads, restarts per job of each
    application (mean over the workloads that have it), the most resumes of a job within an
    hour and the jobs resumed more than 5 times within an hour (summed)."""
    out: dict[str, dict[str, Any]] = {}
    for policy in dict.fromkeys(r["policy"] for r in rows):
        mine = [r for r in rows if r["policy"] == policy]
        m: dict[str, Any] = {}
        for key, _, _, _ in COLUMNS:
            values = [r[key] for r in mine if r.get(key) is not None]
            m[key] = sum(values) / len(values) if values else None
        apps: dict[str, list[float]] = {}
        for r in mine:
            for app, v in r["restarts_per_job_by_app"].items():
                apps.setdefault(app, []).append(v)
        m["restarts_by_app"] = {a: sum(v) / len(v) for a, v in sorted(apps.items())}
        m["max_resumes_per_hour"] = max(r["max_resumes_per_hour"] for r in mine)
        m["jobs_flapping"] = sum(r["jobs_flapping"] for r in mine)
        m["workloads"] = len(mine)
        out[policy] = m
    return out


def goals(m: dict[str, Any], sia: dict[str, Any]) -> dict[str, bool]:
    """Issue 34's must-shows for one policy's means against Sia's."""
    restarts_ok = all(
        v <= RESTART_RATIO_GOAL * sia["restarts_by_app"].get(app, 0.0) or v == 0.0
        for app, v in m["restarts_by_app"].items()
    )
    return {
        "restarts_per_app_within_1.5x_sia": restarts_ok,
        "no_job_resumed_over_5_per_hour": m["jobs_flapping"] == 0,
        "mean_within_0.90x_sia": m["avg_jct_s"] <= MEAN_RATIO_GOAL * sia["avg_jct_s"],
        "p99_no_worse_than_sia": m["p99_jct_s"] <= sia["p99_jct_s"],
        "makespan_no_worse_than_sia": m["makespan_s"] <= sia["makespan_s"],
    }


def render(mode: str, rows: list[dict[str, Any]], view: dict[str, dict[str, Any]]) -> str:
    sia = view["sia"]
    head = f"{mode + ' mode':<22}" + "".join(f"{h:>20}" for _, h, _, _ in COLUMNS)
    head += f"{'resumes/h max':>15}{'jobs >5/h':>11}"
    lines = [head, "-" * len(head)]
    for policy, m in view.items():
        cells = []
        for key, _, spec, vs_sia in COLUMNS:
            text = _fmt(m[key], spec)
            if vs_sia and m[key] is not None:
                text += f" ({m[key] / sia[key]:.3f})"
            cells.append(f"{text:>20}")
        lines.append(
            f"{policy:<22}"
            + "".join(cells)
            + f"{m['max_resumes_per_hour']:>15}{m['jobs_flapping']:>11}"
        )
    apps = sorted({a for m in view.values() for a in m["restarts_by_app"]})
    lines += ["", f"{'restarts/job (x Sia)':<22}" + "".join(f"{a:>16}" for a in apps)]
    for policy, m in view.items():
        cells = []
        for app in apps:
            v, s = m["restarts_by_app"].get(app), sia["restarts_by_app"].get(app)
            text = _fmt(v, ".2f") + (f" ({v / s:.2f})" if v is not None and s else "")
            cells.append(f"{text:>16}")
        lines.append(f"{policy:<22}" + "".join(cells))
    lines += ["", f"{'avg JCT s (x Sia)':<22}" + "".join(f"{p:>20}" for p in view)]
    by = {(r["policy"], r["workload"]): r for r in rows}
    for workload in dict.fromkeys(r["workload"] for r in rows):
        base = by[("sia", workload)]["avg_jct_s"]
        cells = []
        for policy in view:
            v = by[(policy, workload)]["avg_jct_s"] if (policy, workload) in by else None
            text = _fmt(v, ",.0f") + (f" ({v / base:.3f})" if v is not None and base else "")
            cells.append(f"{text:>20}")
        lines.append(f"{workload:<22}" + "".join(cells))
    lines.append("")
    for policy, m in view.items():
        if policy.startswith("adl"):
            met = goals(m, sia)
            lines.append(
                f"issue 34 goals, {policy}: "
                + ", ".join(f"{k} {'yes' if ok else 'NO'}" for k, ok in met.items())
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--adl", default="base", help="adl variants: NAME:knob=v+knob=v,...")
    ap.add_argument("--policies", default="sia,pollux", help="peers (sia is required)")
    ap.add_argument("--workloads", default="1,2,3,4", help="published workloads ('' for none)")
    ap.add_argument("--generated", type=int, default=0, help="also K generated workloads")
    ap.add_argument("--modes", default=",".join(MODES), help="today, peer or both")
    ap.add_argument("--hide-remaining", action="store_true", help="jobs hide their length")
    ap.add_argument("--jobs", type=int, default=1, help="replays run in parallel processes")
    ap.add_argument("--traces", type=Path, default=None)
    ap.add_argument("--seed", type=int, default=0, help="policy seed")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--reuse", type=Path, default=None, help="the peers' rows from this JSON")
    args = ap.parse_args(argv)

    tasks = build_tasks(args)
    reused = reused_rows(args.reuse, tasks) if args.reuse else {}
    tasks = [t for t in tasks if (t[0], t[1], t[2].workload) not in reused]
    t0 = time.perf_counter()
    rows = list(reused.values())
    if args.jobs > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            rows += list(pool.map(_one, tasks))
    else:
        for item in tasks:
            rows.append(_one(item))
            r = rows[-1]
            print(
                f"  {r['mode']} {r['policy']} {r['workload']}: avg JCT "
                f"{_fmt(r['avg_jct_s'], ',.0f')} s ({r['wall_s']:.1f} s)",
                file=sys.stderr,
                flush=True,
            )
    total = time.perf_counter() - t0
    doc: dict[str, Any] = {"hide_remaining": args.hide_remaining, "seed": args.seed, "modes": {}}
    for mode in dict.fromkeys(r["mode"] for r in rows):
        mine = [r for r in rows if r["mode"] == mode]
        order = list(dict.fromkeys(r["policy"] for r in mine if r["policy"].startswith("adl")))
        order += [p for p in dict.fromkeys(r["policy"] for r in mine) if p not in order]
        mine.sort(key=lambda r: order.index(r["policy"]))
        view = means(mine)
        print(render(mode, mine, view) + "\n")
        doc["modes"][mode] = {
            "results": mine,
            "means": view,
            "goals": {p: goals(m, view["sia"]) for p, m in view.items() if p.startswith("adl")},
        }
    print(
        f"{len(tasks)} replays in {total:.1f} s wall ({args.jobs} process(es)), "
        f"{len(reused)} rows reused from {args.reuse}"
    )
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
