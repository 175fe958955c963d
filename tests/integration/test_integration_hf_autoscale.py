"""AdaptiveTrainer's automatic batch sizing (``max_batch_size=``) under the local daemon: the
job grows from 1 to 2 replicas, adl then picks a larger batch (with gradient accumulation above
the micro-batch bound), the job is suspended and resumed on 1 replica; what each optimizer step
used and what the Trainer logged must add up.

The batch a goodput model picks depends on measured step times, so the test does not compare
with a fixed run: it checks invariants that any correct run satisfies and that a run which
lost, repeated or miscounted samples, steps or micro-batches (at a batch change or a restart)
would break."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from framework_run import log_text, python, run_elastic

pytest.importorskip("transformers")

HERE = Path(__file__).resolve().parent
WORKER = HERE / "hf_autoscale_worker.py"
SIZE, EPOCHS, B0, LOCAL_MAX = 512, 4, 8, 16
LR = 0.005  # a constant schedule: only adl's scaling moves the LR
ARGS = (
    *("--size", str(SIZE), "--epochs", str(EPOCHS), "--batch", str(B0)),
    *("--max-batch", "128", "--local-max", str(LOCAL_MAX), "--lr", str(LR)),
)
GATES = (20, 70)  # grow in epoch 0 (64 steps at B0), suspend in epoch 1


def records(home: Path, name: str) -> list[dict[str, Any]]:
    """Each optimizer step's record, from rank 0's log over every start of the job."""
    out = []
    for line in log_text(home, name).splitlines():
        if line.startswith('{"rec"'):
            out.append(json.loads(line)["rec"])
    return out


def test_hf_autoscaled_batch_changes_and_the_logged_metrics_add_up(
    daemon_factory: Any, backend: Any, home: Path, tmp_path: Path
) -> None:
    history = run_elastic(
        daemon_factory,
        backend,
        home,
        "autoscale",
        python(str(WORKER), *ARGS),
        gates=GATES,
        out=tmp_path / "history.json",
    )
    recs = records(home, "autoscale")
    steps = [r["step"] for r in recs]
    assert steps == list(range(1, len(recs) + 1)), steps  # each step once, none lost

    # the job ran at 1, 2, then 1 replica, and adl grew the batch past B0 (with accumulation
    # once it exceeds the micro-batch bound)
    worlds = [r["world"] for r in recs]
    assert worlds[: GATES[0]] == [1] * GATES[0] and 2 in worlds and worlds[-1] == 1, worlds
    batches = [r["batch"] for r in recs]
    assert max(batches) > B0, batches
    assert any(r["accum"] > 0 for r in recs) == (max(batches) > max(worlds) * LOCAL_MAX)

    # each step ran the micro-batches its configuration says, over the samples it says
    samples = []
    previous = 0.0
    for r in recs:
        assert r["batch"] == r["world"] * r["local"] * (r["accum"] + 1), r
        assert r["local"] <= LOCAL_MAX, r
        took = round((r["epoch"] - previous) * SIZE)
        tail = math.isclose(r["epoch"], round(r["epoch"])) and took < r["batch"]
        if not tail:  # an epoch's last step may be short
            assert took == r["batch"] and r["micro"] == r["accum"] + 1, r
        assert 0 < took <= r["batch"] and r["micro"] <= r["accum"] + 1, r
        samples.append(took)
        previous = r["epoch"]
    assert sum(samples) == EPOCHS * SIZE and recs[-1]["epoch"] == EPOCHS

    # the Trainer's log: an entry every step, with the batch and epoch of its step
    logged = [e for e in history if "loss" in e]
    assert [e["step"] for e in logged] == steps
    for e, r in zip(logged, recs, strict=True):
        assert e["batch_size"] == r["batch"] and e["epoch"] == r["epoch"], (e, r)
        # the LR applied follows the batch: the constant LR at B0, scaled up (by at most the
        # batch ratio) above it, whichever start of the job the step ran in
        if r["batch"] == B0:
            assert e["learning_rate"] == LR, (e, r)
        else:
            assert LR < e["learning_rate"] <= LR * r["batch"] / B0, (e, r)
    # the run's mean loss is the sample-weighted mean of the steps' (the sums behind both
    # survived each restart and no sample was counted twice or dropped)
    final = history[-1]
    assert final["step"] == len(recs) and "train_loss" in final, final
    weighted = sum(e["loss"] * n for e, n in zip(logged, samples, strict=True)) / sum(samples)
    assert math.isclose(final["train_loss"], weighted, rel_tol=1e-9), (final, weighted)
