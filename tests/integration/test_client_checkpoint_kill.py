"""kill -9 of a real process in the middle of writing a checkpoint leaves the previous one
loadable, and the next run resumes from it and cleans up the torn temporary file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from adl.client_lib import checkpoint

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
WRITER = Path(__file__).with_name("client_ckpt_writer.py")


def _start(ckpt: Path, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, ADL_CHECKPOINT_DIR=str(ckpt))
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{env.get('PYTHONPATH', '')}"
    for key in ("ADL_WORLD_SIZE", "ADL_RANK", "ADL_API_URL", "ADL_STOP_FILE", "ADL_JOB"):
        env.pop(key, None)
    cmd = [sys.executable, str(WRITER), *args]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)


def test_kill_9_during_checkpoint_writing_keeps_the_previous_checkpoint(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    writer = _start(ckpt, "--saves", "2", "--slow-from", "2")
    assert writer.stdout is not None
    try:
        assert writer.stdout.readline().split() == ["restored", "0"]
        assert writer.stdout.readline().split() == ["saved", "1"]
        word, version, total = writer.stdout.readline().split()
        assert (word, version) == ("writing", "2")
        temporaries = list(ckpt.glob(".adl-checkpoint-*.tmp"))
        assert len(temporaries) == 1
        torn = temporaries[0]
        os.kill(writer.pid, signal.SIGKILL)  # mid-write: the rename never happens
        assert writer.wait(timeout=60) == -signal.SIGKILL
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    assert 0 < torn.stat().st_size < int(total)  # really a partial file

    states = checkpoint.load(ckpt)  # the previous checkpoint, intact
    assert states is not None
    assert states["payload"]["version"] == 1
    assert bool((states["payload"]["data"] == 1.0).all())

    # The next run resumes from version 1, writes version 2 and removes the torn file.
    again = _start(ckpt, "--saves", "1")
    out, _ = again.communicate(timeout=120)
    assert again.returncode == 0, out
    assert out.split() == ["restored", "1", "saved", "2"]
    assert not torn.exists()
    states = checkpoint.load(ckpt)
    assert states is not None and states["payload"]["version"] == 2
