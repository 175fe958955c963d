"""The whole loop on one machine, end to end: a real daemon process, real workers running the
demo job (torch, gloo across processes), real HTTP hints from the workers to the daemon's API,
the scheduler growing a job from those hints, and every job finishing with a falling loss."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from adl.cli.cmd_demo import run_demo
from adl.local.processes import group_alive, read_pidfile
from adl.local.store import Store

pytestmark = pytest.mark.slow


def test_demo_loop_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``adl demo`` with its defaults (jobs, slots, rounds, its daemon's knobs) shows
    elasticity both ways: at least one job grows and at least one shrinks."""
    home = tmp_path / "home"
    try:
        # No --step-sleep: a sleep in every step makes any job scale linearly, and growth
        # would show even where the demo's own jobs did not grow (it did, on 2 busy cores).
        rows = run_demo(home, timeout_s=600, live=True)
    finally:  # the daemon is stopped by run_demo; workers of a timed-out run are not
        for pid_file in home.glob("jobs/*/*/groups/g*.pid"):
            proc = read_pidfile(pid_file)
            if proc is not None and group_alive(proc):
                os.killpg(proc.pid, signal.SIGKILL)
    # the live table's last frame, printed to a pipe, ends its line (what follows starts anew)
    out = capsys.readouterr().out
    assert "wide-mlp" in out and out.endswith("\n"), out[-200:]
    assert {r.name for r in rows} == {"wide-mlp", "big-linear", "tiny-logreg"}
    for r in rows:
        assert r.phase == "Succeeded", r
        assert r.first_loss is not None and r.last_loss is not None
        assert r.last_loss < r.first_loss, r
    # the demo's point: a job starts on one slot and grows once it has measured itself (and
    # reported it over HTTP: growth proves the hints path), and a job shrinks for a newcomer
    assert [r.name for r in rows if r.grew], rows
    assert [r.name for r in rows if r.shrank], rows
    store = Store(home / "state.db")
    try:
        for rec in store.jobs():
            assert rec.hints is not None and rec.hints.perf_params is not None
            assert rec.hints.max_profiled_replicas >= 1
    finally:
        store.close()
