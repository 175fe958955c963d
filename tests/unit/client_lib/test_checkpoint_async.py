"""Periodic checkpoints written in the background (adl.client_lib.checkpoint_async): what is
written is the states as they were at the save, saves commit in the order they were taken, a
failed write is raised at the next save, and the training loop waits only for the snapshot."""

from __future__ import annotations

import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from adl.client_lib import checkpoint
from adl.client_lib.checkpoint import CheckpointFenced, claim, load
from adl.client_lib.checkpoint_async import BackgroundWriter, background_saves_from_env, snapshot
from adl.client_lib.context import JobContext
from adl.client_lib.tracked import track

MakeContext = Callable[..., JobContext]


def test_a_snapshot_is_not_reached_by_in_place_updates() -> None:
    weight = torch.zeros(3)
    state: dict[str, Any] = {
        "model": OrderedDict(w=weight),
        "moments": [torch.ones(2), (torch.full((1,), 2.0), 5)],
        "counts": defaultdict(int, seen=4),
        "note": {"epoch": 1},
    }
    frozen = snapshot(state)
    weight.add_(1.0)
    state["moments"][0].mul_(10)
    state["counts"]["seen"] += 1
    state["note"]["epoch"] = 2
    assert torch.equal(frozen["model"]["w"], torch.zeros(3))
    assert torch.equal(frozen["moments"][0], torch.ones(2))
    assert frozen["moments"][1][1] == 5 and torch.equal(
        frozen["moments"][1][0], torch.tensor([2.0])
    )
    assert frozen["counts"]["seen"] == 4 and frozen["counts"]["new"] == 0  # still a defaultdict
    assert type(frozen["model"]) is OrderedDict and frozen["note"] == {"epoch": 1}


@pytest.mark.parametrize(
    ("raw", "want"), [(None, True), ("1", True), ("0", False), ("off", False), ("yes", True)]
)
def test_the_switch_from_the_environment(raw: str | None, want: bool) -> None:
    assert background_saves_from_env({} if raw is None else {"ADL_CHECKPOINT_ASYNC": raw}) is want


def test_a_bad_switch_is_refused() -> None:
    with pytest.raises(ValueError, match="ADL_CHECKPOINT_ASYNC='maybe'"):
        background_saves_from_env({"ADL_CHECKPOINT_ASYNC": "maybe"})


class _Gate:
    """Holds every checkpoint write at its start until released (the background thread waits
    here, so the test decides when the write happens)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        real = checkpoint.write

        def gated(*args: Any, **kwargs: Any) -> Path:
            if threading.current_thread().name == "adl-checkpoint-writer":
                self.entered.set()
                assert self.release.wait(timeout=60), "the test never released the write"
            return real(*args, **kwargs)

        monkeypatch.setattr(checkpoint, "write", gated)


def test_a_background_save_writes_the_states_as_they_were_at_the_save(
    make_context: MakeContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = _Gate(monkeypatch)
    ctx = make_context()
    model = torch.nn.Linear(3, 2)
    track("model", model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert ctx.save(background=True) is None  # not committed yet
    assert gate.entered.wait(timeout=60)
    with torch.no_grad():  # training goes on while the file is written
        for p in model.parameters():
            p.add_(1.0)
    assert load(tmp_path / "ckpt") is None  # nothing committed while the write is held
    gate.release.set()
    ctx.checkpoint_writer.wait()
    saved = load(tmp_path / "ckpt")
    assert saved is not None
    for key, value in before.items():
        assert torch.equal(saved["model"][key], value)


def test_the_next_save_waits_for_the_write_under_way_so_the_latest_is_last(
    make_context: MakeContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = _Gate(monkeypatch)
    ctx = make_context()
    state = {"n": 1}
    track("counter", state)
    ctx.save(background=True)  # the periodic save of n=1, held
    assert gate.entered.wait(timeout=60)
    state["n"] = 2
    done = threading.Event()

    def stop_save() -> None:  # the stop's synchronous save (as stop_and_exit makes it)
        ctx.save()
        done.set()

    stopper = threading.Thread(target=stop_save)
    stopper.start()
    assert not done.wait(timeout=0.5)  # it waits for the older write, not past it
    gate.release.set()
    stopper.join(timeout=60)
    assert done.is_set()
    saved = load(tmp_path / "ckpt")
    assert saved is not None and saved["counter"] == {"n": 2}
    # the older one is the previous copy, committed first
    previous = checkpoint.previous_path(tmp_path / "ckpt")
    assert previous.exists()


def test_a_failed_background_write_is_raised_at_the_next_save(
    make_context: MakeContext, tmp_path: Path
) -> None:
    ctx = make_context(ADL_GROUP="2")
    track("counter", {"n": 1})
    ckpt = tmp_path / "ckpt"
    claim(ckpt, 2)
    ctx.save()  # committed under group 2
    claim(ckpt, 3)  # a newer group took the directory over (this one was given up)
    ctx.save(background=True)  # refused in the background
    with pytest.raises(CheckpointFenced):
        ctx.save()
    saved = load(ckpt)
    assert saved is not None and saved["counter"] == {"n": 1}  # group 2's, untouched


def test_the_writer_runs_one_write_at_a_time() -> None:
    writer = BackgroundWriter()
    release = threading.Event()
    writer.submit(lambda: release.wait(timeout=60), done=lambda _s: None)
    with pytest.raises(RuntimeError, match="already under way"):
        writer.submit(lambda: None, done=lambda _s: None)
    release.set()
    writer.wait()
    took: list[float] = []
    writer.submit(lambda: None, done=took.append)
    writer.wait()
    assert len(took) == 1 and writer.last_write_s == took[0]


def test_a_background_write_reports_its_duration_to_the_restart_estimate(
    make_context: MakeContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = make_context()
    track("counter", {"n": 1})
    took: list[float] = []
    monkeypatch.setattr(ctx.restart, "save_took", took.append)
    ctx.save(background=True)
    ctx.checkpoint_writer.wait()
    assert len(took) == 1 and took[0] >= 0.0


def test_states_that_cannot_be_copied_are_written_synchronously(
    make_context: MakeContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ctx = make_context()
    track("counter", {"n": 1})

    def refuse(obj: object) -> object:
        raise TypeError("cannot copy this")

    monkeypatch.setattr(checkpoint, "snapshot", refuse)
    path = ctx.save(background=True)
    assert path is not None and ctx.checkpoint_writer is None  # committed before returning
    saved = load(tmp_path / "ckpt")
    assert saved is not None and saved["counter"] == {"n": 1}
