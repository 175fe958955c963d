"""Elastic sharded data parallel (FSDP2) with real gloo process groups on CPU.

Tolerances, and why:

- **Bit-exact** where DCP guarantees it: what a run restores at M ranks equals, element for
  element, what the run at N ranks saved (parameters and Adam's ``exp_avg``, ``exp_avg_sq`` and
  ``step``). Saving and resharded loading only copy bytes.
- **Training equivalence** (``atol=1e-5``, ``rtol=1e-4``) between runs at different world sizes:
  the global batch and its samples are the same at every step, but each rank's loss is a mean
  over a different share (6, 3 or 4 samples) and the reduce-scatter sums a different number of
  partial means in another order, so the averaged gradient differs in its last float32 bits
  (~1e-7 relative) and Adam carries that over the 16 steps.
- **Same estimator** (``rtol=1e-5``): at one world size the sharded noise statistics equal
  those of the DDP path; only the order of the float32 sums differs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from client_harness import run_job
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from adl.client_lib import checkpoint

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("client_fsdp_worker.py")
TRAIN_ATOL, TRAIN_RTOL = 1e-5, 1e-4
STEPS = 16  # 2 epochs of 96 samples at a global batch of 12


def _run(world: int, base: Path, *extra: str) -> list[int]:
    return run_job(world, base / "ckpt", base / "rec", *extra, script=WORKER)


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def _rows(base: Path) -> list[dict[str, Any]]:
    """Rank 0's optimizer steps, over every run in ``base`` (``--save-every`` adds other lines)."""
    rows = [r for p in (base / "rec").glob("rank0-*.jsonl") for r in _records(p) if "step" in r]
    return sorted(rows, key=lambda r: r["step"])


def _load(path: Path) -> dict[str, Any]:
    return torch.load(path, weights_only=False)


def _assert_close_states(a: dict[str, Any], b: dict[str, Any], exact: bool) -> None:
    assert a.keys() == b.keys()
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, dict):
            _assert_close_states(x, y, exact)
        elif exact:
            assert torch.equal(torch.as_tensor(x), torch.as_tensor(y)), key
        else:
            torch.testing.assert_close(x, y, atol=TRAIN_ATOL, rtol=TRAIN_RTOL, msg=key)


@pytest.fixture(scope="module")
def straight(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted sharded run at 2 ranks (Adam), the reference of the tests below."""
    base = tmp_path_factory.mktemp("straight")
    assert _run(2, base, "--out", str(base / "out.pt")) == [0, 0]
    return base


def test_sharded_training_matches_replicated_and_its_noise_estimate(
    straight: Path, tmp_path: Path
) -> None:
    assert _run(2, tmp_path, "--replicated", "--out", str(tmp_path / "out.pt")) == [0, 0]
    sharded, replicated = _load(straight / "out.pt"), _load(tmp_path / "out.pt")
    assert sharded["sharded"] and not replicated["sharded"]
    _assert_close_states(sharded["params"], replicated["params"], exact=False)
    # The noise statistics: the same estimator, fed from the sharded gradients.
    assert sharded["gns"]["updates"] == replicated["gns"]["updates"] == STEPS
    torch.testing.assert_close(
        torch.tensor(sharded["gns"]["state"]),
        torch.tensor(replicated["gns"]["state"]),
        rtol=1e-5,
        atol=0,
    )
    rows_s, rows_r = _rows(straight), _rows(tmp_path)
    for a, b in zip(rows_s, rows_r, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        (sqr_a, tr_a), (sqr_b, tr_b) = a["sqr_tr"], b["sqr_tr"]
        assert [*sqr_a, *tr_a] == pytest.approx([*sqr_b, *tr_b], rel=1e-5)
    # and it converges like the replicated run
    assert rows_s[-1]["loss"] < 0.2 * rows_s[0]["loss"]


def test_resize_2_to_4_to_3_equals_the_uninterrupted_run(straight: Path, tmp_path: Path) -> None:
    assert _run(2, tmp_path, "--stop-at", "5") == [143] * 2
    assert _run(4, tmp_path, "--stop-at", "11") == [143] * 4
    assert _run(3, tmp_path, "--out", str(tmp_path / "out.pt")) == [0] * 3

    # Each restart restored, bit for bit, what the previous world size saved (resharded by DCP).
    saved = sorted((tmp_path / "ckpt" / "adl-dcp").iterdir())
    assert len(saved) == 2  # the save of the 2-rank run and of the 4-rank run
    for directory, world in zip(saved, (4, 3), strict=True):
        flat = tmp_path / f"{directory.name}.pt"
        dcp_to_torch_save(directory, flat)
        on_disk = _load(flat)
        restored = _load(tmp_path / "rec" / f"restored-{world}.pt")
        _assert_close_states(restored["params"], on_disk["model"], exact=True)
        _assert_close_states(restored["optim"], on_disk["optim"]["state"], exact=True)
        assert any(v["exp_avg"].abs().sum() > 0 for v in restored["optim"].values())

    # Every step saw the same samples at the same position as the uninterrupted run (the losses
    # agree), at world sizes 2, 4 and 3, and the run ends at the same parameters and progress.
    rows, ref = _rows(tmp_path), _rows(straight)
    assert [r["step"] for r in rows] == list(range(STEPS))
    assert {r["world"] for r in rows} == {2, 4, 3}
    assert {r["world"]: r["local_bsz"] for r in rows} == {2: 6, 4: 3, 3: 4}
    for a, b in zip(rows, ref, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5, abs=1e-6), a["step"]
    resized, uninterrupted = _load(tmp_path / "out.pt"), _load(straight / "out.pt")
    _assert_close_states(resized["params"], uninterrupted["params"], exact=False)
    _assert_close_states(resized["optim"], uninterrupted["optim"], exact=False)
    assert resized["progress"] == uninterrupted["progress"] == STEPS
    # The noise statistics carried on: 16 observations in all, none lost at the restarts.
    assert resized["gns"]["updates"] == STEPS


def test_background_saves_survive_a_kill_and_resume_resharded(
    straight: Path, tmp_path: Path
) -> None:
    """Periodic (background) saves of a sharded model: DCP writes the shards on its own thread
    while the ranks train on, mutating the parameters in place; every rank is then killed with
    SIGKILL. The job resumes at 3 ranks from the last committed save, which holds the state as it
    was at that save bit for bit, and ends where the uninterrupted run ends."""
    every, die = 3, 10
    codes = _run(2, tmp_path, "--save-every", str(every), "--die-at", str(die))
    assert codes == [-9, -9]
    first = [r for p in (tmp_path / "rec").glob("rank*.jsonl") for r in _records(p)]
    # each save left that rank's DCP write under way when training went on (a background save)
    assert sorted((r["saved"], r["parts"]) for r in first if "saved" in r) == [
        (s, 1) for s in (3, 3, 6, 6, 9, 9)
    ]
    (tmp_path / "rec-killed").mkdir()
    for path in (tmp_path / "rec").glob("rank*.jsonl"):
        path.rename(tmp_path / "rec-killed" / path.name)

    assert _run(3, tmp_path, "--out", str(tmp_path / "out.pt")) == [0] * 3
    resumed = _rows(tmp_path)
    start = resumed[0]["step"]
    # the save of step 9 may have been cut by the kill mid-write: then the one before it counts
    assert start in (6, 9), start
    assert [r["step"] for r in resumed] == list(range(start, STEPS))
    states = checkpoint.load(tmp_path / "ckpt")
    assert states is not None
    (ref,) = [s[checkpoint.EXTERNAL] for s in states.values() if checkpoint.EXTERNAL in s]
    on_disk_dir = tmp_path / "ckpt" / ref["dir"]
    assert on_disk_dir.name.endswith(f"-s{start:09d}") and ref["files"]  # digests recorded
    flat = tmp_path / "flat.pt"
    dcp_to_torch_save(on_disk_dir, flat)
    on_disk, at_save = _load(flat), _load(tmp_path / "rec" / f"saved-{start}.pt")
    restored = _load(tmp_path / "rec" / "restored-3.pt")
    for got in (on_disk["model"], restored["params"]):
        _assert_close_states(got, at_save["params"], exact=True)
    for got in (on_disk["optim"]["state"], restored["optim"]):
        _assert_close_states(got, at_save["optim"], exact=True)
    resized, uninterrupted = _load(tmp_path / "out.pt"), _load(straight / "out.pt")
    _assert_close_states(resized["params"], uninterrupted["params"], exact=False)
    assert resized["progress"] == STEPS


def test_activation_checkpointing_trains_the_same_parameters(
    straight: Path, tmp_path: Path
) -> None:
    assert _run(2, tmp_path, "--recompute", "--out", str(tmp_path / "out.pt")) == [0, 0]
    recomputed, plain = _load(tmp_path / "out.pt"), _load(straight / "out.pt")
    _assert_close_states(recomputed["params"], plain["params"], exact=False)
    assert recomputed["gns"]["state"] == pytest.approx(plain["gns"]["state"], rel=1e-5)


def _expected_min_replicas(budget: int) -> int:
    """The memory need of the worker's model from its sizes, computed here independently."""
    from client_fsdp_worker import WIDTH

    layers = [(8, WIDTH), (WIDTH, WIDTH), (WIDTH, 1)]
    sizes = [(i + 1) * o * 4 for i, o in layers]  # weight + bias, float32
    state = 4 * sum(sizes)  # parameters, gradients, Adam's two moments
    working = 2 * max(sizes)  # two modules unsharded at once
    return -(-state // (budget - working))


def test_bf16_mixed_precision_resumes_resharded_and_reports_its_memory_need(
    straight: Path, tmp_path: Path
) -> None:
    budget = 18_000  # bytes per replica: the job fits in 3 replicas and no fewer
    need = _expected_min_replicas(budget)
    assert need == 3
    args = ("--bf16", "--budget", str(budget))
    assert _run(2, tmp_path, *args, "--stop-at", "7") == [143] * 2
    assert _run(3, tmp_path, *args, "--out", str(tmp_path / "out.pt")) == [0] * 3
    rows = _rows(tmp_path)
    assert [r["step"] for r in rows] == list(range(STEPS))
    assert {r["min_replicas"] for r in rows} == {need}
    (directory,) = sorted((tmp_path / "ckpt" / "adl-dcp").iterdir())
    dcp_to_torch_save(directory, tmp_path / "flat.pt")
    on_disk, restored = _load(tmp_path / "flat.pt"), _load(tmp_path / "rec" / "restored-3.pt")
    _assert_close_states(restored["params"], on_disk["model"], exact=True)
    _assert_close_states(restored["optim"], on_disk["optim"]["state"], exact=True)
    # bf16 compute, fp32 master weights and reduction: it converges like the fp32 run
    ref = _rows(straight)
    assert rows[-1]["loss"] < 0.2 * rows[0]["loss"]
    assert rows[-1]["loss"] == pytest.approx(ref[-1]["loss"], rel=0.5)
    assert all(v == v and v > 0 for r in rows[1:] for v in r["sqr_tr"][1])  # noise: finite


def test_gradient_accumulation_averages_the_micro_steps(tmp_path: Path) -> None:
    # B0 = 4 at up to 8 samples, micro-batches of 2: two micro-steps per optimizer step.
    # A linear LR rule: the factor must not depend on the noise estimate, which differs by design
    # (DDP measures the first micro-gradient, FSDP2 the replica's accumulated one).
    args = ("--b0", "4", "--batch", "8", "--autoscale", "8", "--local-max", "2", "--optim", "sgd")
    args = (*args, "--linear-lr")
    sharded, replicated = tmp_path / "sharded", tmp_path / "replicated"
    assert _run(2, sharded, *args, "--out", str(sharded / "out.pt")) == [0, 0]
    assert _run(2, replicated, *args, "--replicated", "--out", str(replicated / "out.pt")) == [0, 0]
    rows = _rows(sharded)
    assert {r["accum"] for r in rows} == {1} and {r["local_bsz"] for r in rows} == {2}
    assert [(r["accum"], r["local_bsz"]) for r in _rows(replicated)] == [
        (r["accum"], r["local_bsz"]) for r in rows
    ]
    a, b = _load(sharded / "out.pt"), _load(replicated / "out.pt")
    _assert_close_states(a["params"], b["params"], exact=False)
    # the local gradient is the replica's whole accumulated one: the estimate is positive
    sqr, tr = rows[-1]["sqr_tr"]
    assert sqr[0] > 0 and tr[0] > 0


def test_one_replica_runs_standalone_and_grows_to_two(tmp_path: Path) -> None:
    """Scaled down to one replica, a sharded job runs without a process group of its own
    (``adl.job_mesh`` makes a single-process one); its noise estimate then takes the
    single-replica path (the first micro-batch against the step's mean), equal to DDP's."""
    args = ("--b0", "4", "--batch", "8", "--autoscale", "8", "--local-max", "2")
    grown, alone = tmp_path / "grown", tmp_path / "alone"
    assert _run(1, grown, *args, "--stop-at", "6") == [143]
    assert _run(2, grown, *args) == [0, 0]
    assert _run(1, alone, *args, "--replicated", "--stop-at", "6") == [143]
    rows, replicated = _rows(grown), _rows(alone)
    assert [r["world"] for r in rows[:7]] == [1] * 7 and {r["world"] for r in rows[7:]} == {2}
    assert {r["accum"] for r in rows[:7]} == {3}  # 8 samples in micro-batches of 2
    for a, b in zip(rows[:7], replicated, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
        (sqr_a, tr_a), (sqr_b, tr_b) = a["sqr_tr"], b["sqr_tr"]
        assert [*sqr_a, *tr_a] == pytest.approx([*sqr_b, *tr_b], rel=1e-4)
    (directory,) = sorted((grown / "ckpt" / "adl-dcp").iterdir())
    dcp_to_torch_save(directory, tmp_path / "flat.pt")
    on_disk, restored = _load(tmp_path / "flat.pt"), _load(grown / "rec" / "restored-2.pt")
    _assert_close_states(restored["params"], on_disk["model"], exact=True)
    _assert_close_states(restored["optim"], on_disk["optim"]["state"], exact=True)
