"""Starting real multi-process gloo jobs of tests/integration/client_worker.py on 127.0.0.1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch

from adl.client_lib.launch import free_port, worker_env

WORKER = Path(__file__).with_name("client_worker.py")
REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 180.0


def run_job(
    world: int,
    ckpt: Path,
    record: Path,
    *extra: str,
    script: Path = WORKER,
    timeout_s: float = TIMEOUT_S,
) -> list[int]:
    """Start ``world`` workers directly (no launcher, so no signal forwarding); exit codes."""
    port = free_port()
    base = dict(os.environ)
    base["PYTHONPATH"] = f"{REPO}{os.pathsep}{base.get('PYTHONPATH', '')}"
    base["ADL_DIST_TIMEOUT_S"] = "120"
    for key in ("ADL_API_URL", "ADL_STOP_FILE"):
        base.pop(key, None)
    procs = []
    for rank in range(world):
        env = worker_env(
            base,
            rank=rank,
            local_rank=rank,
            nproc=world,
            world_size=world,
            num_nodes=1,
            master_addr="127.0.0.1",
            master_port=port,
            checkpoint_dir=str(ckpt),
            job="test/job",
        )
        cmd = [sys.executable, str(script), "--record", str(record), *extra]
        procs.append(subprocess.Popen(cmd, env=env))
    deadline = time.monotonic() + timeout_s
    try:
        codes = []
        for p in procs:
            codes.append(p.wait(timeout=max(deadline - time.monotonic(), 1.0)))
        return codes
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def read_records(record: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for path in sorted(record.glob("*.jsonl")):
        rows.extend(json.loads(line) for line in path.read_text().splitlines() if line)
    return rows


def ids_per_epoch(rows: list[dict[str, Any]]) -> dict[int, Counter[int]]:
    seen: dict[int, Counter[int]] = {}
    for row in rows:
        seen.setdefault(row["epoch"], Counter()).update(row["ids"])
    return seen


def load_params(path: Path) -> dict[str, Any]:
    return torch.load(path, weights_only=True)
