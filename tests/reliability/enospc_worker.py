"""A checkpointing worker for the full-disk test (run as a script by tests/reliability).

Joins standalone (``ADL_CHECKPOINT_DIR`` set), prints ``restored <version>``, then saves
versions through the library's own checkpoint path, printing ``saved <version>`` after each.
FAULT INJECTION, read only by this test worker: with ``ADL_TEST_ENOSPC_FROM=V`` the save of
version V and later writes half of its bytes and then fails with ENOSPC, as a disk that fills
during the write; the exception ends the process with exit status 1, as it would a real job.
"""

from __future__ import annotations

import argparse
import errno
import io
import os
from typing import Any

import torch

import adl
from adl.client_lib import checkpoint


class Versioned:
    name = "payload"

    def __init__(self) -> None:
        self.version = 0

    def state_dict(self) -> dict[str, Any]:
        return {"version": self.version, "data": torch.full((1 << 18,), float(self.version))}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        assert torch.all(state["data"] == float(state["version"])), "torn payload"
        self.version = int(state["version"])


def fill_disk_from(state: Versioned, version: int) -> None:
    real_save = torch.save

    def save(obj: Any, f: Any) -> None:
        if state.version < version:
            real_save(obj, f)
            return
        buf = io.BytesIO()
        real_save(obj, buf)
        f.write(buf.getvalue()[: len(buf.getvalue()) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    checkpoint.torch.save = save  # type: ignore[assignment]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--saves", type=int, default=1)
    args = p.parse_args()
    ctx = adl.init_process_group()
    state = Versioned()
    ctx.register(state)
    print(f"restored {state.version}", flush=True)
    if os.environ.get("ADL_TEST_ENOSPC_FROM"):
        fill_disk_from(state, int(os.environ["ADL_TEST_ENOSPC_FROM"]))
    for _ in range(args.saves):
        state.version += 1
        ctx.save()
        print(f"saved {state.version}", flush=True)


if __name__ == "__main__":
    main()
