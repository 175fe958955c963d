"""Checkpoint files: atomic replacement, safe loading, the registry of states."""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from adl.client_lib import checkpoint
from adl.client_lib.checkpoint import CheckpointError, checkpoint_path, load, write
from adl.client_lib.context import JobContext
from adl.client_lib.tracked import Tracked, track

MakeContext = Callable[..., JobContext]


class _Boom:
    """Unpickling this would create ``marker``: what a malicious checkpoint could do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (Path.touch, (str(self.marker),))  # type: ignore[return-value]


def test_write_and_load_round_trip(tmp_path: Path) -> None:
    states = {"model": {"w": torch.arange(4.0)}, "loader": {"epoch": 2, "offset": 17}}
    path = write(tmp_path, states)
    assert path == checkpoint_path(tmp_path)
    loaded = load(tmp_path)
    assert loaded is not None
    assert torch.equal(loaded["model"]["w"], torch.arange(4.0))
    assert loaded["loader"] == {"epoch": 2, "offset": 17}
    # no temporaries left: the checkpoint and its digest
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        checkpoint.FILENAME,
        checkpoint.FILENAME + checkpoint.DIGEST_SUFFIX,
    ]


def test_no_checkpoint_reads_as_none(tmp_path: Path) -> None:
    assert load(tmp_path) is None
    assert load(None) is None


def test_a_failed_write_keeps_the_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, {"v": {"n": 1}})

    def broken_save(obj: object, f: object) -> None:
        f.write(b"partial")  # type: ignore[attr-defined]
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint.torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        write(tmp_path, {"v": {"n": 2}})
    monkeypatch.undo()
    assert load(tmp_path) == {"v": {"n": 1}}
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        checkpoint.FILENAME,
        checkpoint.FILENAME + checkpoint.DIGEST_SUFFIX,
    ]


def test_stale_temporaries_of_a_killed_writer_are_removed(tmp_path: Path) -> None:
    stale = tmp_path / ".adl-checkpoint-dead.tmp"
    stale.write_bytes(b"torn")
    write(tmp_path, {"v": {"n": 1}})
    assert not stale.exists()


def test_loading_never_runs_pickled_code(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    with checkpoint_path(tmp_path).open("wb") as f:
        pickle.dump({"format": checkpoint.FORMAT, "states": {"x": _Boom(marker)}}, f, protocol=2)
    with pytest.raises(pickle.UnpicklingError):
        load(tmp_path)
    assert not marker.exists()


def test_a_foreign_file_is_rejected(tmp_path: Path) -> None:
    torch.save({"model": torch.zeros(1)}, checkpoint_path(tmp_path))
    with pytest.raises(CheckpointError):
        load(tmp_path)


def test_registry_saves_and_restores_tracked_objects(make_context: MakeContext) -> None:
    ctx = make_context()
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    assert track("model", model) is False  # nothing to restore on a fresh start
    assert track("optimizer", opt) is False
    with pytest.raises(ValueError, match="already registered"):
        ctx.register(Tracked("model", model))
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    expected = {k: v.clone() for k, v in model.state_dict().items()}
    path = ctx.save()
    assert path is not None and path.exists()

    ctx = make_context()  # a restart
    other = torch.nn.Linear(3, 2)
    assert track("model", other) is True
    for key, value in expected.items():
        assert torch.equal(other.state_dict()[key], value)
    # The optimizer is not registered (yet) in this run: the next checkpoint still carries it.
    assert set(ctx.pending_restored) == {"optimizer"}
    ctx.save()
    ctx = make_context()
    assert set(ctx.pending_restored) == {"model", "optimizer"}
    other_opt = torch.optim.SGD(other.parameters(), lr=0.1, momentum=0.9)
    assert track("optimizer", other_opt) is True
    assert other_opt.state_dict()["state"][0]["momentum_buffer"] is not None


def test_a_dict_of_the_scripts_own_state_is_restored_in_place(make_context: MakeContext) -> None:
    import adl

    ctx = make_context()
    best = {"accuracy": 0.0, "epoch": -1}
    assert adl.track("best", best) is False
    best.update(accuracy=0.91, epoch=3)
    ctx.save()
    ctx = make_context()  # a restart
    again = {"accuracy": 0.0, "epoch": -1}
    assert adl.track("best", again) is True and again == {"accuracy": 0.91, "epoch": 3}
    with pytest.raises(TypeError, match="give a dict or an object with state_dict"):
        adl.track("count", 3)


def test_a_value_that_would_not_load_back_fails_the_save_not_the_restart(
    make_context: MakeContext,
) -> None:
    import adl

    ctx = make_context()
    best = {"accuracy": 0.5}
    adl.track("best", best)
    ctx.save()
    best["accuracy"] = np.float64(0.75)  # what a metrics library returns
    with pytest.raises(CheckpointError, match=r"cannot checkpoint 'best'.*numpy"):
        ctx.save()
    ctx = make_context()  # the previous checkpoint is still there, and loads
    again: dict[str, float] = {}
    assert adl.track("best", again) is True and again == {"accuracy": 0.5}


def test_a_mount_that_cannot_map_files_skips_the_check_not_the_save(
    make_context: MakeContext, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import adl
    from adl.client_lib import checkpoint

    def no_mmap(data: object) -> None:
        if not isinstance(data, bytes):
            raise OSError(19, "No such device")  # what mmap says on some FUSE mounts

    monkeypatch.setattr(checkpoint, "_loads", no_mmap)
    ctx = make_context()
    adl.track("best", {"accuracy": 0.5})
    with caplog.at_level("WARNING"):
        assert ctx.save() is not None
    assert "could not read the new checkpoint back" in caplog.text
    ctx = make_context()
    again: dict[str, float] = {}
    assert adl.track("best", again) is True and again == {"accuracy": 0.5}


def test_prepare_checkpoint_runs_before_the_write(make_context: MakeContext) -> None:
    ctx = make_context()
    calls: list[str] = []

    class State:
        name = "s"

        def prepare_checkpoint(self) -> None:
            calls.append("prepare")

        def state_dict(self) -> dict[str, int]:
            calls.append("state")
            return {"n": 1}

        def load_state_dict(self, state: dict[str, int]) -> None:
            pass

    ctx.register(State())
    ctx.save()
    assert calls == ["prepare", "state"]


def test_a_checkpoint_gets_the_mode_of_the_process_umask(tmp_path: Path) -> None:
    """Private under the local backend's umask 077 (another user must not read a job's model),
    0644 under the usual 022 (as readable as its directory)."""
    import stat

    old = os.umask(0o077)
    try:
        path = checkpoint.write(tmp_path / "private", {"a": {"x": 1}})
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    old = os.umask(0o022)
    try:
        path = checkpoint.write(tmp_path / "shared", {"a": {"x": 1}})
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
