"""The local machine's GPUs as the daemon may use them, found without importing torch."""

from __future__ import annotations

import os
import shutil
import subprocess


def visible_gpus() -> list[str] | None:
    """The daemon's own ``CUDA_VISIBLE_DEVICES`` entries (indices, UUIDs or MIG ids, kept as
    given), or None when it is unset and every GPU of the machine is ours."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return None
    return [d.strip() for d in visible.split(",") if d.strip() and d.strip() != "-1"]


def gpu_ids(count: int) -> list[str]:
    """What GPU slot i is called in a rank's ``CUDA_VISIBLE_DEVICES``: entry i of the daemon's
    own list (a daemon given GPUs 2,3 hands out 2 and 3, not 0 and 1), else i."""
    visible = visible_gpus()
    return visible[:count] if visible is not None else [str(i) for i in range(count)]


def detect_gpus() -> int:
    """NVIDIA GPUs visible on this machine."""
    visible = visible_gpus()
    if visible is not None:
        return len(visible)
    nvsmi = shutil.which("nvidia-smi")
    if nvsmi is None:
        return 0
    try:
        out = subprocess.run([nvsmi, "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))
