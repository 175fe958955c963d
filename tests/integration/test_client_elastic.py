"""Elastic restarts with real gloo process groups: exact sample coverage, exact resumption,
coordinated preemption."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from client_harness import ids_per_epoch, load_params, read_records, run_job

pytestmark = pytest.mark.slow

SIZE = 100
EPOCHS = 2


def test_resize_1_to_3_to_2_sees_every_sample_once_per_epoch(tmp_path: Path) -> None:
    ckpt, rec = tmp_path / "ckpt", tmp_path / "rec"
    common = ("--size", str(SIZE), "--epochs", str(EPOCHS), "--shuffle", "--batch", "12", "--adp")
    # 1 replica, stopped mid-epoch 0 (local batch 12).
    assert run_job(1, ckpt, rec, *common, "--stop-at", "3") == [143]
    # 3 replicas (local batch 4), stopped by rank 2 late in epoch 0 / early epoch 1.
    assert run_job(3, ckpt, rec, *common, "--stop-at", "6", "--stop-rank", "2") == [143] * 3
    # 2 replicas finish the run.
    assert run_job(2, ckpt, rec, *common, "--params-out", str(tmp_path / "p.pt")) == [0, 0]

    rows = read_records(rec)
    assert {r["world"] for r in rows} == {1, 2, 3}
    seen = ids_per_epoch(rows)
    assert sorted(seen) == list(range(EPOCHS))
    for epoch, counts in seen.items():
        assert set(counts) == set(range(SIZE)), f"epoch {epoch} lost samples"
        assert max(counts.values()) == 1, f"epoch {epoch} repeated samples"
    # The metric accumulator counted every sample once across the three runs.
    assert load_params(tmp_path / "p.pt")["samples"] == EPOCHS * SIZE


def _final_params(tmp_path: Path, name: str, *extra: str, stop_at: int | None) -> dict:
    ckpt, rec, out = tmp_path / name / "ckpt", tmp_path / name / "rec", tmp_path / f"{name}.pt"
    common = ("--size", "96", "--epochs", "2", "--shuffle", "--batch", "8", *extra)
    if stop_at is not None:
        assert run_job(2, ckpt, rec, *common, "--stop-at", str(stop_at)) == [143, 143]
        assert not out.exists()
    assert run_job(2, ckpt, rec, *common, "--params-out", str(out)) == [0, 0]
    return load_params(out)


# ``adp``: AdaptiveDataParallel at twice its B0 with one accumulation step per optimizer step, so
# the LR factor depends on the checkpointed noise statistics and the resumed run must restore them.
ADP_ACCUM = ("--adp", "--adp-b0", "4", "--autoscale", "8", "--local-max", "2")


@pytest.mark.parametrize("extra", [(), ADP_ACCUM], ids=["ddp", "adp"])
def test_stop_and_resume_is_bit_identical_to_uninterrupted(
    tmp_path: Path, extra: tuple[str, ...]
) -> None:
    straight = _final_params(tmp_path, "straight", *extra, stop_at=None)
    resumed = _final_params(tmp_path, "resumed", *extra, stop_at=4)
    assert straight["samples"] == resumed["samples"] == 2 * 96
    assert straight["progress"] == resumed["progress"]
    if extra == ADP_ACCUM:
        rows = read_records(tmp_path / "straight" / "rec")
        assert {r["local_bsz"] for r in rows} == {2}
        assert [r["sync"] for r in rows[:4]] == [False, True, False, True]  # accumulating
        # 24 optimizer steps at twice B0, each worth more than one base step: the LR was scaled
        # with noise statistics that the resumed run had to restore from the checkpoint.
        assert 24 < straight["progress"] < 48
    for key, value in straight["params"].items():
        assert torch.equal(value, resumed["params"][key]), key


def test_sigterm_on_one_rank_stops_all_at_the_same_step(tmp_path: Path) -> None:
    ckpt, rec = tmp_path / "ckpt", tmp_path / "rec"
    args = ("--size", "300", "--epochs", "1", "--stop-at", "2", "--stop-rank", "1")
    codes = run_job(3, ckpt, rec, *args, "--batch", "18")
    assert codes == [143, 143, 143]
    rows = read_records(rec)
    steps = [sum(1 for r in rows if r["rank"] == rank) for rank in range(3)]
    assert len(set(steps)) == 1 and 2 < steps[0] < 300 // 18  # same step, before the end
    states = torch.load(ckpt / "adl-checkpoint.pt", weights_only=True)["states"]
    assert states["adl.loader.0"]["offset"] == steps[0] * 18
    metrics = states["adl.accumulators"]["entries"]["before/metrics#0"]
    assert metrics["total"]["samples"] == steps[0] * 18
