"""Processes the cluster tests start (the cluster modules wait with ``tests/waiting.py``).

Every process runs in its own session with its output in a log file, so it can be stopped
(SIGTERM, then SIGKILL after a grace period) or killed (-9) as a whole, and a failure can show
the end of its log.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the kernel's choice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ManagedProcess:
    """One started process with its log file."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        die_with_parent: bool = False,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log = log
        launch = self.argv
        if die_with_parent and shutil.which("setpriv"):
            # SIGTERM when the starting thread dies: a test run killed hard (a CI timeout)
            # leaves no control plane behind. Only for processes started from a thread that
            # lives as long as they should (the kernel watches the thread, not the process).
            launch = ["setpriv", "--pdeathsig", "TERM", "--", *self.argv]
        with open(log, "ab") as out:
            self.popen = subprocess.Popen(
                launch,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,  # its own process group: signals reach its children too
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, lines: int = 40) -> str:
        try:
            text = self.log.read_text(errors="replace").splitlines()
        except OSError as exc:
            return f"--- {self.name}: no log ({exc})"
        body = "\n".join(text[-lines:])
        state = "running" if self.alive() else f"exited {self.popen.returncode}"
        return f"--- {self.name} ({state}), last {lines} lines of {self.log}:\n{body}"

    def _signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)

    def kill(self) -> None:
        """SIGKILL at once (a crash), and reap it."""
        self._signal(signal.SIGKILL)
        self.popen.wait()

    def stop(self, grace_s: float = 10.0) -> int:
        """SIGTERM, then SIGKILL if it is still there after ``grace_s``; returns its exit code."""
        if self.alive():
            self._signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.popen.wait()
        # whatever it left in its group (a child that ignored SIGTERM) goes too
        self._signal(signal.SIGKILL)
        return int(self.popen.returncode)


def stop_all(processes: Sequence[ManagedProcess], grace_s: float = 10.0) -> None:
    """Stop in reverse start order, so dependents go before what they depend on."""
    for proc in reversed(processes):
        proc.stop(grace_s)
