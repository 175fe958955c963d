"""The job ``benchmarks/resize_latency.py`` resizes: a small MLP on synthetic data using the adl
library, printing timestamps (``{"t": {...}}`` lines) at each stage of a (re)start: process
start, before and after the rendezvous, after the checkpoint is restored, after the first step,
and when it has checkpointed after a SIGTERM."""

from __future__ import annotations

import json
import os
import sys
import time

T_PROC = time.time()  # before the heavy imports: the process exists


def mark(event: str, **extra: object) -> None:
    if os.environ.get("ADL_RANK", "0") == "0":
        rec = {"event": event, "group": int(os.environ.get("ADL_GROUP", "0")), "time": time.time()}
        print(json.dumps({"t": {**rec, **extra}}), flush=True)


def main() -> None:
    mark("process", time=T_PROC)
    import torch
    from torch import nn

    import adl
    from adl.client_lib.preemption import check_preemption

    mark("imported")
    ctx = adl.init_process_group("gloo")
    mark("rendezvous", world=ctx.world_size)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    adp = adl.AdaptiveDataParallel(model, opt, init_batch_size=32, report=False)
    mark("restored", resumed=ctx.restored, progress=float(adp.progress.progress))
    loss_fn = nn.CrossEntropyLoss()
    step = 0
    while True:
        try:
            check_preemption()
        except SystemExit as stop:
            mark("checkpointed")  # the library saved the checkpoint; the process exits next
            if os.environ.get("ADL_BENCH_FAST_EXIT") == "1":
                # what a library-side fix would do: leave the group, flush, skip the slow
                # interpreter teardown of torch (measured with --fast-exit)
                from adl.client_lib.env import shutdown

                shutdown()
                sys.stdout.flush()
                os._exit(int(stop.code or 0))
            raise
        x = torch.randn(32, 32)
        y = torch.randint(0, 10, (32,))
        opt.zero_grad(set_to_none=True)
        loss_fn(adp(x), y).backward()
        opt.step()
        step += 1
        if step == 1:
            mark("first_step", world=ctx.world_size)
        time.sleep(0.02)
        if step >= int(sys.argv[1]) if len(sys.argv) > 1 else False:
            break


if __name__ == "__main__":
    main()
