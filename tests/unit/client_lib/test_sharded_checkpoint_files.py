"""A sharded checkpoint's files beside the checkpoint (a DCP directory): checked against the
digests recorded with it, falling back to the previous checkpoint when one no longer matches,
and swept once no checkpoint refers to them. Also the memory-need arithmetic of the hints."""

from __future__ import annotations

from pathlib import Path

import pytest

from adl.client_lib import checkpoint
from adl.client_lib.checkpoint import EXTERNAL, CheckpointError, load, write
from adl.client_lib.sharded_checkpoint import DCP_ROOT, manifest, sweep
from adl.client_lib.sharded_memory import MemoryNeed


def _shards(root: Path, name: str, payload: bytes) -> dict[str, object]:
    """A stand-in DCP directory of two files; its reference as a sharded state records it."""
    target = root / DCP_ROOT / name
    target.mkdir(parents=True)
    (target / "__0_0.distcp").write_bytes(payload)
    (target / ".metadata").write_bytes(b"meta-" + payload)
    return {
        "progress": {"steps": len(payload)},
        EXTERNAL: {"dir": f"{DCP_ROOT}/{name}", "files": manifest(target)},
    }


def test_a_corrupted_shard_falls_back_to_the_previous_checkpoint(tmp_path: Path) -> None:
    write(tmp_path, {"model": _shards(tmp_path, "a", b"first")})
    write(tmp_path, {"model": _shards(tmp_path, "b", b"second!")})
    assert load(tmp_path)["model"]["progress"]["steps"] == 7  # type: ignore[index]
    # one flipped byte in a shard of the last checkpoint: its digest no longer matches
    shard = tmp_path / DCP_ROOT / "b" / "__0_0.distcp"
    shard.write_bytes(b"secOnd!")
    states = load(tmp_path)
    assert states is not None and states["model"]["progress"]["steps"] == 5  # the previous one
    # a file of the previous one missing too: no usable checkpoint, an error (not a silent
    # start from scratch), naming the last checkpoint's problem
    (tmp_path / DCP_ROOT / "a" / ".metadata").unlink()
    with pytest.raises(CheckpointError, match="corrupted"):
        load(tmp_path)


def test_a_reference_outside_the_checkpoint_directory_is_refused(tmp_path: Path) -> None:
    state = _shards(tmp_path, "a", b"x")
    state[EXTERNAL]["dir"] = "../elsewhere"  # type: ignore[index]
    with pytest.raises(CheckpointError, match="outside"):
        checkpoint.verify_external(tmp_path, {"model": state})


def test_sweep_keeps_the_directories_of_the_last_two_checkpoints_only(tmp_path: Path) -> None:
    for name in ("a", "b", "c"):
        write(tmp_path, {"model": _shards(tmp_path, name, name.encode())})
    _shards(tmp_path, "torn", b"a save killed half-way")  # never referenced
    sweep(tmp_path)
    assert sorted(p.name for p in (tmp_path / DCP_ROOT).iterdir()) == ["b", "c"]
    assert load(tmp_path) is not None


def test_memory_need_gives_the_fewest_replicas_that_fit() -> None:
    need = MemoryNeed(state_bytes=1000, working_bytes=100)
    assert need.min_replicas(1100) == 1  # fits unsharded
    assert need.min_replicas(600) == 2  # 500 + 100
    assert need.min_replicas(599) == 3
    assert need.min_replicas(100) is None  # the working set alone fills the budget
