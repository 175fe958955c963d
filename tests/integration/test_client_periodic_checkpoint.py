"""Periodic checkpoints bound what a hard failure loses: one rank of a 2-replica job is killed
with SIGKILL at a random step, 5 times; each time the job (started again, as a controller
would) resumes from the last periodic checkpoint, which is never older than the interval plus
a couple of steps, and at the end every epoch has trained on every sample exactly once, the
replayed steps counted and bounded."""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from client_harness import run_job

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
WORKER = HERE / "periodic_ckpt_worker.py"
INTERVAL_S = 1.0
SIZE, BATCH, EPOCHS = 400, 8, 3
STEPS = EPOCHS * SIZE // BATCH  # 150: no uneven tail


def test_kill9_of_a_rank_loses_at_most_the_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ADL_CHECKPOINT_INTERVAL_S", str(INTERVAL_S))
    rng = random.Random(20261127)
    deaths = sorted(rng.sample(range(20, STEPS - 10), 5))
    ckpt = tmp_path / "ckpt"
    starts: list[dict[str, Any]] = []  # per start: rank 0's records, rank 1's records
    common = ("--size", str(SIZE), "--batch", str(BATCH), "--epochs", str(EPOCHS))
    for index, die in enumerate([*deaths, -1]):
        record = tmp_path / f"rec{index}"
        codes = run_job(2, ckpt, record, *common, "--die-at", str(die), script=WORKER)
        rows = {
            rank: [json.loads(line) for p in record.glob(f"rank{rank}-*.jsonl")
                   for line in p.read_text().splitlines() if line]
            for rank in (0, 1)
        }  # fmt: skip
        starts.append(rows)
        if die < 0:
            assert codes == [0, 0]
        else:
            assert codes[1] == -9, codes  # killed; rank 0 fails on the lost peer
            assert codes[0] != 0, codes

    # each start resumes from the latest periodic checkpoint of the start before it
    resumed_from = [0]
    for index, die in enumerate(deaths):
        rank0, rank1 = starts[index][0], starts[index][1]
        ckpts = [r for r in rank0 if "ckpt" in r]
        assert ckpts, f"start {index}: no periodic checkpoint before the kill at step {die}"
        last = ckpts[-1]
        steps1 = [r for r in rank1 if "step" in r]
        killed_at = next(r for r in steps1 if r["step"] == die)
        gaps = [b["t"] - a["t"] for a, b in itertools.pairwise(steps1)]
        # the kill comes at most the interval after the checkpoint, plus the step the ranks
        # need to agree on the next one and the save itself (bounded by a few step times)
        assert killed_at["t"] - last["t"] <= INTERVAL_S + 3 * max(gaps, default=1.0), (
            index,
            last,
            killed_at,
        )
        nxt = [r for r in starts[index + 1][0] if "step" in r]
        assert nxt[0]["step"] == last["ckpt"] + 1, (index, last, nxt[0])
        resumed_from.append(last["ckpt"])

    # the work that counts: each start's steps up to where the next one resumed
    effective: dict[int, list[dict[str, Any]]] = {}
    replayed = 0
    for index, rows in enumerate(starts):
        end = resumed_from[index + 1] if index + 1 < len(resumed_from) else STEPS
        for rank in (0, 1):
            for r in rows[rank]:
                if "step" not in r:
                    continue
                if r["step"] <= end:
                    effective.setdefault(r["step"], []).append(r)
                elif rank == 0:
                    replayed += 1
    assert sorted(effective) == list(range(1, STEPS + 1))
    assert all(len(rs) == 2 for rs in effective.values())  # both ranks, once each
    for epoch in range(EPOCHS):
        ids = Counter(i for rs in effective.values() for r in rs if r["epoch"] == epoch
                      for i in r["ids"])  # fmt: skip
        assert ids == Counter(range(SIZE)), epoch  # every sample once per epoch
    # replayed: the steps after each last checkpoint, up to each kill (bounded above)
    assert replayed == sum(d - c for d, c in zip(deaths, resumed_from[1:], strict=True))
    (done,) = [r for r in starts[-1][0] if "done" in r]
    assert done["done"] == STEPS
    assert done["samples"] == {f"e{e}": SIZE for e in range(EPOCHS)}  # the metric, restored
