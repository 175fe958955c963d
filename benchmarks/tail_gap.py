"""Where adl's makespan and p99 JCT gap to Sia comes from (issue 34), per workload.

Replays adl (with ``--policy-knob``) and Sia on each workload in today's mode or the
peer-conditions mode, and accounts each replay's GPU-time (:func:`adl.sched.sim.metrics.
gpu_hours`): ``makespan x GPUs = held + idle``, so the makespan gap is the extra GPU-hours
adl holds plus the extra idle ones, over the GPUs. It prints that gap split between the short
applications (whose wider allocations are where adl's mean JCT gain comes from) and the long
ones (``--long``, default imagenet and yolov3: the jobs that set p99 JCT and the makespan),
then the three longest jobs under each policy (JCT, GPU-hours, restarts).

    .venv/bin/python benchmarks/tail_gap.py [--workloads 1,2,3,4] [--peer-conditions]
        [--policy-knob NAME=VALUE ...] [--long imagenet,yolov3] [--jobs 2]
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sched_replay import Task

from adl.sched.policy_knobs import parse_knobs
from adl.sched.sim.metrics import gpu_hours, summarize
from adl.sched.sim.policies import make_policy, rounds_on_events
from adl.sched.sim.simulator import SimConfig, peer_conditions, simulate
from adl.sched.sim.traces import default_traces_dir, load_traces


def _replay(task: Task) -> dict[str, Any]:
    knobs = dict(task.knobs) if task.policy == "adl" else None
    config = (
        peer_conditions()
        if task.peer
        else SimConfig(rounds_on_events=rounds_on_events(task.policy))
    )
    result = simulate(
        task.jobs(),
        make_policy(task.policy, task.seed, knobs),
        traces=load_traces(task.traces),
        config=config,
    )
    longest = sorted(result.jobs, key=lambda j: -(j.jct_s or 0))[:3]
    return {
        "summary": summarize(result),
        "hours": gpu_hours(result),
        "gpus": result.total_gpus,
        "longest": [(j.name, j.jct_s, j.gpu_seconds / 3600.0, j.restarts) for j in longest],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--workloads", default="1,2,3,4")
    ap.add_argument("--peer-conditions", action="store_true")
    ap.add_argument("--policy-knob", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--long", default="imagenet,yolov3", help="the long applications")
    ap.add_argument("--jobs", type=int, default=1, help="replays run in parallel processes")
    args = ap.parse_args(argv)
    try:
        knobs = tuple(sorted(parse_knobs(args.policy_knob).items()))
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    traces = str(default_traces_dir())
    long_apps = {a.strip() for a in args.long.split(",") if a.strip()}
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    tasks = []
    for w in names:
        path = Path(traces) / "workloads" / f"workload-{w}.csv"
        if not path.exists():
            raise SystemExit(f"error: {path} not found")
        for policy in ("adl", "sia"):
            tasks.append(
                Task(
                    policy=policy,
                    workload=path.stem,
                    traces=traces,
                    seed=0,
                    hide_remaining=False,
                    path=str(path),
                    knobs=knobs if policy == "adl" else (),  # type: ignore[arg-type]
                    peer=args.peer_conditions,
                )
            )
    with ProcessPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        rows = list(pool.map(_replay, tasks))
    print(
        f"{'workload':<12}{'makespan adl / Sia s':>24}{'gap s':>8}{'(held+idle)/GPUs s':>20}"
        f"{'short held GPU-h':>18}{'long held GPU-h':>17}{'idle GPU-h':>12}"
    )
    for i, w in enumerate(names):
        a, s = rows[2 * i], rows[2 * i + 1]
        ha, hs = a["hours"], s["hours"]

        def part(h: dict[str, Any], want_long: bool) -> float:
            return sum(v for app, v in h["held_by_app"].items() if (app in long_apps) == want_long)

        gap = ha["makespan_s"] - hs["makespan_s"]
        account = (ha["held"] + ha["idle"] - hs["held"] - hs["idle"]) * 3600.0 / a["gpus"]
        print(
            f"{'workload-' + w:<12}{ha['makespan_s']:>12,.0f} / {hs['makespan_s']:>9,.0f}"
            f"{gap:>+8,.0f}{account:>+20,.0f}"
            f"{part(ha, False) - part(hs, False):>+18.1f}{part(ha, True) - part(hs, True):>+17.1f}"
            f"{ha['idle'] - hs['idle']:>+12.1f}"
        )
        for label, row in (("adl", a), ("Sia", s)):
            top = ", ".join(
                f"{n} {jct:,} s {gh:.0f} GPU-h {r} restarts" for n, jct, gh, r in row["longest"]
            )
            print(f"    {label}: p99 {row['summary']['p99_jct_s']:,.0f} s; longest: {top}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
