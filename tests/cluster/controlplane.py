"""A real Kubernetes control plane on 127.0.0.1 for the ``cluster`` tests.

etcd, kube-apiserver, kube-controller-manager and kube-scheduler, built from source at the
versions pinned in ``versions.env`` (``build_assets.sh``), each on a free loopback port with
certificates made for this session. The API server authorizes with RBAC (and the Node
authorizer), so a client's rights are the real ones; the controller-manager runs every
controller with its own service-account credentials (garbage collector, namespace lifecycle,
service accounts and their tokens, endpoint slices, ...). There is no kubelet: pods are
scheduled but nobody runs them unless a test brings its own nodes.

An audit log records every request made by a service account outside kube-system (who, verb,
resource, namespace, response code), so tests can check what an operator really did and whether
the authorizer allowed it.
"""

from __future__ import annotations

import json
import os
import queue
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cluster_pki import CertificateAuthority, CertPair, Pki, make_pki
from cluster_procs import ManagedProcess, free_port, stop_all
from kubernetes import client, config

from tests.waiting import wait_for

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build_assets.sh"
VERSIONS_FILE = HERE / "versions.env"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
#: the service range; its first address is the `kubernetes` Service (in the serving cert)
SERVICE_CIDR = "10.0.0.0/24"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
#: bounds a first build (minutes; see docs/contributing.md) and a run's wait for another run's
BUILD_TIMEOUT_S = 3600.0
#: a cold API server on 2 busy cores needs several seconds; this bounds a hung start
STARTUP_TIMEOUT_S = 120.0

#: Audit only what service accounts outside kube-system do (the operator under test): the
#: controllers' own traffic would dwarf it. Writes to AdaptiveJobs keep their bodies.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "None", "userGroups": ["system:serviceaccounts:kube-system"]},
        # what an operator writes to its jobs and what the API server kept of it
        {
            "level": "RequestResponse",
            "userGroups": ["system:serviceaccounts"],
            "verbs": ["create", "update", "patch"],
            "resources": [{"group": "adl.dev"}],
        },
        {"level": "Metadata", "userGroups": ["system:serviceaccounts"]},
        {"level": "None"},
    ],
}


def pinned_versions() -> dict[str, str]:
    """The versions of ``versions.env`` (the one place they are pinned)."""
    out = {}
    for line in VERSIONS_FILE.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not key.startswith("#"):
            out[key.strip()] = value.strip()
    return out


def find_assets(
    progress: Callable[[str], None] | None = None,
    *,
    timeout_s: float = BUILD_TIMEOUT_S,
    component: str = "controlplane",
    binaries: tuple[str, ...] = BINARIES,
) -> Path:
    """The directory with the component's binaries (the control plane's four, or Kueue's):
    ``$ADL_K8S_ASSETS`` (``$ADL_KUEUE_ASSETS``), the cache, or a fresh build (``build_assets.sh``
    decides; a first build takes minutes, then is cached).

    The script's own progress lines (each step of a build, or a wait for another run's build)
    are passed to ``progress`` as they come, from this thread. On a timeout or an interrupt the
    script is stopped with SIGTERM, on which it stops its build and removes what it had built."""
    tail: deque[str] = deque(maxlen=80)
    lines: queue.Queue[str | None] = queue.Queue()
    with tempfile.TemporaryFile("w+") as stdout:
        proc = subprocess.Popen(
            ["bash", str(BUILD_SCRIPT), component],
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
        )

        def pump() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                lines.put(line.rstrip("\n"))
            lines.put(None)

        threading.Thread(target=pump, name="build_assets stderr", daemon=True).start()
        deadline = time.monotonic() + timeout_s
        try:
            while (line := lines.get(timeout=max(0.0, deadline - time.monotonic()))) is not None:
                tail.append(line)
                if progress is not None and line.startswith("[build_assets"):
                    progress(line)
            returncode = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except (queue.Empty, subprocess.TimeoutExpired):
            _stop_build(proc)
            raise RuntimeError(
                f"{BUILD_SCRIPT} did not finish in {timeout_s:.0f} s and was stopped; its stderr "
                "ends:\n" + "\n".join(tail)[-4000:]
            ) from None
        except BaseException:  # an interrupt: the script cleans up after itself on SIGTERM
            _stop_build(proc)
            raise
        stdout.seek(0)
        printed = stdout.read()
    if returncode != 0:
        raise RuntimeError(
            f"{BUILD_SCRIPT} failed ({returncode}); its stderr ends:\n" + "\n".join(tail)[-4000:]
        )
    assets = Path(printed.strip().splitlines()[-1])
    missing = [b for b in binaries if not os.access(assets / b, os.X_OK)]
    if missing:
        raise RuntimeError(f"{assets} lacks {missing}")
    return assets


def _stop_build(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def write_kubeconfig(
    path: Path,
    server: str,
    ca_file: Path,
    *,
    user: str,
    client_pair: CertPair | None = None,
    token: str | None = None,
) -> Path:
    """A kubeconfig for one user: a client certificate or a bearer token."""
    creds: dict[str, Any] = {}
    if client_pair is not None:
        creds = {"client-certificate": str(client_pair.cert), "client-key": str(client_pair.key)}
    if token is not None:
        creds["token"] = token
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "adl-test",
                "cluster": {"server": server, "certificate-authority": str(ca_file)},
            }
        ],
        "users": [{"name": user, "user": creds}],
        "contexts": [{"name": user, "context": {"cluster": "adl-test", "user": user}}],
        "current-context": user,
    }
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)  # it holds a credential
    return path


@dataclass(frozen=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int


class ControlPlane:
    """Start with :meth:`start`, stop with :meth:`stop` (also after a failed start)."""

    def __init__(self, assets: Path, workdir: Path) -> None:
        self.assets = assets
        self.workdir = workdir
        self.processes: list[ManagedProcess] = []
        self.version = ""
        workdir.mkdir(parents=True, exist_ok=True)
        self.pki: Pki
        self._ca: CertificateAuthority
        self.pki, self._ca = make_pki(workdir / "pki")
        self.ports = Ports(free_port(), free_port(), free_port())
        self.server = f"https://127.0.0.1:{self.ports.apiserver}"
        self.ca_file = self.pki.ca.cert
        self.audit_log = workdir / "audit.log"
        kc = workdir / "kubeconfigs"
        kc.mkdir(exist_ok=True)
        self.admin_kubeconfig = self._kubeconfig(kc / "admin", "admin", self.pki.admin)
        self._cm_kubeconfig = self._kubeconfig(
            kc / "controller-manager", "system:kube-controller-manager", self.pki.controller_manager
        )
        self._sched_kubeconfig = self._kubeconfig(
            kc / "scheduler", "system:kube-scheduler", self.pki.scheduler
        )

    def _kubeconfig(self, path: Path, user: str, pair: CertPair) -> Path:
        return write_kubeconfig(path, self.server, self.ca_file, user=user, client_pair=pair)

    # ------------------------------------------------------------------ clients
    def api_client(self, kubeconfig: Path | None = None) -> client.ApiClient:
        """A Kubernetes client with this kubeconfig (default: the admin's, system:masters)."""
        return config.new_client_from_config(config_file=str(kubeconfig or self.admin_kubeconfig))

    def client_kubeconfig(self, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig for a user of the session's CA (e.g. ``system:node:n1``,
        ``("system:nodes",)`` for a node the Node authorizer knows)."""
        stem = user.replace(":", "_")
        pair = self._ca.issue(f"user-{stem}", user, groups)
        return self._kubeconfig(self.workdir / "kubeconfigs" / stem, user, pair)

    def _ssl(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.load_cert_chain(str(self.pki.admin.cert), str(self.pki.admin.key))
        return ctx

    def get(self, path: str) -> tuple[int, bytes]:
        """GET a path of the API server as the admin."""
        with urllib.request.urlopen(self.server + path, context=self._ssl(), timeout=5) as resp:
            return int(resp.status), resp.read()

    def audit_events(self, username: str | None = None) -> list[dict[str, Any]]:
        """The audit log's events so far (of ``username`` only, when given)."""
        if not self.audit_log.exists():
            return []
        events = [json.loads(line) for line in self.audit_log.read_text().splitlines() if line]
        if username is not None:
            events = [e for e in events if e.get("user", {}).get("username") == username]
        return events

    # ------------------------------------------------------------------ lifecycle
    def details(self) -> str:
        """The end of every component's log (shown when something does not come up)."""
        return "\n".join(p.tail() for p in self.processes)

    def _start(self, name: str, *args: str) -> ManagedProcess:
        binary = str(self.assets / name.split("#")[0])
        proc = ManagedProcess(
            name, [binary, *args], self.workdir / f"{name}.log", die_with_parent=True
        )
        self.processes.append(proc)
        return proc

    def _dead(self) -> str | None:
        dead = [p.name for p in self.processes if not p.alive()]
        return f"{', '.join(dead)} exited" if dead else None

    def _wait(self, what: str, check: Any, timeout: float = STARTUP_TIMEOUT_S) -> Any:
        return wait_for(check, timeout=timeout, what=what, details=self.details, give_up=self._dead)

    def start(self) -> None:
        try:
            self._start_etcd()
            self._start_apiserver()
            self._start_controllers()
        except BaseException:
            self.stop()
            raise

    def _start_etcd(self) -> None:
        client_url = f"http://127.0.0.1:{self.ports.etcd_client}"
        peer_url = f"http://127.0.0.1:{self.ports.etcd_peer}"
        self._start(
            "etcd",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=default={peer_url}",
            # a throwaway store: fsync would only slow every write on a shared disk
            "--unsafe-no-fsync",
            "--log-level=warn",
        )

        def healthy() -> bool:
            with urllib.request.urlopen(client_url + "/health", timeout=2) as resp:
                return bool(json.loads(resp.read()).get("health") == "true")

        self._wait("etcd /health", healthy)

    def _start_apiserver(self) -> None:
        policy = self.workdir / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(AUDIT_POLICY))
        self._start(
            "kube-apiserver",
            f"--etcd-servers=http://127.0.0.1:{self.ports.etcd_client}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            # the `kubernetes` Service may not point at loopback; nothing here dials it
            "--endpoint-reconciler-type=none",
            # webhooks and aggregated APIs are called at their Service's endpoints, not its
            # ClusterIP (there is no kube-proxy here): Kueue's webhooks (kueue_install.py)
            "--enable-aggregator-routing=true",
            f"--secure-port={self.ports.apiserver}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={self.pki.serving.cert}",
            f"--tls-private-key-file={self.pki.serving.key}",
            f"--client-ca-file={self.ca_file}",
            f"--service-account-issuer={SA_ISSUER}",
            f"--service-account-key-file={self.pki.sa_public}",
            f"--service-account-signing-key-file={self.pki.sa_private}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--allow-privileged=true",
            "--profiling=false",
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
        )

        def ready() -> bool:
            status, _ = self.get("/readyz")
            return status == 200

        self._wait("kube-apiserver /readyz", ready)
        _, body = self.get("/version")
        self.version = str(json.loads(body)["gitVersion"])

    def _start_controllers(self) -> None:
        cm = str(self._cm_kubeconfig)
        self._start(
            "kube-controller-manager",
            f"--kubeconfig={cm}",
            f"--authentication-kubeconfig={cm}",
            f"--authorization-kubeconfig={cm}",
            "--bind-address=127.0.0.1",
            "--secure-port=0",  # nobody scrapes it; one port less to collide
            "--leader-elect=false",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={self.pki.sa_private}",
            f"--root-ca-file={self.ca_file}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--controllers=*",
        )
        sched = str(self._sched_kubeconfig)
        self._start(
            "kube-scheduler",
            f"--kubeconfig={sched}",
            f"--authentication-kubeconfig={sched}",
            f"--authorization-kubeconfig={sched}",
            "--bind-address=127.0.0.1",
            "--secure-port=0",
            "--leader-elect=false",
        )
        core = client.CoreV1Api(self.api_client())
        # the service-account controller runs: a namespace gets its `default` account
        self._wait(
            "the default ServiceAccount of namespace default",
            lambda: core.read_namespaced_service_account("default", "default"),
        )

    def stop_apiserver(self) -> None:
        """Stop kube-apiserver (SIGTERM, then SIGKILL): a control-plane outage. Everything else
        (etcd, the controllers, the scheduler) keeps running and retries."""
        for proc in [p for p in self.processes if p.name == "kube-apiserver"]:
            proc.stop()
            self.processes.remove(proc)

    def start_apiserver(self) -> None:
        """Start kube-apiserver again on the same port, certificates and store; returns once
        it is ready. The controller-manager and the scheduler are restarted with it: without
        leader election they outlive an outage with caches that never catch up again (the
        node lifecycle and service-account controllers stopped: "read version 399 is not as
        new as written version 418"), where a real control plane's would have lost their
        lease and been restarted. Later tests of the session get a working control plane."""
        if any(p.name == "kube-apiserver" and p.alive() for p in self.processes):
            raise RuntimeError("kube-apiserver is already running")
        self._start_apiserver()
        for proc in [
            p for p in self.processes if p.name in ("kube-controller-manager", "kube-scheduler")
        ]:
            proc.stop()
            self.processes.remove(proc)
        self._start_controllers()

    def wait_namespace_ready(self, namespace: str, timeout: float = 60.0) -> None:
        """Pods can be created in ``namespace`` once its default ServiceAccount exists (the
        ServiceAccount admission plugin refuses them before)."""
        core = client.CoreV1Api(self.api_client())
        self._wait(
            f"the default ServiceAccount of namespace {namespace}",
            lambda: core.read_namespaced_service_account("default", namespace),
            timeout,
        )

    def stop(self) -> None:
        stop_all(self.processes)
