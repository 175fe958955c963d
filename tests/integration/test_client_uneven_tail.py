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


def test_uneven_shares_update_as_one_process_would(tmp_path: Path) -> None:
    """B0 = 16 split exactly over 3 replicas (6, 5, 5): each share weighs its size in the step,
    so every update is the mean over the step's 16 samples, as on one process, not the mean
    of three per-replica means. (Every step is B0, so the LR factor is 1 at both world sizes:
    the noise statistics, measured differently at each, do not enter.)"""
    import torch

    args = ("--size", "96", "--batch", "16", "--epochs", "2", "--adp", "--exact", "--shuffle")
    finals = {}
    for world in (1, 3):
        out = tmp_path / f"p{world}.pt"
        codes = run_job(world, tmp_path / f"ckpt{world}", tmp_path / f"rec{world}", *args,
                        "--params-out", str(out))  # fmt: skip
        assert codes == [0] * world
        finals[world] = torch.load(out)
    assert finals[1]["samples"] == finals[3]["samples"] == 2 * 96
    for name, want in finals[1]["params"].items():
        torch.testing.assert_close(finals[3]["params"][name], want, rtol=1e-5, atol=1e-6)
