"""Record every allocation adl's policy answers, to show that a change to the round's
mechanics (speed, not objective) leaves every decision as it was.

Runs rounds as ``sched_scale.py`` does (synthetic jobs, warm start, refits) on a few cases, and a
slice of the mixed-types simulator replay (``mixed_types.py``), and records each answer of
:meth:`AdlPolicy.optimize` in call order. ``--save`` writes them; ``--compare`` replays and
reports the first answer that differs from a saved file, job by job (exit status 1 if any does).
To check a change, save on the old code and compare on the new one::

    PYTHONPATH=/tmp/old .venv/bin/python benchmarks/round_decisions.py --save /tmp/old.json
    .venv/bin/python benchmarks/round_decisions.py --compare /tmp/old.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import mixed_types  # noqa: E402
import sched_scale  # noqa: E402

from adl.sched.policy import AdlPolicy  # noqa: E402
from adl.sched.types import Allocation, JobInfo, NodeInfo  # noqa: E402


@dataclass(frozen=True)
class Case:
    """One recorded run: ``sched_scale`` rounds, or (``jobs`` = 0) a mixed-types replay of
    ``policy`` (adl's, or another built on its optimizer)."""

    name: str
    jobs: int = 0
    gpus: int = 0
    rounds: int = 0
    gpu_types: int = 1
    tiers: int = 1
    knobs: tuple[tuple[str, float], ...] = ()
    workload: int = 0
    first: int = 0
    policy: str = "adl"


CASES = (
    Case("scale-1000x2048-3types", 1000, 2048, 12, gpu_types=3),
    Case("scale-1000x2048-uniform", 1000, 2048, 8),
    Case("scale-300x512-2types-tiers", 300, 512, 8, gpu_types=2, tiers=3),
    # the value's optional terms (power mean, efficiency floor, starvation floor, quiet growth,
    # tenure and victim charge), with the local search (at most 256 jobs)
    Case(
        "scale-200x256-3types-knobs",
        200,
        256,
        8,
        gpu_types=3,
        knobs=(
            ("efficiency_floor", 0.5),
            ("min_tenure_s", 600.0),
            ("quiet_growth", 1.0),
            ("speedup_power", 0.7),
            ("starve_bound_s", 600.0),
            ("victim_charge", 1.0),
        ),
    ),
    Case("scale-100x64-3types", 100, 64, 8, gpu_types=3),
    Case("mixed-three-types-workload-2-first-60", workload=2, first=60),
    # Pollux's objective in adl's optimizer (its own value, one by one)
    Case(
        "pollux-objective-three-types-workload-1-first-40",
        workload=1,
        first=40,
        policy="pollux-objective",
    ),
)


def _canonical(answer: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    return {name: sorted(answer[name]) for name in sorted(answer)}


def _recording(log: list[dict[str, list[str]]]) -> Callable[..., Allocation]:
    """:meth:`AdlPolicy.optimize`, appending a copy of each answer to ``log``."""
    inner = AdlPolicy.optimize

    def optimize(
        self: AdlPolicy,
        jobs: Sequence[JobInfo],
        nodes: Sequence[NodeInfo],
        previous: Mapping[str, list[str]],
    ) -> Allocation:
        answer = inner(self, jobs, nodes, previous)
        log.append(_canonical(answer))
        return answer

    return optimize


def record(case: Case) -> list[dict[str, list[str]]]:
    log: list[dict[str, list[str]]] = []
    original = AdlPolicy.optimize
    AdlPolicy.optimize = _recording(log)  # type: ignore[method-assign]
    try:
        if case.jobs:
            sched_scale.run_case(
                case.jobs,
                case.gpus,
                case.rounds,
                seed=0,
                refresh=0.1,
                tiers=case.tiers,
                gpu_types=case.gpu_types,
                knobs=dict(case.knobs),
            )
        else:
            task = mixed_types.Task("three-types", case.workload, case.policy, case.first, True)
            mixed_types.run_task(task)
    finally:
        AdlPolicy.optimize = original  # type: ignore[method-assign]
    return log


def _digest(answer: Mapping[str, list[str]]) -> str:
    return hashlib.sha256(json.dumps(answer, sort_keys=True).encode()).hexdigest()[:16]


def compare(name: str, old: list[dict[str, list[str]]], new: list[dict[str, list[str]]]) -> bool:
    """Print the first answer of ``name`` that differs (and how), True when all are equal."""
    if len(old) != len(new):
        print(f"{name}: {len(new)} answers, saved {len(old)}")
    for i, (a, b) in enumerate(zip(old, new, strict=False)):
        if a != b:
            jobs = sorted(j for j in a.keys() | b.keys() if a.get(j) != b.get(j))
            print(f"{name}: answer {i} differs for {len(jobs)} jobs, e.g.")
            for job in jobs[:5]:
                print(f"  {job}: saved {a.get(job)} now {b.get(job)}")
            return False
    return len(old) == len(new)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--save", type=Path, help="record the answers into this JSON file")
    group.add_argument("--compare", type=Path, help="compare the answers with this JSON file")
    parser.add_argument("--cases", default=",".join(c.name for c in CASES))
    args = parser.parse_args()
    by_name = {c.name: c for c in CASES}
    names = [n for n in args.cases.split(",") if n]
    unknown = [n for n in names if n not in by_name]
    if unknown:
        parser.error(f"unknown case(s) {unknown}; choose from {sorted(by_name)}")
    saved: dict[str, Any] = json.loads(args.compare.read_text()) if args.compare else {}
    out: dict[str, Any] = {}
    same = True
    for name in names:
        t0 = time.perf_counter()
        log = record(by_name[name])
        took = time.perf_counter() - t0
        out[name] = log
        placed = sum(len(v) for v in log[-1].values()) if log else 0
        line = f"{name}: {len(log)} answers in {took:.1f} s, last places {placed} replicas"
        if args.compare:
            if name not in saved:
                print(f"{line}; not in {args.compare}")
                same = False
                continue
            ok = compare(name, saved[name], log)
            same &= ok
            line += ", all equal" if ok else ", DIFFERENT"
        print(f"{line} (last digest {_digest(log[-1]) if log else '-'})", flush=True)
    if args.save:
        args.save.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
