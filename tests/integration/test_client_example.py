"""The README's example, run as a user would: through ``adl launch`` with two gloo workers,
preempted with SIGTERM, resumed at a different size, and trained to a useful accuracy."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "train_synthetic.py"
SIZE, EPOCHS = 4096, 3


def _launch(nproc: int, ckpt: Path, out: Path, *extra: str) -> subprocess.Popen[str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", ADL_DIST_TIMEOUT_S="120")
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{env.get('PYTHONPATH', '')}"
    for key in ("ADL_API_URL", "ADL_STOP_FILE", "ADL_JOB"):
        env.pop(key, None)
    cmd = [
        sys.executable,
        "-m",
        "adl.cli.main",
        "launch",
        "--nproc",
        str(nproc),
        "--checkpoint-dir",
        str(ckpt),
        "--",
        sys.executable,
        str(EXAMPLE),
        "--epochs",
        str(EPOCHS),
        "--size",
        str(SIZE),
        "--hidden",
        "32",
        "--out",
        str(out),
        *extra,
    ]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True, cwd=REPO)


def test_example_is_preempted_and_resumes_at_another_size(tmp_path: Path) -> None:
    ckpt, out = tmp_path / "ckpt", tmp_path / "out.json"
    first = _launch(2, ckpt, out)
    assert first.stdout is not None
    try:
        line = first.stdout.readline()  # the first epoch is done: preempt during the second
        assert json.loads(line)["epoch"] == 0, line
        first.send_signal(signal.SIGTERM)  # the launcher forwards it to both workers
        rest = first.stdout.read()
        assert first.wait(timeout=120) == 143, rest
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert (ckpt / "adl-checkpoint.pt").exists() and not out.exists()

    second = _launch(1, ckpt, out)
    stdout, _ = second.communicate(timeout=300)
    assert second.returncode == 0, stdout
    epochs = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    assert [e["epoch"] for e in epochs] == [1, 2]  # resumed inside epoch 1, not from scratch
    assert {e["world"] for e in epochs} == {1}
    final = json.loads(out.read_text())
    # Across both runs and both sizes every sample was trained on exactly once per epoch.
    assert final["samples"] == EPOCHS * SIZE
    assert final["accuracy"] > 0.8 and final["loss"] < epochs[0]["loss"] + 1e-9
