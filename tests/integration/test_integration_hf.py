"""examples/hf_trainer.py (Hugging Face Trainer under adl) under the local daemon: grown from
1 to 2 replicas, suspended and resumed on 1, it logs what an uninterrupted run logs."""

from __future__ import annotations

from pathlib import Path

import pytest
from framework_run import assert_same_history, python, reference, run_elastic
from hf_history import untimed

pytest.importorskip("transformers")  # adl[hf], which the dev extra installs

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parents[1] / "examples" / "hf_trainer.py"
WORKER = HERE / "hf_gated_worker.py"
ARGS = ("--epochs", "2", "--size", "192", "--batch", "16")  # 12 steps an epoch


def test_hf_trainer_resized_and_suspended_logs_as_an_uninterrupted_run(
    daemon_factory, backend, home, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    want = reference(python(str(EXAMPLE), *ARGS), tmp_path / "reference.json")
    got = run_elastic(
        daemon_factory,
        backend,
        home,
        "bert",
        python(str(WORKER), *ARGS),
        gates=(6, 16),  # grow in epoch 0, suspend in epoch 1
        out=tmp_path / "elastic.json",
    )
    # the runs are comparable: losses per logging step, global step, epoch, LR, grad norm
    assert [e["step"] for e in want] == [*range(2, 25, 2), 24]
    assert {"loss", "learning_rate", "grad_norm", "epoch", "step"} <= set(want[0])
    # the last entry holds Trainer's end-of-training metrics, timings included
    assert {"train_loss", "train_runtime", "total_flos"} <= set(want[-1])
    assert_same_history(untimed(got), untimed(want))
