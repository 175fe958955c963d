"""examples/word_lm.py (a sequence-first LSTM language model, the shape of pytorch/examples'
word_language_model) under the local daemon: grown from 1 to 2 replicas, suspended and resumed
on 1, it prints the numbers of an uninterrupted run, and the job's batch size is the training
loader's at every poll (not the validation loader's, not the sequence length)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from framework_run import RTOL, python, reference, run_elastic

from adl.models import AdaptiveJobStatus

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parents[1] / "examples" / "word_lm.py"
WORKER = HERE / "gated_example.py"
# 7002 tokens: 180 training sequences of 35 (9 steps an epoch at batch 20, no uneven tail), 20
# validation sequences (batch 10)
ARGS = ("--epochs", "4", "--tokens", "7002", "--batch", "20", "--eval-batch", "10")
GATES = (7, 23)  # grow in epoch 0, suspend in epoch 2


def test_word_lm_resized_and_suspended_prints_the_uninterrupted_runs_numbers(
    daemon_factory: Any, backend: Any, home: Path, tmp_path: Path
) -> None:
    want = reference(python(str(EXAMPLE), *ARGS), tmp_path / "reference.json")
    seen: list[int | None] = []

    def poll(status: AdaptiveJobStatus) -> None:
        seen.append(status.batch_size)

    got: Any = run_elastic(
        daemon_factory,
        backend,
        home,
        "lm",
        python(str(WORKER), str(EXAMPLE), *ARGS),
        gates=GATES,
        out=tmp_path / "elastic.json",
        on_poll=poll,
    )
    rows, ref = got["epochs"], want["epochs"]
    assert [r["epoch"] for r in rows] == [r["epoch"] for r in ref] == [0, 1, 2, 3]
    # the epochs really ran at 1, then 2, then 1 replica again
    assert [r["world"] for r in rows] == [2, 2, 1, 1], rows
    for g, w in zip(rows, ref, strict=True):
        assert (g["batch_size"], g["steps"]) == (w["batch_size"], w["steps"]), (g, w)
        for key in ("train_loss", "val_loss", "lr"):
            assert abs(g[key] - w[key]) <= RTOL * abs(w[key]), (key, g, w)
    assert abs(got["best_val"] - want["best_val"]) <= RTOL * want["best_val"]
    # it learned: the comparison is not between two stuck runs
    assert ref[-1]["val_loss"] < 0.9 * ref[0]["val_loss"], ref
    # what `adl ls` showed: the training batch (20) or nothing yet; never the validation
    # loader's 10, never the sequence length 35
    reported = {b for b in seen if b is not None}
    assert reported == {20}, sorted(set(seen), key=str)
