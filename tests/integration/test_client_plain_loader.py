"""A plain torch DataLoader under several replicas is warned about, once, with the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from client_harness import run_job

pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("client_plain_loader_worker.py")


def _warnings(record: Path, rank: int) -> list[str]:
    return list(json.loads((record / f"rank{rank}.json").read_text()))


def test_plain_dataloader_with_two_replicas_warns_once(tmp_path: Path) -> None:
    rec = tmp_path / "plain"
    assert run_job(2, tmp_path / "ckpt", rec, script=WORKER) == [0, 0]
    for rank in (0, 1):
        caught = [m for m in _warnings(rec, rank) if "DataLoader" in m]
        assert len(caught) == 1, caught  # 16 training steps, one warning
        assert "every replica the whole dataset" in caught[0]
        assert "adl.AdaptiveDataLoader(dataset" in caught[0]


def test_adaptive_loader_with_two_replicas_does_not_warn(tmp_path: Path) -> None:
    rec = tmp_path / "adaptive"
    assert run_job(2, tmp_path / "ckpt", rec, "--adaptive", script=WORKER) == [0, 0]
    for rank in (0, 1):
        assert _warnings(rec, rank) == []
