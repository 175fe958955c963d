"""The adl operator as a local process, authenticated as the chart's ServiceAccount.

It runs ``python -m adl.operator`` with the arguments the chart's Deployment renders (the
ports and the API URL swapped for free loopback ones) and a kubeconfig holding a token from the
TokenRequest API: the real authorizer sees exactly the operator a cluster would run, with no
admin shortcut. A handle can be killed with SIGKILL (a crash) and another started beside or
after it (peering, takeover).
"""

from __future__ import annotations

import os
import sys
import urllib.request
from pathlib import Path

from chart_install import ROOT, Installation
from cluster_procs import ManagedProcess, free_port

from tests.waiting import wait_for

#: replaced by the harness: each operator process gets its own free ports
_PER_PROCESS = ("--port=", "--health-port=", "--metrics-port=", "--api-url=")
#: an operator imports kopf, the scheduler and the API service: seconds on a loaded machine
READY_TIMEOUT_S = 90.0
#: variables that would point the operator elsewhere than the token kubeconfig
_SCRUBBED = ("ADL_KUBE_URL", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")


class OperatorProcess:
    """One operator replica. ``start()`` it, ``wait_ready()``, then ``kill()`` or ``stop()``."""

    def __init__(
        self,
        installation: Installation,
        kubeconfig: Path,
        workdir: Path,
        *,
        name: str = "operator",
        extra_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.installation = installation
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.name = name
        self.extra_args = extra_args
        self.extra_env = dict(env or {})
        self.port = free_port()
        self.health_port = free_port()
        self.metrics_port = free_port()
        self.process: ManagedProcess | None = None
        self.starts = 0

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def health_url(self) -> str:
        return f"http://127.0.0.1:{self.health_port}/healthz"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def argv(self) -> list[str]:
        chart_args = [a for a in self.installation.operator_args if not a.startswith(_PER_PROCESS)]
        return [
            sys.executable,
            "-m",
            "adl.operator",
            *chart_args,
            f"--port={self.port}",
            f"--health-port={self.health_port}",
            f"--metrics-port={self.metrics_port}",
            f"--api-url={self.api_url}",
            *self.extra_args,
        ]

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED}
        home = self.workdir / f"{self.name}-home"
        home.mkdir(parents=True, exist_ok=True)
        env.update(
            KUBECONFIG=str(self.kubeconfig),
            POD_NAMESPACE=self.installation.namespace,  # the Deployment's fieldRef
            HOME=str(home),
            # this checkout's adl, whatever the venv has installed
            PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            PYTHONUNBUFFERED="1",
        )
        env.update(self.extra_env)
        return env

    def start(self) -> OperatorProcess:
        """Start (or start again after a kill/stop, on the same ports). It gets SIGTERM when
        the thread that started it ends (so a killed test run leaves no operator behind):
        start it from the test's own thread, not a short-lived helper thread."""
        if self.process is not None and self.process.alive():
            raise RuntimeError(f"{self.name} is already running")
        self.starts += 1
        log = self.workdir / f"{self.name}.{self.starts}.log"
        self.process = ManagedProcess(
            self.name, self.argv(), log, env=self.environment(), die_with_parent=True
        )
        return self

    @property
    def log(self) -> Path:
        assert self.process is not None, "not started"
        return self.process.log

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self, lines: int = 60) -> str:
        return self.process.tail(lines) if self.process else f"{self.name}: not started"

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> OperatorProcess:
        """Until kopf's liveness endpoint answers (the operator runs: active or standby)."""

        def healthy() -> bool:
            with urllib.request.urlopen(self.health_url, timeout=2) as resp:
                return int(resp.status) == 200

        wait_for(
            healthy,
            timeout=timeout,
            what=f"{self.name} {self.health_url}",
            details=self.tail,
            give_up=lambda: None if self.alive() else "the operator exited",
        )
        return self

    def kill(self) -> None:
        """kill -9: no handler, no cleanup, as in a node crash or an OOM kill."""
        if self.process is not None:
            self.process.kill()

    def stop(self, grace_s: float = 15.0) -> int | None:
        """SIGTERM (kopf's graceful stop), SIGKILL after ``grace_s``."""
        return self.process.stop(grace_s) if self.process is not None else None
