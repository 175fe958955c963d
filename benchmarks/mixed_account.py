"""Where adl's mean JCT stands against Sia's on the mixed clusters, per application (issue 33).

Reads saved runs of ``benchmarks/mixed_types.py`` (``--json``; several files merge, a later
file's row for the same cluster, workload and policy wins, so adl's rows of one run and
Sia's of another go side by side) and prints, per cluster and application over the
workloads both policies ran:

- the jobs, each policy's mean JCT, adl over Sia, the application's share of Sia's sum of
  JCTs, and its part of the gap: (adl's sum - Sia's sum) over Sia's sum of every job, so the
  column adds up to adl's mean over Sia's, less one;
- GPU-hours on each type, the type moves per job (runs from before the per-job count have
  none), the share of GPU-hours on the application's fastest type of the cluster, and the
  *speed efficiency*: GPU-hours weighted by the type's speed relative to that fastest type,
  over GPU-hours (1.0: every GPU-hour on the fastest type; the per-type speeds are the
  simulator's, :mod:`adl.sched.sim.gpu_mix`).

    .venv/bin/python benchmarks/mixed_account.py RUNS.json [RUNS.json ...] [--policies adl,sia]
        [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from adl.sched.sim.gpu_mix import MIXES, load_type_speeds  # noqa: E402


def _app(job: str) -> str:
    return job.rsplit("-", 1)[0]


def load_rows(paths: list[Path]) -> dict[tuple[str, int, str], dict[str, Any]]:
    """(cluster, workload, policy) -> the saved run; a later file wins."""
    rows: dict[tuple[str, int, str], dict[str, Any]] = {}
    for path in paths:
        for run in json.loads(path.read_text())["runs"]:
            rows[(run["cluster"], int(run["workload"]), run["policy"])] = run
    return rows


def account(
    rows: dict[tuple[str, int, str], dict[str, Any]], cluster: str, policies: tuple[str, str]
) -> dict[str, Any]:
    """The per-application account of ``policies[0]`` against ``policies[1]`` on ``cluster``,
    over the workloads both ran there."""
    mine, base = policies
    workloads = sorted(
        w for (c, w, p) in rows if c == cluster and p == mine and (c, w, base) in rows
    )
    types = [t for t, _ in MIXES[cluster].node_types]
    speeds = load_type_speeds()
    per: dict[str, dict[str, Any]] = {}
    base_sum = 0.0
    for w in workloads:
        for policy in policies:
            run = rows[(cluster, w, policy)]
            moves = run.get("type_moves_by_job")
            for job, jct in run["jct_by_job"].items():
                entry = per.setdefault(_app(job), {p: _empty(types) for p in policies})[policy]
                entry["jcts"].append(float(jct))
                if moves is not None:
                    entry["moves"] = (entry["moves"] or 0) + moves.get(job, 0)
                if policy == base:
                    base_sum += float(jct)
            for app, hours in run.get("gpu_hours_by_app_and_type", {}).items():
                entry = per.setdefault(app, {p: _empty(types) for p in policies})[policy]
                for gpu_type, h in hours.items():
                    entry["hours"][gpu_type] = entry["hours"].get(gpu_type, 0.0) + h
    out: dict[str, Any] = {"workloads": workloads, "policies": list(policies), "apps": {}}
    for app, both in sorted(per.items()):
        fast = {t: speeds[app][t] for t in types} if app in speeds else {}
        best = max(fast.values(), default=1.0)
        row: dict[str, Any] = {"jobs": len(both[base]["jcts"])}
        for policy in policies:
            e = both[policy]
            total_h = sum(e["hours"].values())
            on_best = sum(h for t, h in e["hours"].items() if fast.get(t) == best)
            weighted = sum(h * fast.get(t, best) / best for t, h in e["hours"].items())
            row[policy] = {
                "mean_jct_h": sum(e["jcts"]) / max(len(e["jcts"]), 1) / 3600,
                "sum_jct_h": sum(e["jcts"]) / 3600,
                "gpu_hours": {t: round(h, 1) for t, h in sorted(e["hours"].items())},
                "moves_per_job": None
                if e["moves"] is None
                else e["moves"] / max(len(e["jcts"]), 1),
                "on_fastest": on_best / total_h if total_h else None,
                "speed_efficiency": weighted / total_h if total_h else None,
            }
        row["ratio"] = row[mine]["sum_jct_h"] / max(row[base]["sum_jct_h"], 1e-9)
        row["share_of_base"] = row[base]["sum_jct_h"] * 3600 / max(base_sum, 1e-9)
        row["gap_part"] = (
            (row[mine]["sum_jct_h"] - row[base]["sum_jct_h"]) * 3600 / max(base_sum, 1e-9)
        )
        out["apps"][app] = row
    return out


def _empty(types: list[str]) -> dict[str, Any]:
    return {"jcts": [], "hours": {}, "moves": None}


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def print_account(cluster: str, acc: dict[str, Any]) -> None:
    mine, base = acc["policies"]
    print(f"\n### {cluster}: {mine} against {base}, workloads {acc['workloads']}\n")
    print(
        f"| application | jobs | {mine} mean JCT (h) | {base} | x {base} | share of {base}'s sum "
        f"| part of the gap | GPU-h {mine} | GPU-h {base} | moves/job {mine} | {base} "
        f"| on fastest {mine} | {base} | speed eff. {mine} | {base} |"
    )
    print("|---" * 15 + "|")
    total_gap = 0.0
    for app, r in acc["apps"].items():
        a, s = r[mine], r[base]
        total_gap += r["gap_part"]

        def hours(e: dict[str, Any]) -> str:
            return " / ".join(
                f"{t.removeprefix('Tesla-')} {h:.0f}" for t, h in e["gpu_hours"].items()
            )

        print(
            f"| {app} | {r['jobs']} | {a['mean_jct_h']:.2f} | {s['mean_jct_h']:.2f} "
            f"| {r['ratio']:.2f} | {r['share_of_base']:.0%} | {r['gap_part']:+.3f} "
            f"| {hours(a)} | {hours(s)} | {_fmt(a['moves_per_job'], '.2f')} "
            f"| {_fmt(s['moves_per_job'], '.2f')} | {_fmt(a['on_fastest'], '.0%')} "
            f"| {_fmt(s['on_fastest'], '.0%')} | {_fmt(a['speed_efficiency'], '.2f')} "
            f"| {_fmt(s['speed_efficiency'], '.2f')} |"
        )
    print(f"\n{mine}'s mean over {base}'s: {1 + total_gap:.3f} (the gap parts summed, plus one)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("runs", type=Path, nargs="+", help="saved runs of mixed_types.py --json")
    ap.add_argument("--policies", default="adl,sia", help="the policy and the one it is held to")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    pair = tuple(p for p in args.policies.split(",") if p)
    if len(pair) != 2:
        ap.error("--policies takes two names, e.g. adl,sia")
    rows = load_rows(args.runs)
    out = {}
    for cluster in sorted({c for c, _, _ in rows}, reverse=True):
        acc = account(rows, cluster, (pair[0], pair[1]))
        if acc["workloads"]:
            print_account(cluster, acc)
            out[cluster] = acc
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {"command": " ".join(sys.argv), "runs": [str(p) for p in args.runs], **out}
        args.json.write_text(json.dumps(payload, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
