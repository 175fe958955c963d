"""A torch-free stand-in for a training job, for the local backend's tests.

Counts ``--steps`` steps of ``--step-s`` seconds. Rank 0 checkpoints the count atomically after
every step in ``$ADL_CHECKPOINT_DIR/state.json``; every rank resumes from it. On SIGTERM it exits
143 at the next step boundary (as the real library does after checkpointing). ``--crash-at N``
exits 3 when the count first reaches N (once per job: a marker in the checkpoint dir), and
``--crash-always`` fails at every start. Rank 0 prints ``start``/``done`` lines with the group,
world size and step, so tests can check where each group resumed."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--step-s", type=float, default=0.05)
    p.add_argument("--crash-at", type=int, default=-1)
    p.add_argument("--crash-always", action="store_true")
    p.add_argument("--stop-s", type=float, default=0.0, help="time to 'checkpoint' on SIGTERM")
    args = p.parse_args()
    ckdir = Path(os.environ.get("ADL_CHECKPOINT_DIR", "."))
    ck = ckdir / "state.json"
    rank = int(os.environ.get("ADL_RANK", "0"))
    world = os.environ.get("ADL_WORLD_SIZE", "1")
    group = os.environ.get("ADL_GROUP", "0")
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    step = json.loads(ck.read_text())["step"] if ck.exists() else 0
    warm = int("torch" in sys.modules)  # forked from a warm shim (this script never imports it)
    print(
        f"start group={group} rank={rank} world={world} step={step} t={time.time()} warm={warm}",
        flush=True,
    )
    if args.crash_always:
        print("crashing on purpose", flush=True)
        return 3
    while step < args.steps:
        if stop:
            time.sleep(args.stop_s)  # allowed: a stop that takes time, as a checkpoint does
            print(f"stopped group={group} rank={rank} step={step}", flush=True)
            return 143
        time.sleep(args.step_s)  # allowed: pacing the steps, not waiting for anything
        step += 1
        if step == args.crash_at and rank == 0 and not (ckdir / "crashed").exists():
            (ckdir / "crashed").write_text("1")
            print(f"crash group={group} step={step}", flush=True)
            return 3
        if rank == 0:
            tmp = ck.with_suffix(".tmp")
            tmp.write_text(json.dumps({"step": step}))
            os.replace(tmp, ck)
    print(f"done group={group} rank={rank} step={step}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
