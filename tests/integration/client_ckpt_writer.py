"""Checkpoint writer for the kill -9 test (run as a script by tests/integration).

Joins the job through ``adl.init_process_group`` (standalone, ``ADL_CHECKPOINT_DIR`` set),
restores what the last checkpoint holds, prints ``restored <version>`` and saves version+1
through the library's own checkpoint path, printing ``saved <version>`` after each save.
``--slow-from V`` makes the write of version V and later stall after two 256 KiB chunks of the
real serialization (the bytes are exactly what ``torch.save`` produces), printing ``writing
<version>``: the test kills the process there, and it waits for that kill.
"""

from __future__ import annotations

import argparse
import io
import signal
import sys
from typing import Any

import torch

import adl
from adl.client_lib import checkpoint

PAYLOAD = 4 * 1024 * 1024  # float32 values: a 16 MiB checkpoint


class Versioned:
    """A state whose every value identifies the version that wrote it."""

    name = "payload"

    def __init__(self) -> None:
        self.version = 0

    def state_dict(self) -> dict[str, Any]:
        return {"version": self.version, "data": torch.full((PAYLOAD,), float(self.version))}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        data = state["data"]
        assert torch.all(data == float(state["version"])), "torn payload"
        self.version = int(state["version"])


def slow_save(version: Versioned, slow_from: int) -> None:
    real_save = torch.save

    def save(obj: Any, f: Any) -> None:
        if version.version < slow_from:
            real_save(obj, f)
            return
        buf = io.BytesIO()
        real_save(obj, buf)
        data = buf.getvalue()
        chunk = 256 * 1024
        for start in range(0, len(data), chunk):
            f.write(data[start : start + chunk])
            f.flush()
            if start == chunk:  # two chunks on disk, the rest to come
                print(f"writing {version.version} {len(data)}", flush=True)
                while True:  # a disk that never finishes: the test's kill -9 lands mid-write
                    signal.pause()

    checkpoint.torch.save = save  # type: ignore[assignment]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--saves", type=int, default=1)
    p.add_argument("--slow-from", type=int, default=0, help="0: never slow")
    args = p.parse_args()
    ctx = adl.init_process_group()
    state = Versioned()
    ctx.register(state)
    print(f"restored {state.version}", flush=True)
    if args.slow_from:
        slow_save(state, args.slow_from)
    for _ in range(args.saves):
        state.version += 1
        ctx.save()
        print(f"saved {state.version}", flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
