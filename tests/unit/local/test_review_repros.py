"""Review repros for the local backend (each test FAILS on the current code)."""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from local_kit import FixedPolicy, counter_spec, wait_for

from adl.controller.lifecycle import Timing
from adl.local.daemon import Daemon, Settings
from adl.models import Phase


def _phase(b, name):  # type: ignore[no-untyped-def]
    return b.get(name, "default").status.phase


def _log(home: Path, name: str, rank: int = 0) -> str:
    p = home / "jobs" / "default" / name / "logs" / f"r{rank}.log"
    return p.read_text() if p.exists() else ""


# 4 ------------------------------------------------------------------------------------------
def test_a_job_that_can_never_fit_is_reported(daemon_factory, backend) -> None:
    """minReplicas 3 on a 2-slot machine: accepted, then Pending forever with 'waiting for the
    scheduler to assign GPUs' (on CPU slots); nothing says it can never run."""
    daemon_factory(slots=2)  # the default AdlPolicy
    backend.submit("big", "default", counter_spec("--steps", "5", lo=3, hi=3))
    time.sleep(4.0)
    st = backend.get("big", "default").status
    print(st.phase, st.reason, st.message)
    assert st.phase != Phase.PENDING or "slot" in (st.message or ""), (st.phase, st.message)


# 5 ------------------------------------------------------------------------------------------
class _Killed(BaseException):
    """Stands for SIGKILL of the daemon at this point (the daemon thread dies)."""


def test_a_daemon_killed_between_launch_and_add_group_keeps_the_slot_gate(
    daemon_factory, backend, home
) -> None:
    """launch() starts the shim, then records the group in SQLite. Killed in between, the group
    runs (adopted from its pidfile by the next daemon) but has no `groups` row, and live_slots()/
    escalate() only read that table: another job's group starts on its slots while it still
    runs, and it is never SIGKILLed past its deadline."""
    policy = FixedPolicy()
    policy.replicas.update(a=2, b=0)
    d1 = daemon_factory(policy, slots=2)

    def crash(rec):  # type: ignore[no-untyped-def]
        raise _Killed

    d1.store.add_group = crash  # type: ignore[method-assign]
    backend.submit("a", "default", counter_spec("--steps", "400", "--step-s", "0.05",
                                                "--stop-s", "2.0"))  # fmt: skip
    wait_for(lambda: "start group=1" in _log(home, "a"))
    d2 = daemon_factory(policy, slots=2)  # the restarted daemon adopts group 1
    wait_for(lambda: _phase(backend, "a") == Phase.RUNNING)
    assert d2.store.groups("default/a") == []  # the running group is unknown to the table
    policy.replicas.update(a=1, b=1)
    backend.submit("b", "default", counter_spec("--steps", "5"))
    wait_for(lambda: _phase(backend, "b") == Phase.SUCCEEDED, timeout=60)
    a_g1 = home / "jobs/default/a/groups/g1.result.json"
    print("a's group 1 still running when b finished:", not a_g1.exists())
    wait_for(a_g1.exists, timeout=30)
    a1_end = json.loads((home / "jobs/default/a/groups/g1.result.json").read_text())["ended"]
    b_start = d2.store.groups("default/b")[0].started
    assert b_start >= a1_end - 0.2, f"b started {a1_end - b_start:.1f}s before a's 2 ranks left"
