"""The lower bound on average JCT on the mixed GPU-type clusters beside adl's and Sia's (issue 33).

For each cluster (:mod:`adl.sched.sim.gpu_mix`) and workload: the typed alone bound and the
typed LP bound of :mod:`adl.sched.sim.bound_mixed`, adl's and Sia's average JCT read from saved
``benchmarks/mixed_types.py`` runs (no replay here), their ratios to the LP bound and what the
issue's goal (adl 20% below Sia) would be as a ratio to the bound. Checks what the bound
promises (alone <= LP <= every saved policy); a violation is printed and exits 1.

Each (cluster, workload) is one LP; ``--json`` keeps the rows already in the file, so runs can
be split to keep each short:

    nice -n 19 flock /tmp/adl-heavy.lock .venv/bin/python benchmarks/mixed_bound.py \
        [--clusters three-types,two-types] [--workloads 1,2,3,4] [--slot 1200] \
        [--reference-gpus 1,2,4,8,16,32] [--replays a.json,b.json] [--json PATH]
    .venv/bin/python benchmarks/mixed_bound.py --report PATH     # the table again
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

from adl.sched.sim.bound import REFERENCE_GPUS  # noqa: E402
from adl.sched.sim.bound_mixed import TypedCluster, typed_lower_bound  # noqa: E402
from adl.sched.sim.gpu_mix import MIXES, load_type_speeds  # noqa: E402
from adl.sched.sim.traces import default_traces_dir  # noqa: E402
from adl.sched.sim.workload import load_workload  # noqa: E402

RESULTS = REPO / "benchmarks" / "results" / "cpu-2026-11-28"
DEFAULT_REPLAYS = (RESULTS / "mixed_types.json", RESULTS / "mixed_types_w34.json")
#: the issue's goal: adl's average JCT at most this times Sia's
GOAL = 0.8


def saved_jcts(paths: list[Path]) -> dict[tuple[str, int, str], float]:
    """(cluster, workload, policy) -> average JCT s, from ``mixed_types.py --json`` files
    (whole workloads only: a ``--first`` slice is not the workload the bound is for)."""
    out: dict[tuple[str, int, str], float] = {}
    for path in paths:
        data = json.loads(path.read_text())
        if "--first" in str(data.get("command", "")):
            continue
        for row in data["runs"]:
            out[(row["cluster"], int(row["workload"]), row["policy"])] = float(row["avg_jct_s"])
    return out


#: rate envelopes shared by every LP of a run (they take seconds each)
_ENVELOPES: dict[tuple[object, ...], Any] = {}


def bound_row(cluster: str, workload: int, slot: int, refs: tuple[int, ...]) -> dict[str, Any]:
    mix = MIXES[cluster]
    typed = TypedCluster(mix.node_types, mix.gpus_per_node, speeds=load_type_speeds())
    jobs = load_workload(default_traces_dir() / "workloads" / f"workload-{workload}.csv")
    res = typed_lower_bound(jobs, typed, slot_s=slot, reference_gpus=refs, cache=_ENVELOPES)
    return {
        "cluster": cluster,
        "workload": workload,
        "slot_s": slot,
        "reference_gpus": list(refs),
        "alone_bound_s": res.alone_avg_jct_s,
        "lp_bound_s": res.avg_jct_s,
        "solve_s": res.solve_s,
        "lp_rounds": res.rounds,
        "variables": res.variables,
        "constraints": res.constraints,
        # how the LP optimum splits its mean by application (only the mean is a bound)
        "lp_jct_by_app_s": {
            app: float(np.mean([j.jct_bound_s for j in res.jobs if j.application == app]))
            for app in sorted({j.application for j in res.jobs})
        },
    }


def report(rows: list[dict[str, Any]], jcts: dict[tuple[str, int, str], float]) -> int:
    """Print the table; 1 if some saved policy beat the bound (it must not)."""
    bad = 0
    print(
        "| cluster | workload | alone bound s | LP bound s | adl s | Sia s "
        "| adl / bound | Sia / bound | 0.8 x Sia / bound |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for cluster in sorted({r["cluster"] for r in rows}, key=list(MIXES).index):
        mine = sorted((r for r in rows if r["cluster"] == cluster), key=lambda r: r["workload"])
        ratios: dict[str, list[float]] = {"adl": [], "sia": [], "goal": []}
        for r in mine:
            lp, alone = r["lp_bound_s"], r["alone_bound_s"]
            adl = jcts.get((cluster, r["workload"], "adl"))
            sia = jcts.get((cluster, r["workload"], "sia"))
            if lp < alone - 1e-6 * alone:
                print(f"VIOLATION: LP bound {lp:.0f} below the alone bound {alone:.0f}")
                bad = 1
            cells = [f"{alone:.0f}", f"{lp:.0f}"]
            for value in (adl, sia):
                cells.append("-" if value is None else f"{value:.0f}")
                if value is not None and value < lp:
                    print(f"VIOLATION: a saved replay ({value:.0f} s) beat the bound {lp:.0f}")
                    bad = 1
            if adl is not None and sia is not None:
                ratios["adl"].append(adl / lp)
                ratios["sia"].append(sia / lp)
                ratios["goal"].append(GOAL * sia / lp)
                cells += [f"{adl / lp:.2f}", f"{sia / lp:.2f}", f"{GOAL * sia / lp:.2f}"]
            else:
                cells += ["-", "-", "-"]
            print(f"| {cluster} | workload-{r['workload']} | " + " | ".join(cells) + " |")
        if ratios["adl"]:
            means = " | ".join(f"{np.mean(ratios[k]):.2f}" for k in ("adl", "sia", "goal"))
            print(f"| {cluster} | mean of ratios | | | | | {means} |")
    return bad


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", default="three-types,two-types")
    parser.add_argument("--workloads", default="1,2,3,4")
    parser.add_argument("--slot", type=int, default=1200, help="LP slot, seconds")
    parser.add_argument(
        "--reference-gpus",
        default=",".join(str(k) for k in REFERENCE_GPUS),
        help="GPU counts whose rates also weigh a currency (fewer: a smaller, looser LP)",
    )
    parser.add_argument("--replays", default=",".join(str(p) for p in DEFAULT_REPLAYS))
    parser.add_argument("--json", type=Path, default=None, help="rows kept and added to")
    parser.add_argument("--report", type=Path, default=None, help="print a saved --json only")
    args = parser.parse_args()
    jcts = saved_jcts([Path(p) for p in args.replays.split(",") if p])
    if args.report:
        return report(json.loads(args.report.read_text())["rows"], jcts)
    clusters = [c for c in args.clusters.split(",") if c]
    unknown = sorted(set(clusters) - set(MIXES))
    if unknown:
        parser.error(f"unknown clusters {unknown}; known: {sorted(MIXES)}")
    if not 60 <= args.slot <= 7200:
        parser.error("--slot must be between 60 and 7200 s")
    refs = tuple(int(k) for k in args.reference_gpus.split(",") if k)
    rows: list[dict[str, Any]] = []
    commands: list[str] = []
    if args.json and args.json.exists():
        saved = json.loads(args.json.read_text())
        rows, commands = saved["rows"], saved.get("commands", [])
    commands.append(" ".join(sys.argv))
    for cluster in clusters:
        for w in (int(x) for x in args.workloads.split(",") if x):
            row = bound_row(cluster, w, args.slot, refs)
            print(
                f"{cluster} workload-{w}: LP bound {row['lp_bound_s']:.0f} s "
                f"(alone {row['alone_bound_s']:.0f} s), {row['solve_s']:.0f} s to solve",
                flush=True,
            )
            rows = [r for r in rows if (r["cluster"], r["workload"]) != (cluster, w)] + [row]
            if args.json:  # saved after every LP: a split or killed run keeps what it solved
                out = {"commands": commands, "rows": rows}
                args.json.write_text(json.dumps(out, indent=1) + "\n")
    return report(rows, jcts)


if __name__ == "__main__":
    sys.exit(main())
