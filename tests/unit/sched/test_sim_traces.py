"""Trace lookups follow the README: placement up to rotation, linear in the micro-batch, fallback
interpolation over (nodes, replicas, micro-batch), batch-size interpolation, epoch ends."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from sim_kit import TRACES, linear_step, linear_sync, write_app

from adl.sched.sim.traces import canonical_placement, load_app, load_traces


@pytest.fixture
def toy(tmp_path: Path):
    return load_app(
        write_app(
            tmp_path,
            single_step=linear_step(1, 1, 8),
            single_sync=linear_sync(1, 1),
            sqr=(1.0, 4.0),
            var=(2.0, 8.0),
        )
    )


def test_canonical_placement_is_rotation_invariant_and_drops_empty_nodes() -> None:
    assert canonical_placement((3, 1)) == canonical_placement((1, 3)) == (1, 3)
    assert canonical_placement((2, 0, 1, 4)) == canonical_placement((4, 2, 1)) == (1, 4, 2)
    assert canonical_placement((1, 2, 3)) != canonical_placement((1, 3, 2))


def test_measured_placement_is_found_up_to_rotation_and_linear_in_micro_batch(toy) -> None:
    # "13" is measured 0.1 s slower than the law the averages follow: the direct lookup wins.
    want_8 = linear_step(2, 4, 8) + 0.1
    want_16 = linear_step(2, 4, 16) + 0.1
    assert toy.step_sync_time((1, 3), 8) == pytest.approx((want_8, linear_sync(2, 4)))
    assert toy.step_sync_time((3, 1), 8) == pytest.approx((want_8, linear_sync(2, 4)))
    assert toy.step_sync_time((3, 1), 12)[0] == pytest.approx((want_8 + want_16) / 2)
    assert toy.step_sync_time((2, 2), 12)[0] == pytest.approx(linear_step(2, 4, 12) - 0.1)


def test_unmeasured_placement_interpolates_over_nodes_replicas_micro_batch(toy) -> None:
    # (2, 1, 1) is not in placements.csv: 3 nodes, 4 replicas, between measured spreads.
    step, sync = toy.step_sync_time((2, 1, 1), 12)
    assert step == pytest.approx(linear_step(3, 4, 12))
    assert sync == pytest.approx(linear_sync(3, 4))
    # the scalability rows take part too: only they surround 8 nodes x 2 GPUs
    step, _ = toy.step_sync_time((2,) * 8, 8)
    assert step == pytest.approx(linear_step(8, 16, 8))


def test_gradient_statistics_interpolate_linearly_between_validated_batch_sizes(toy) -> None:
    assert toy.grad_stats(8, 0) == pytest.approx((1.0, 2.0))
    assert toy.grad_stats(32, 0) == pytest.approx((4.0, 8.0))
    # 16 is a third of the way from 8 to 32
    assert toy.grad_stats(16, 1) == pytest.approx((2.0, 4.0))
    # clamped outside the validated range
    assert toy.grad_stats(64, 0) == pytest.approx((4.0, 8.0))


def test_epoch_ends_are_the_minimum_over_validation_files(tmp_path: Path) -> None:
    app = load_app(write_app(tmp_path, epoch_ends=((45, 120, 150), (50, 110, 160))))
    assert list(app.epoch_ends) == [45, 110, 150]
    assert app.progress_at(0) == 0 and app.progress_at(2) == 110
    assert app.total_progress == 150 and app.max_epochs == 3
    assert (app.init_batch_size, app.max_batch_size) == (8, 32)
    assert (app.min_local_bsz, app.max_local_bsz) == (8, 16)


def test_real_traces_rotation_lookup_matches_the_csv_row() -> None:
    apps = load_traces(TRACES)
    assert set(apps) == {"bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"}
    cifar = apps["cifar10"]
    with (TRACES / "traces" / "cifar10" / "placements.csv").open() as f:
        row = next(r for r in csv.DictReader(f) if r["placement"] == "13")
    m = int(row["local_bsz"])
    want = (float(row["step_time"]), float(row["sync_time"]))
    assert cifar.step_sync_time((3, 1), m) == pytest.approx(want)
    assert cifar.step_sync_time((1, 3), m) == pytest.approx(want)
    # application constants of the README
    assert apps["yolov3"].max_local_bsz == 8
    assert {a: t.max_epochs for a, t in apps.items()} == {
        "bert": 2,
        "cifar10": 100,
        "deepspeech2": 80,
        "imagenet": 90,
        "ncf": 10,
        "yolov3": 50,
    }
