"""examples/lightning_module.py (a LightningModule under adl) under the local daemon: grown from
1 to 2 replicas, suspended and resumed on 1, it logs what an uninterrupted run logs."""

from __future__ import annotations

from pathlib import Path

import pytest
from framework_run import assert_same_history, python, reference, run_elastic

pytest.importorskip("lightning")  # adl[lightning], which the dev extra installs

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parents[1] / "examples" / "lightning_module.py"
WORKER = HERE / "lightning_gated_worker.py"
ARGS = ("--epochs", "2", "--size", "384", "--batch", "32")  # 12 steps an epoch


def test_lightning_module_resized_and_suspended_logs_as_an_uninterrupted_run(
    daemon_factory, backend, home, tmp_path: Path
) -> None:  # type: ignore[no-untyped-def]
    want = reference(python(str(EXAMPLE), *ARGS), tmp_path / "reference.json")
    got = run_elastic(
        daemon_factory,
        backend,
        home,
        "mlp",
        python(str(WORKER), *ARGS),
        gates=(6, 16),  # grow in epoch 0, suspend in epoch 1
        out=tmp_path / "elastic.json",
    )
    # the runs are comparable: the loss and the LR (LearningRateMonitor) every 2 steps, with
    # Lightning's step and epoch
    assert [r["step"] for r in want if "train_loss" in r] == [float(s) for s in range(1, 24, 2)]
    assert {r["epoch"] for r in want if "epoch" in r} == {0.0, 1.0}
    assert sum("lr-SGD" in r for r in want) == 12
    assert_same_history(got, want)
