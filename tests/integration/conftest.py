"""The integration tests share the local backend's kit with its unit tests: the counter
worker, ``local_kit`` and the daemon fixtures (a daemon in a thread over a temporary home)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit" / "local"))

from local_fixtures import backend, daemon_factory, home

__all__ = ["backend", "daemon_factory", "home"]
