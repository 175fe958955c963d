"""Fixtures for the CLI tests: a real local daemon process over a temporary ``ADL_HOME`` (the
CLI's default backend), the torch-free counter worker, and cleanup of every process started."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[1] / "local"
if str(KIT) not in sys.path:
    sys.path.insert(0, str(KIT))


def kill_leftovers(home: Path) -> None:
    """Stop the daemon of ``home`` and SIGKILL any worker group still alive."""
    from adl.local.client import kill_workers, stop_daemon

    stop_daemon(home, timeout_s=15)
    kill_workers(home)


@pytest.fixture
def adl_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty state directory the CLI uses by default (no kube context: local backend)."""
    home = tmp_path / "adl-home"
    monkeypatch.setenv("ADL_HOME", str(home))
    monkeypatch.delenv("ADL_BACKEND", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-kubeconfig"))
    yield home
    kill_leftovers(home)


@pytest.fixture
def daemon(adl_home: Path) -> int:
    """A daemon process for ``adl_home`` with fast ticks and short failure backoff."""
    from adl.local.client import start_daemon

    return start_daemon(
        adl_home,
        slots=4,
        round_s=0.5,
        extra_args=["--tick-s", "0.05", "--backoff-s", "0.2"],
    )
