"""Holding a job at a chosen step until the test has acted on it (resize, suspend).

A framework example trains a few dozen steps in seconds: too fast for a test to resize it
between two known steps. A *gate* ``W:S`` makes every rank of a job running at world size ``W``
stop after optimizer step ``S``, print ``{"gate": S, "world": W}`` (rank 0), and wait until a stop
is requested (SIGTERM or the stop file: the resize or suspend the test started on seeing the
line). Training then goes on to the next step boundary, where adl checkpoints and exits 143.
A gate holds at most ``timeout_s``, then fails the job (the test did not act)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from adl.client_lib.env import context

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: the test kit
from tests.waiting import wait_for


def parse_gates(text: str) -> set[tuple[int, int]]:
    """``"1:6,2:16"`` -> {(1, 6), (2, 16)}: (world size, step)."""
    gates = set()
    for item in filter(None, text.split(",")):
        world, step = item.split(":")
        gates.add((int(world), int(step)))
    return gates


def hold(gates: set[tuple[int, int]], step: int, timeout_s: float = 180.0) -> None:
    """At a gate: announce it and wait for this rank's stop request."""
    ctx = context()
    if (ctx.world_size, step) not in gates:
        return
    if ctx.rank == 0:
        print(json.dumps({"gate": step, "world": ctx.world_size}), flush=True)
    monitor = ctx.preemption
    assert monitor is not None
    # the signal handler or the stop file (looked at on each call) sets it
    wait_for(
        monitor.local_stop_requested, timeout_s, f"gate {step} at world {ctx.world_size}: a stop"
    )
