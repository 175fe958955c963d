"""How well the throughput model extrapolates: fit on <= 2 nodes, predict 3, 4 and 6-16 nodes.

For each application of the traces, :func:`adl.sched.goodput.fit_perf_params` is fitted to the
measured step times of every placement spanning at most 2 nodes (``placements.csv``; each row
gives an accumulation micro-step ``step - sync`` and an optimizer step ``step``), exactly the
observations a job would have after running there. The model then predicts the optimizer-step
time of every measured placement on more nodes (3 and 4 nodes from ``placements.csv``, 6-16 from
``scalability.csv``) and we report the relative error ``|predicted / measured - 1|``: per
application the median per node bucket, and the overall median (the headline is 4 nodes).

    .venv/bin/python benchmarks/fit_accuracy.py [--traces DIR] [--max-fit-nodes 2] [--json PATH]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from adl.sched.goodput import Observations, fit_perf_params, step_time  # noqa: E402
from adl.sched.sim.traces import default_traces_dir  # noqa: E402

Row = tuple[int, int, float, float, float]  # nodes, replicas, micro-batch, step, sync


def read_rows(app_dir: Path) -> list[Row]:
    """Every measurement of one application: placements first, then the scalability spreads."""
    rows: list[Row] = []
    with (app_dir / "placements.csv").open(newline="") as f:
        for r in csv.DictReader(f):
            digits = [int(c) for c in r["placement"].strip() if c != "0"]
            rows.append(
                (
                    len(digits),
                    sum(digits),
                    float(r["local_bsz"]),
                    float(r["step_time"]),
                    float(r["sync_time"]),
                )
            )
    scal = app_dir / "scalability.csv"
    if scal.exists():
        with scal.open(newline="") as f:
            for r in csv.DictReader(f):
                rows.append(
                    (
                        int(r["num_nodes"]),
                        int(r["num_replicas"]),
                        float(r["local_bsz"]),
                        float(r["step_time"]),
                        float(r["sync_time"]),
                    )
                )
    return rows


def bucket(nodes: int) -> str:
    return str(nodes) if nodes <= 4 else "6-16"


def evaluate_app(rows: list[Row], max_fit_nodes: int) -> dict[str, Any]:
    """Fit on the small spreads, return per-bucket relative errors of the larger ones."""
    train = [r for r in rows if r[0] <= max_fit_nodes]
    test = [r for r in rows if r[0] > max_fit_nodes]
    obs = Observations.from_rows([(n, k, m, st - sy, st) for n, k, m, st, sy in train])
    t0 = time.perf_counter()
    perf = fit_perf_params(obs)
    fit_s = time.perf_counter() - t0

    def rel_err(subset: list[Row]) -> np.ndarray:
        if not subset:
            return np.zeros(0)
        arr = np.array(subset, dtype=np.float64)
        pred = step_time(perf, arr[:, 0], arr[:, 1], arr[:, 2])
        return np.asarray(np.abs(pred / arr[:, 3] - 1.0))

    errors: dict[str, np.ndarray] = {}
    for r in test:
        errors.setdefault(bucket(r[0]), np.zeros(0))
    for key in errors:
        errors[key] = rel_err([r for r in test if bucket(r[0]) == key])
    train_err = rel_err(train)
    # Diagnostic: the same fit with the across-node sync flat in the replica count.
    flat = perf._replace(beta_n=0.0)
    four = np.array([r for r in test if r[0] == 4], dtype=np.float64).reshape(-1, 5)
    flat_err = np.abs(step_time(flat, four[:, 0], four[:, 1], four[:, 2]) / four[:, 3] - 1.0)
    signed = (
        step_time(perf, four[:, 0], four[:, 1], four[:, 2]) / four[:, 3] - 1.0
        if len(four)
        else np.zeros(0)
    )
    return {
        "four_node_median_signed_err": float(np.median(signed)) if len(four) else None,
        "four_node_flat_sync_median_rel_err": float(np.median(flat_err)) if len(four) else None,
        "perf_params": perf._asdict(),
        "fit_s": fit_s,
        "train_rows": len(train),
        "train_median_rel_err": float(np.median(train_err)),
        "buckets": {
            key: {"rows": len(e), "median_rel_err": float(np.median(e))}
            for key, e in sorted(errors.items(), key=lambda kv: (len(kv[0]), kv[0]))
        },
        "_errors": errors,
        "_flat": flat_err,
    }


def _pct(x: float | None, sign: str = "") -> str:
    return "-" if x is None else f"{100 * x:{sign}.1f}%"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--traces", type=Path, default=None)
    ap.add_argument("--max-fit-nodes", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    root = args.traces or default_traces_dir()
    base = root / "traces" if (root / "traces").is_dir() else root
    apps = sorted(d for d in base.iterdir() if (d / "placements.csv").exists())
    if not apps:
        raise SystemExit(f"error: no application traces under {base}")

    results: dict[str, dict[str, Any]] = {}
    pooled: dict[str, list[np.ndarray]] = {}
    flat_pool: list[np.ndarray] = []
    for app_dir in apps:
        res = evaluate_app(read_rows(app_dir), args.max_fit_nodes)
        flat_pool.append(res.pop("_flat"))
        for key, e in res.pop("_errors").items():
            pooled.setdefault(key, []).append(e)
        results[app_dir.name] = res

    keys = sorted(pooled, key=lambda k: (len(k), k))
    head = (
        f"{'application':<12} {'fit rows':>8} {'fit err':>8} "
        + " ".join(f"{'nodes ' + k:>12}" for k in keys)
        + f" {'4n signed':>10} {'4n beta_n=0':>12}"
    )
    print(f"median relative error of predicted step time (fit on <= {args.max_fit_nodes} nodes)")
    print(head)
    print("-" * len(head))
    for name, res in results.items():
        cells = []
        for k in keys:
            b = res["buckets"].get(k)
            text = "-" if b is None else f"{100 * b['median_rel_err']:.1f}%"
            cells.append(f"{text:>12}")
        print(
            f"{name:<12} {res['train_rows']:>8} {100 * res['train_median_rel_err']:>7.1f}% "
            + " ".join(cells)
            + f" {_pct(res['four_node_median_signed_err'], '+'):>10}"
            + f" {_pct(res['four_node_flat_sync_median_rel_err']):>12}"
        )
    overall = {k: float(np.median(np.concatenate(pooled[k]))) for k in keys}
    per_app_4 = [
        r["buckets"]["4"]["median_rel_err"] for r in results.values() if "4" in r["buckets"]
    ]
    print("-" * len(head))
    print(
        f"{'all rows':<12} {'':>8} {'':>8} " + " ".join(f"{100 * overall[k]:>11.1f}%" for k in keys)
    )
    if per_app_4:
        print(
            f"\n4-node step time: overall median relative error {100 * overall['4']:.1f}% "
            f"(median of per-app medians {100 * float(np.median(per_app_4)):.1f}%)"
        )
        flat_all = float(np.median(np.concatenate(flat_pool)))
        print(f"same fit with beta_n = 0: overall median relative error {100 * flat_all:.1f}%")
        print(
            "4n signed: median of predicted/measured - 1 (positive = the model is pessimistic); "
            "4n beta_n=0: the same fit with the across-node sync term flat in the replica count "
            "(identical while the fit saw < 3 nodes: the slope then keeps its flat prior)"
        )
    if args.json is not None:
        doc = {
            "max_fit_nodes": args.max_fit_nodes,
            "apps": results,
            "overall_median_rel_err": overall,
            "four_node_flat_sync_overall_median_rel_err": float(
                np.median(np.concatenate(flat_pool))
            ),
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
