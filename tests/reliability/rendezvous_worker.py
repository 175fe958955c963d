"""One rank of a 2-rank gloo job joined through ``adl.init_process_group``: it says ``ready``
once the group is formed, waits for a line on stdin (the test looks at its sockets meanwhile),
then all-reduces its rank + 1 and prints the sum."""

from __future__ import annotations

import sys

import torch
import torch.distributed as dist

from adl.client_lib.env import init_process_group

ctx = init_process_group("gloo", timeout_s=60)
print("ready", flush=True)
sys.stdin.readline()
t = torch.tensor([float(ctx.env.rank + 1)])
dist.all_reduce(t)
print(f"sum {t.item():g}", flush=True)
