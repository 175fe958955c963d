"""A sharded (DCP) checkpoint is loaded without running code from it: its metadata and its
non-tensor entries are read as data only, and a tampered file is refused with the name it asked
for, before anything it names runs."""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.metadata import MetadataIndex
from torch.distributed.checkpoint.planner import LoadItemType, ReadItem

from adl.client_lib.sharded_safe_load import (
    SafeFileSystemReader,
    SafeLoadPlanner,
    UnsafeCheckpoint,
)


class _Payload:
    """Unpickled, it writes a file: what a tampered checkpoint would make the worker do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (exec, (f"open({str(self.marker)!r}, 'w').write('ran')",))


def _state() -> dict[str, Any]:
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    return {
        "model": model.state_dict(),
        "optim": opt.state_dict(),  # param_groups: non-tensor entries, stored as bytes
        "half": torch.ones(2, dtype=torch.bfloat16),
    }


def _safe_load(directory: Path) -> dict[str, Any]:
    holder = _state()
    for t in (holder["model"]["weight"], holder["model"]["bias"], holder["half"]):
        t.zero_()
    dcp.load(holder, storage_reader=SafeFileSystemReader(directory), planner=SafeLoadPlanner())
    return holder


def test_what_dcp_writes_loads_through_the_restricted_reader(tmp_path: Path) -> None:
    saved = _state()
    dcp.save(saved, checkpoint_id=str(tmp_path))
    got = _safe_load(tmp_path)
    torch.testing.assert_close(got["model"]["weight"], saved["model"]["weight"])
    torch.testing.assert_close(got["half"], saved["half"])
    assert got["optim"]["param_groups"] == saved["optim"]["param_groups"]
    torch.testing.assert_close(
        got["optim"]["state"][0]["exp_avg"], saved["optim"]["state"][0]["exp_avg"]
    )


def test_a_tampered_metadata_file_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    dcp.save(_state(), checkpoint_id=str(tmp_path))
    marker = tmp_path / "ran"
    (tmp_path / ".metadata").write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(BaseException) as refused:  # DCP CheckpointException: a BaseException
        _safe_load(tmp_path)
    failures = getattr(refused.value, "failures", {})  # DCP's CheckpointException: per rank
    assert "refers to builtins.exec, which is not a DCP metadata type" in repr(failures)
    assert not marker.exists()
    # the plain DCP reader would have run it (what the restricted one prevents)
    with pytest.raises(BaseException):  # noqa: B017 - whatever fails after the payload ran
        dcp.load(_state(), checkpoint_id=str(tmp_path))
    assert marker.read_text() == "ran"


def test_a_tampered_non_tensor_entry_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    buf = io.BytesIO()
    torch.save({"lr": _Payload(marker)}, buf)
    buf.seek(0)
    planner = SafeLoadPlanner()
    item = ReadItem(
        type=LoadItemType.BYTE_IO,
        dest_index=MetadataIndex("optim.param_groups"),
        dest_offsets=torch.Size([0]),
        storage_index=MetadataIndex("optim.param_groups"),
        storage_offsets=torch.Size([0]),
        lengths=torch.Size([0]),
    )
    with pytest.raises(UnsafeCheckpoint, match=r"'optim\.param_groups' is not plain data"):
        planner.load_bytes(item, buf)
    assert not marker.exists()
