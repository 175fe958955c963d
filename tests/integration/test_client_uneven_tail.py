"""An epoch whose tail does not split evenly over the replicas (100 samples, 3 replicas of 4):
the last step's shares differ by one, and every rank must still take the same step."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from client_harness import read_records, run_job

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("evaluate", [False, True], ids=["train-only", "eval-inside-the-step"])
def test_replicas_agree_on_the_step_after_an_uneven_tail(tmp_path: Path, evaluate: bool) -> None:
    """With a validation pass inside the step (before its forward), the training loader's
    counts must still be the ones the step uses."""
    ckpt, rec = tmp_path / "ckpt", tmp_path / "rec"
    args = ("--size", "100", "--batch", "12", "--epochs", "2", "--adp")
    args += ("--eval-each-step",) if evaluate else ()
    assert run_job(3, ckpt, rec, *args) == [0, 0, 0]
    rows = read_records(rec)
    # Epoch 0 ends with 4 samples shared (2, 1, 1); the progress each rank counted for that step
    # (read at every later micro-batch) decides its LR schedule and must be the same everywhere.
    progress: dict[tuple[int, int], dict[int, float]] = defaultdict(dict)
    index: dict[int, int] = defaultdict(int)
    for row in rows:
        progress[(row["epoch"], index[row["rank"]])][row["rank"]] = row["progress"]
        index[row["rank"]] += 1
    assert sorted({len(ranks) for ranks in progress.values()}) == [3]
    later = [ranks for (epoch, _), ranks in progress.items() if epoch == 1]
    assert later and all(len(set(ranks.values())) == 1 for ranks in later), later[0]
