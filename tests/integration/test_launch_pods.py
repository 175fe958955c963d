"""Workers written for torchrun, in "pods" as the operator builds them: one pod runs two
replicas through ``python -m adl.client_lib.launch --nproc 2``, the other one replica directly,
each with the controller's environment. All three must join one gloo group through torchrun's
variables alone (``init_process_group("gloo")`` reads ``env://``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from adl.client_lib.launch import free_port
from adl.controller.env import WorkerSite, worker_env

REPO = Path(__file__).resolve().parents[2]
SCRIPT = (
    "import datetime, os, torch, torch.distributed as dist\n"
    "dist.init_process_group('gloo', timeout=datetime.timedelta(seconds=60))\n"
    "t = torch.ones(1)\n"
    "dist.all_reduce(t)\n"
    # one write per line: two ranks share the pod's stdout (unbuffered print() writes per part)
    "r, n = dist.get_rank(), dist.get_world_size()\n"
    "os.write(1, f'rank {r} of {n} sum {int(t.item())}\\n'.encode())\n"
    "dist.destroy_process_group()\n"
)


def test_a_multi_replica_pod_and_a_single_one_form_one_group() -> None:
    alloc = ["a", "a", "b"]
    site = WorkerSite("127.0.0.1", free_port(), "/tmp/unused-ckpt")
    base = {k: v for k, v in os.environ.items() if not k.startswith("ADL_")}
    base |= {"PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    launch = [sys.executable, "-m", "adl.client_lib.launch", "--nproc", "2", "--no-prefix"]
    pod0 = subprocess.Popen(
        [*launch, "--", sys.executable, "-c", SCRIPT],
        env={**base, **worker_env("ns/j", 1, alloc, 0, site)},
        stdout=subprocess.PIPE,
        text=True,
    )
    pod1 = subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        env={**base, **worker_env("ns/j", 1, alloc, 2, site)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        out0, _ = pod0.communicate(timeout=120)
        out1, _ = pod1.communicate(timeout=120)
    finally:
        for p in (pod0, pod1):
            if p.poll() is None:
                p.kill()
                p.wait()
    assert (pod0.returncode, pod1.returncode) == (0, 0), out0 + out1
    lines = sorted((out0 + out1).splitlines())
    assert lines == [f"rank {r} of 3 sum 3" for r in range(3)]
