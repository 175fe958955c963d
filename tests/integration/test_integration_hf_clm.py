"""examples/hf_clm.py (a causal-LM Trainer script in the shape of HF's run_clm.py) under adl.

* At 3 replicas, where B0 = 16 does not split evenly, it trains the optimizer steps and the
  samples that stock ``transformers.Trainer`` trains, and logs what one process logs (so each
  replica's share of the batch is weighted by its size in the update).
* Under the local daemon, grown from 1 to 2 replicas, suspended and resumed on 1, it logs what
  an uninterrupted run logs, and its ``train_results.json`` and ``trainer_state.json`` cover
  the whole run: every field Trainer writes, the runtime of every start, the whole run's
  steps, samples and FLOs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from client_harness import read_records, run_job
from framework_run import RTOL, assert_same_history, log_text, python, reference, run_elastic
from hf_history import untimed

pytest.importorskip("transformers")  # adl[hf], which the dev extra installs

HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parents[1] / "examples" / "hf_clm.py"
WORKER = HERE / "hf_gated_worker.py"
# 564 sentences make 160 blocks of 32 tokens: 10 steps an epoch at B0 = 16. At 3 replicas B0
# is 6 + 5 + 5 (ceil(16 / 3) = 6 per replica would make 18 a step, 9 steps an epoch). No step
# is short: adl scales the LR of a batch other than B0 by gradient statistics that differ with
# the world size, which would part the runs at an epoch's short last step.
EPOCHS, SAMPLES, B0 = 2, 160, 16
ARGS = ("--epochs", str(EPOCHS), "--lines", "564", "--batch", str(B0))
STEPS = EPOCHS * -(-SAMPLES // B0)
#: what Trainer measures and ``run_clm.py`` adds (train_samples); a printer callback drops
#: total_flos from the metrics, which trainer_state.json keeps
RESULT_KEYS = {
    "epoch",
    "train_loss",
    "train_runtime",
    "train_samples",
    "train_samples_per_second",
    "train_steps_per_second",
}


def outputs(out_dir: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(train_results.json, trainer_state.json) of a run."""
    results = json.loads((out_dir / "train_results.json").read_text())
    return results, json.loads((out_dir / "trainer_state.json").read_text())


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The example on one process, standalone: what the elastic runs must log and write."""
    tmp = tmp_path_factory.mktemp("uninterrupted")
    command = python(str(EXAMPLE), *ARGS, "--output-dir", str(tmp / "out"))
    history = reference(command, tmp / "history.json")
    results, state = outputs(tmp / "out")
    return {"history": history, "results": results, "state": state}


def test_hf_clm_at_three_replicas_trains_the_steps_and_samples_of_stock_trainer(
    tmp_path: Path, uninterrupted: dict[str, Any]
) -> None:
    stock_out, stock_rec = tmp_path / "stock", tmp_path / "stock-rec"
    reference(
        python(
            str(WORKER), "--record", str(stock_rec), "--", str(EXAMPLE), *ARGS,
            "--trainer", "stock", "--output-dir", str(stock_out),
        ),
        tmp_path / "stock.json",
    )  # fmt: skip
    out, rec = tmp_path / "three", tmp_path / "three-rec"
    codes = run_job(
        3,
        tmp_path / "ckpt",
        rec,
        *("--", str(EXAMPLE), *ARGS, "--output-dir", str(out)),
        *("--out", str(tmp_path / "three.json")),
        script=WORKER,
    )
    assert codes == [0, 0, 0]
    stock_results, stock_state = outputs(stock_out)
    results, state = outputs(out)
    # optimizer steps: stock Trainer's, all the schedule planned
    assert stock_state["global_step"] == stock_state["max_steps"] == STEPS
    assert (state["global_step"], state["max_steps"]) == (STEPS, STEPS)
    # samples: each once per epoch, as with stock Trainer, and over the replicas
    (stock_rows,) = read_records(stock_rec)
    rows = read_records(rec)
    assert sorted(r["rank"] for r in rows) == [0, 1, 2]
    assert sum(r["samples"] for r in rows) == stock_rows["samples"] == EPOCHS * SAMPLES
    # the files Trainer writes, with the same fields
    assert set(results) == set(stock_results) == RESULT_KEYS
    assert results["epoch"] == stock_results["epoch"] == EPOCHS
    # every step the update of the whole batch: the 6 + 5 + 5 shares weighted by their sizes
    history = json.loads((tmp_path / "three.json").read_text())
    assert_same_history(untimed(history), untimed(uninterrupted["history"]))
    assert [e.get("batch_size") for e in history if "loss" in e] == [B0] * (STEPS // 3)


def test_hf_clm_resized_and_suspended_logs_and_reports_as_an_uninterrupted_run(
    daemon_factory: Any, backend: Any, home: Path, tmp_path: Path, uninterrupted: dict[str, Any]
) -> None:
    out = tmp_path / "out"
    seen: list[int | None] = []
    got = run_elastic(
        daemon_factory,
        backend,
        home,
        "clm",
        python(str(WORKER), str(EXAMPLE), *ARGS, "--output-dir", str(out)),
        gates=(5, 15),  # grow in epoch 0, suspend in epoch 1
        out=tmp_path / "elastic.json",
        on_poll=lambda status: seen.append(status.batch_size),
    )
    finished = time.time()
    # what `adl ls` showed at every poll: B0, or nothing before a first report (the starts here
    # take a fraction of a second, often less than the first report needs)
    assert {b for b in seen if b is not None} <= {B0}, sorted(set(seen), key=str)
    want = uninterrupted["history"]
    assert [e["step"] for e in want if "loss" in e] == list(range(3, STEPS + 1, 3))
    assert_same_history(untimed(got), untimed(want))

    results, state = outputs(out)
    ref_results, ref_state = uninterrupted["results"], uninterrupted["state"]
    # the whole run's steps, as planned, and FLOs (the replicas' and every start's)
    assert state["global_step"] == state["max_steps"] == ref_state["global_step"] == STEPS
    assert ref_state["total_flos"] > 0
    assert state["total_flos"] == ref_state["total_flos"]
    # every field, and the values that do not depend on timing, as uninterrupted
    assert set(results) == set(ref_results) == RESULT_KEYS
    assert results["epoch"] == ref_results["epoch"] == EPOCHS
    assert results["train_samples"] == SAMPLES
    loss = ref_results["train_loss"]
    assert abs(results["train_loss"] - loss) <= RTOL * loss, (results, ref_results)
    # the runtime is that of the three starts' train() together: at least each start's time
    # from its train() to its last step, at most the time since the first start's train()
    starts: list[list[float]] = []
    for line in log_text(home, "clm").splitlines():
        if line.startswith('{"clock"'):
            clock = json.loads(line)
            if clock["clock"] == "begin":
                starts.append([])
            starts[-1].append(clock["t"])
    assert len(starts) == 3, starts
    trained = sum(times[-1] - times[0] for times in starts)
    runtime = results["train_runtime"]
    assert trained <= runtime <= finished - starts[0][0], (trained, runtime, starts)
    # the rates are the whole run's steps and samples over that runtime (Trainer rounds the
    # runtime to 4 decimals and the rates to 3: over a short runtime that moves a rate by more
    # than its last decimal, so the tolerance is relative)
    assert results["train_steps_per_second"] == pytest.approx(STEPS / runtime, rel=1e-3)
    want_rate = EPOCHS * SAMPLES / runtime
    assert results["train_samples_per_second"] == pytest.approx(want_rate, rel=1e-3)
