"""Checkpoint files under faults: a full disk, a write killed half-way, flipped bytes, a crash
between the renames. There is always a good checkpoint to fall back to, and a bad one is never
loaded in silence."""

from __future__ import annotations

import errno
import logging
import os
import struct
from pathlib import Path

import pytest
import torch

from adl.client_lib import checkpoint
from adl.client_lib.checkpoint import CheckpointError, load, write

MARK = 1234.5  # a float32 whose bytes are easy to find in the file


def _states(version: int) -> dict[str, object]:
    return {"model": {"w": torch.full((4096,), MARK)}, "meta": {"version": version}}


def _version(loaded: dict[str, object] | None) -> int:
    assert loaded is not None
    return int(loaded["meta"]["version"])  # type: ignore[index]


def _flip_tensor_byte(path: Path) -> None:
    """Flip one byte inside the tensor data (not the pickle, not the zip directory): torch
    reads such a file without complaint."""
    data = bytearray(path.read_bytes())
    at = data.find(struct.pack("<f", MARK) * 64)
    assert at > 0, "tensor data not found"
    data[at + 1000] ^= 0xFF
    path.write_bytes(bytes(data))


def _enospc(*_: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _temporaries(directory: Path) -> list[str]:
    return [p.name for p in directory.iterdir() if p.name.endswith(".tmp")]


def test_enospc_at_fsync_keeps_the_last_checkpoint_and_leaves_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, _states(1))
    monkeypatch.setattr(checkpoint.os, "fsync", _enospc)  # fault injection: a full disk
    with pytest.raises(OSError) as err:
        write(tmp_path, _states(2))
    assert err.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert _version(load(tmp_path)) == 1
    assert _temporaries(tmp_path) == []


def test_the_previous_checkpoint_is_kept_beside_the_new_one(tmp_path: Path) -> None:
    write(tmp_path, _states(1))
    write(tmp_path, _states(2))
    assert checkpoint.previous_path(tmp_path).exists()
    assert _version(load(tmp_path)) == 2
    write(tmp_path, _states(3))
    checkpoint.checkpoint_path(tmp_path).unlink()
    assert _version(load(tmp_path)) == 2  # one previous copy, the one before the last


def test_flipped_tensor_bytes_fall_back_to_the_previous_checkpoint(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write(tmp_path, _states(1))
    write(tmp_path, _states(2))
    _flip_tensor_byte(checkpoint.checkpoint_path(tmp_path))
    with caplog.at_level(logging.WARNING, logger=checkpoint.__name__):
        loaded = load(tmp_path)
    assert _version(loaded) == 1
    assert torch.equal(loaded["model"]["w"], torch.full((4096,), MARK))  # type: ignore[index]
    assert any("sha256" in r.getMessage() and "previous" in r.getMessage() for r in caplog.records)


def test_flipped_bytes_with_no_previous_checkpoint_are_an_error_not_a_silent_load(
    tmp_path: Path,
) -> None:
    write(tmp_path, _states(1))
    _flip_tensor_byte(checkpoint.checkpoint_path(tmp_path))
    with pytest.raises(CheckpointError, match="sha256"):
        load(tmp_path)


def test_a_truncated_checkpoint_falls_back_to_the_previous_one(tmp_path: Path) -> None:
    write(tmp_path, _states(1))
    write(tmp_path, _states(2))
    final = checkpoint.checkpoint_path(tmp_path)
    final.write_bytes(final.read_bytes()[: final.stat().st_size // 2])
    assert _version(load(tmp_path)) == 1


def test_both_copies_bad_is_an_error(tmp_path: Path) -> None:
    write(tmp_path, _states(1))
    write(tmp_path, _states(2))
    _flip_tensor_byte(checkpoint.checkpoint_path(tmp_path))
    _flip_tensor_byte(checkpoint.previous_path(tmp_path))
    with pytest.raises(CheckpointError):
        load(tmp_path)


def test_a_crash_between_the_renames_loads_a_good_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kill the writer at each rename of the commit: whatever is on disk then loads, and it
    is either the old checkpoint or the new one."""
    write(tmp_path, _states(1))
    real_replace = os.replace
    renames = 0
    while True:
        done = 0

        def replace(src: object, dst: object, *, limit: int = renames) -> None:
            nonlocal done
            if done == limit:
                raise KeyboardInterrupt  # the process dies here (no cleanup beyond this)
            done += 1
            real_replace(src, dst)  # type: ignore[arg-type]

        monkeypatch.setattr(checkpoint.os, "replace", replace)
        try:
            write(tmp_path, _states(2))
            finished = True
        except KeyboardInterrupt:
            finished = False
        monkeypatch.undo()
        assert _version(load(tmp_path)) in (1, 2), renames
        if finished:
            break
        # start over from version 1 for the next crash point
        for p in tmp_path.iterdir():
            p.unlink()
        write(tmp_path, _states(1))
        renames += 1
    assert renames >= 2  # the commit has several renames; every one was a crash point
    assert _version(load(tmp_path)) == 2


def test_a_killed_write_leaves_no_temporary_once_the_job_restores(tmp_path: Path) -> None:
    """kill -9 during a save leaves a large ``.tmp``; the next start removes it at restore,
    not only at its next save (which may be an hour away)."""
    write(tmp_path, _states(1))
    stale = tmp_path / ".adl-checkpoint-killed.tmp"
    stale.write_bytes(b"\0" * 65536)
    assert _version(load(tmp_path)) == 1
    assert not stale.exists()


def test_a_checkpoint_written_before_checksums_still_loads(tmp_path: Path) -> None:
    write(tmp_path, _states(1))
    for p in tmp_path.glob("*.sha256"):
        p.unlink()
    assert _version(load(tmp_path)) == 1
