"""Helpers shared by the in-job library's tests (also imported by their spawned ranks)."""

from __future__ import annotations

import contextlib
import os
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn


def sgd_reference_step(ref: nn.Module, x: torch.Tensor, y: torch.Tensor, lr: float) -> None:
    """One plain SGD step of a single-process reference model on the whole (global) batch."""
    ref.zero_grad()
    nn.functional.mse_loss(ref(x), y).backward()
    with torch.no_grad():
        for p in ref.parameters():
            p -= lr * p.grad


def _gloo_rank(
    rank: int, checks: Callable[[int], None], world: int, store: str, errors: str
) -> None:
    os.environ.pop("ADL_API_URL", None)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        checks(rank)
    except BaseException:
        Path(errors, f"rank{rank}.txt").write_text(traceback.format_exc())
        raise
    finally:
        # Every rank stops using the group before any tears it down (gloo aborts a rank whose
        # peer closes the connections under it: "terminate called without an active exception")
        with contextlib.suppress(Exception):
            dist.monitored_barrier(timeout=timedelta(seconds=30))
        dist.destroy_process_group()


def run_gloo_ranks(checks: Callable[[int], None], world: int, tmp_path: Path) -> None:
    """Run ``checks(rank)`` in ``world`` spawned processes joined by a gloo group; fail the
    test with every failed rank's traceback. ``checks`` must be a module-level function (the
    spawned ranks import it)."""
    errors = tmp_path / "errors"
    errors.mkdir()
    try:
        mp.start_processes(
            _gloo_rank,
            args=(checks, world, str(tmp_path / "store"), str(errors)),
            nprocs=world,
            start_method="spawn",
        )
    except Exception as err:
        details = "\n".join(p.read_text() for p in sorted(errors.iterdir()))
        pytest.fail(f"worker failed: {err}\n{details}")
