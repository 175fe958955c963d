"""Fencing (issue 36): a worker group claims the checkpoint directory when it starts, and a
commit of any other group is refused from then on, so a worker of a group the controller gave
up (its node lost, the worker cut off but still running) cannot overwrite the checkpoint the
next group resumed from."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest
import torch

from adl.client_lib import checkpoint as C


def _state(step: int) -> dict[str, object]:
    return {"loop": {"step": step, "w": torch.full((4,), float(step))}}


def test_the_owning_group_commits_and_an_older_one_is_refused(tmp_path: Path) -> None:
    C.claim(tmp_path, 2)
    C.write(tmp_path, _state(10), group=2)
    assert C.owner(tmp_path) == 2
    C.claim(tmp_path, 3)  # the next group starts: group 2 was given up
    with pytest.raises(C.CheckpointFenced, match="group 2 no longer owns"):
        C.write(tmp_path, _state(99), group=2)
    states = C.load(tmp_path)
    assert states is not None and states["loop"]["step"] == 10  # the fenced write left no trace
    assert not list(tmp_path.glob(".adl-checkpoint-*"))  # nor temporaries
    C.write(tmp_path, _state(11), group=3)
    assert C.load(tmp_path)["loop"]["step"] == 11  # type: ignore[index]


def test_claims_are_idempotent_and_a_new_incarnation_takes_over(tmp_path: Path) -> None:
    """Every rank of a group claims (same number: nothing changes); a job deleted and submitted
    again on the same claim starts at group 1 and owns the directory (the old job's groups are
    gone, and any straggler of theirs is refused)."""
    C.claim(tmp_path, 7)
    C.claim(tmp_path, 7)
    assert C.owner(tmp_path) == 7
    C.claim(tmp_path, 1)
    assert C.owner(tmp_path) == 1
    with pytest.raises(C.CheckpointFenced):
        C.write(tmp_path, _state(1), group=7)


def test_without_a_group_nothing_is_checked(tmp_path: Path) -> None:
    """Standalone runs (no ADL_GROUP) neither claim nor check, as before."""
    C.claim(tmp_path, 0)
    assert C.owner(tmp_path) is None
    C.claim(tmp_path / "other", 4)
    C.write(tmp_path / "other", _state(1))  # no group: written whoever owns it
    assert C.load(tmp_path / "other") is not None


def _claim_in_child(directory: str, group: int) -> None:
    C.claim(Path(directory), group)


def test_a_claim_from_another_process_fences_this_one(tmp_path: Path) -> None:
    """The check reads the directory at commit time (not a value cached at start)."""
    C.claim(tmp_path, 2)
    C.write(tmp_path, _state(1), group=2)
    child = multiprocessing.get_context("spawn").Process(
        target=_claim_in_child, args=(str(tmp_path), 3)
    )
    child.start()
    child.join(60)
    assert child.exitcode == 0
    with pytest.raises(C.CheckpointFenced):
        C.write(tmp_path, _state(2), group=2)
