"""Fixtures for the local backend: a daemon running in a thread over a temporary home, and the
torch-free counter worker."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from adl.controller.lifecycle import Timing
from adl.local.client import LocalBackend
from adl.local.daemon import Daemon, Settings
from tests.waiting import wait_for


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "adl-home"


@pytest.fixture
def daemon_factory(home: Path) -> Iterator[Callable[..., Daemon]]:
    started: list[tuple[Daemon, threading.Thread]] = []

    def start(policy: object | None = None, slots: int = 4, **kw: object) -> Daemon:
        settings = Settings(
            home=home,
            slots=slots,
            gpus=int(kw.pop("gpus", 0)),  # type: ignore[call-overload]
            gpu_types=tuple(kw.pop("gpu_types", ())),  # type: ignore[arg-type]
            round_s=float(kw.pop("round_s", 0.5)),  # type: ignore[arg-type]
            tick_s=0.05,
            api=bool(kw.pop("api", False)),
            timing=Timing(backoff_base_s=0.2, backoff_max_s=1.0),
        )
        factory = (lambda: policy) if policy is not None else None
        d = Daemon(settings, policy_factory=factory)  # type: ignore[arg-type]
        t = threading.Thread(target=d.run, daemon=True)
        t.start()
        wait_for(lambda: d.store.get_meta("daemon_pid") is not None, 10, "the daemon started")
        started.append((d, t))
        return d

    yield start
    for d, t in started:
        d.stop()
        t.join(timeout=10)
        # never leave workers behind
        from adl.local import processes as P

        for g in P.GroupPaths(d.home / "jobs").root.glob("*/*/groups/g*.pid"):
            proc = P.read_pidfile(g)
            if proc is not None and P.group_alive(proc):
                import signal

                P.signal_group(proc.pid, signal.SIGKILL)


@pytest.fixture
def backend(home: Path) -> Iterator[LocalBackend]:
    b = LocalBackend(home, autostart=False)
    yield b
    b.close()
