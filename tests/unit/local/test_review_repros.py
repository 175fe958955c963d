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


