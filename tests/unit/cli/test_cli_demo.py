"""``adl demo`` owns its jobs: whatever way it ends (timeout, Ctrl-C), no worker outlives it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from adl.cli import cmd_demo
from adl.local.client import kill_workers, stop_daemon
from tests.waiting import wait_for

WORKER = """\
import os, signal, sys, time
from pathlib import Path
here = Path(sys.argv[-1]).parent
def stop(*_):
    here.joinpath(f"term-{os.getpid()}").write_text("")  # asked to stop: it would checkpoint
    sys.exit(143)
signal.signal(signal.SIGTERM, stop)
here.joinpath(f"pid-{os.getpid()}").write_text("")
while True:
    signal.pause()  # until the demo stops it
"""


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] not in "ZX"


def test_a_timed_out_demo_leaves_no_worker_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = tmp_path / "sleeper.py"
    script.write_text(WORKER)
    monkeypatch.setattr(cmd_demo, "example_script", lambda: script)
    home = tmp_path / "home"
    # the worker records its pid next to the file named by its last argument
    marker = str(tmp_path / "pids" / "x")
    (tmp_path / "pids").mkdir()
    jobs = (("sleepy", "compute", 10, 1, 2, 0.0), ("other", "small", 10, 1, 1, 0.0))
    try:
        rows = cmd_demo.run_demo(
            home,
            slots=3,
            round_s=0.5,
            timeout_s=4,
            jobs=jobs,
            live=False,
            worker_args=(marker,),
            policy_knobs=(),  # the default knobs, not the demo's start on one slot
        )
        pids = [int(p.name[4:]) for p in (tmp_path / "pids").glob("pid-*")]
        # sleepy starts on both its replicas at once (a new job starts on up to a node)
        assert len(pids) == 3, "the workers should have started before the timeout"
        assert {r.phase for r in rows} == {"Running"}
        wait_for(lambda: not any(_alive(p) for p in pids), 5, "demo workers outlived the demo")
        # stopped the graceful way (SIGTERM: a real worker checkpoints), not killed at the end
        terms = {int(p.name[5:]) for p in (tmp_path / "pids").glob("term-*")}
        assert terms == set(pids)
        assert not list(home.glob("jobs/*/*/groups/warm-*.pid"))
    finally:
        stop_daemon(home, timeout_s=15)
        kill_workers(home)
        for p in (tmp_path / "pids").glob("pid-*"):
            if _alive(int(p.name[4:])):
                os.kill(int(p.name[4:]), 9)
