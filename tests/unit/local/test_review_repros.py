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


