"""Metrics across resizes and suspends, with real gloo processes: an evaluation Accumulator
created per epoch and a tracked best accuracy print exactly what an uninterrupted run prints."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from client_harness import run_job

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("client_eval_worker.py")


def _printed(record: Path) -> list[dict[str, Any]]:
    lines = (record / "printed.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line]


def test_per_epoch_metrics_survive_resizes_and_a_suspend(tmp_path: Path) -> None:
    straight = tmp_path / "straight"
    assert run_job(2, straight / "ckpt", straight / "rec", script=WORKER) == [0, 0]
    expected = {(r["epoch"], r["kind"]): r["value"] for r in _printed(straight / "rec")}
    assert len(expected) == 4 * 3
    assert expected[(3, "best")] == {"accuracy": 100.0, "epoch": 3}  # best moves every epoch

    ckpt, rec = tmp_path / "resized" / "ckpt", tmp_path / "resized" / "rec"
    runs: list[tuple[int, tuple[str, ...]]] = [
        (2, ("--stop", "0", "train", "2", "--stop-rank", "1")),  # resize 2 -> 1
        (1, ("--stop", "1", "eval", "1")),  # mid-evaluation, resize 1 -> 3
        (3, ("--stop", "2", "train", "1", "--stop-rank", "2", "--stop-file")),  # suspend
        (3, ("--stop", "3", "eval", "0")),  # resume at the same size, then resize 3 -> 2
    ]
    for world, stop in runs:
        assert run_job(world, ckpt, rec, *stop, script=WORKER) == [143] * world, stop
        (ckpt.parent / "stop").unlink(missing_ok=True)  # a suspend's file, now served
    assert run_job(2, ckpt, rec, script=WORKER) == [0, 0]

    printed = _printed(rec)
    for row in printed:
        assert row["value"] == expected[(row["epoch"], row["kind"])], row
    assert {(r["epoch"], r["kind"]) for r in printed} == set(expected)
