"""Rank 0's rendezvous store (torch.distributed's TCPStore) and the gloo transport listen on
loopback only when the job's master address is a loopback one (the local backend, a one-machine
``adl launch``): the store is unauthenticated, and by default torch binds it to every interface,
where anyone on the network could reach it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

WORKER = Path(__file__).with_name("rendezvous_worker.py")
REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(pid: int) -> list[str]:
    """``ADDRESS:PORT`` of every TCP socket ``pid`` listens on (``ss -ltnp``)."""
    out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, timeout=10).stdout
    return [line.split()[3] for line in out.splitlines() if f"pid={pid}," in line]


def test_the_rendezvous_store_listens_on_loopback_only(tmp_path: Path) -> None:
    port = _free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("ADL_", "GLOO_", "MASTER_"))}
    base["PYTHONPATH"] = os.pathsep.join([str(REPO), base.get("PYTHONPATH", "")])
    procs = []
    for rank in range(2):
        env = {
            **base,
            "ADL_JOB": "default/rdv",
            "ADL_RANK": str(rank),
            "ADL_WORLD_SIZE": "2",
            "ADL_MASTER_ADDR": "127.0.0.1",
            "ADL_MASTER_PORT": str(port),
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, str(WORKER)],
                env=env,
                cwd=tmp_path,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        )
    try:
        for p in procs:  # both joined: the store and the gloo pairs are up
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        bound = _listening(procs[0].pid)
        assert f"127.0.0.1:{port}" in bound  # the store is rank 0's
        exposed = [a for a in bound if not a.startswith(("127.", "[::1]:"))]
        assert exposed == [], f"rank 0 listens beyond loopback: {exposed}"
        for p in procs:  # both at once: each all-reduce waits for the other rank
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        outs = [p.communicate(timeout=60)[0] for p in procs]
        assert [p.returncode for p in procs] == [0, 0]
        assert all("sum 3" in out for out in outs)  # 1 + 2: the job still works
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)
