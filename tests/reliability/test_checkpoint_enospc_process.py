"""A real worker process whose disk fills while it checkpoints: it exits 1 (the lifecycle
reports that as CheckpointFailed when it happens during a stop), the checkpoint before it is
intact, and the next run resumes from it with no temporary left behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("enospc_worker.py")


def _run(ckpt: Path, *args: str, enospc_from: int | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, ADL_CHECKPOINT_DIR=str(ckpt))
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{env.get('PYTHONPATH', '')}"
    for key in ("ADL_WORLD_SIZE", "ADL_RANK", "ADL_API_URL", "ADL_STOP_FILE", "ADL_JOB"):
        env.pop(key, None)
    env.pop("ADL_TEST_ENOSPC_FROM", None)
    if enospc_from is not None:
        env["ADL_TEST_ENOSPC_FROM"] = str(enospc_from)
    cmd = [sys.executable, str(WORKER), *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)


def test_a_disk_that_fills_during_a_save_loses_only_that_save(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    first = _run(ckpt, "--saves", "5", enospc_from=4)
    assert first.returncode == 1, first.stderr
    assert first.stdout.split() == ["restored", "0", "saved", "1", "saved", "2", "saved", "3"]
    assert "No space left on device" in first.stderr
    assert list(ckpt.glob("*.tmp")) == []
    second = _run(ckpt, "--saves", "1")
    assert second.returncode == 0, second.stderr
    assert second.stdout.split() == ["restored", "3", "saved", "4"]
