"""A process kubelet for the cluster tests: fake Nodes whose pods run as local processes.

It registers N Nodes (:mod:`kubelet_nodes`) and keeps them alive; watches the pods that
kube-scheduler binds to them and runs container 0 of each as a process in the pod's own
network namespace (:mod:`kubelet_net`), with ``python`` this interpreter and the
project on ``PYTHONPATH`` (the project is the "image"). Env is resolved as the kubelet does
(values, fieldRef, resourceFieldRef, secretKeyRef, configMapKeyRef, envFrom); a pod on a node
labelled with a GPU type (``nvidia.com/gpu.product``) also gets ``ADL_GPU_TYPE``, the type its
CPU worker then reports as a GPU worker there would read it from its device. Volumes are
local directories, since a process cannot mount: a Secret or ConfigMap volume is its keys
written as files, an emptyDir a fresh directory, a claim its PersistentVolume's directory
(:mod:`kubelet_claims`, kept for the claim's life); each mountPath is rewritten to its
directory in env values and args (:mod:`kubelet_pods`).

Status goes Pending -> Running (podIP, container running) -> Succeeded/Failed with the exit
code; a command that cannot start ends at once as StartError, exit 128; a missing Secret or
key leaves the pod waiting in CreateContainerConfigError. A pod being deleted gets SIGTERM,
SIGKILL after its grace period, then is removed (grace 0), as the kubelet does. ``stop()``
kills every child and removes the nodes. Each pod's output is kept in ``logs_dir``.

``adopt`` (a label selector): Nodes that someone else creates with those labels become this
kubelet's too, as they appear (an autoscaler's: Karpenter's KWOK provider creates the Node
object of each "instance" it launches and runs no kubelet on it). An adopted node is kept
Ready with its lease renewed (:meth:`NodeKeeper.adopt`), the pods bound to it run here, and
when the Node is deleted its pods' processes are killed and the node is forgotten; ``stop()``
leaves adopted Nodes to their creator. Removing Karpenter's ``karpenter.sh/unregistered``
taint is not the kubelet's part: Karpenter's registration takes it off once the Node exists.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubelet_pods as S
from kubelet_claims import ClaimProvisioner
from kubelet_net import PodAddress, PodNetwork
from kubelet_nodes import NodeKeeper, NodeSpec
from kubelet_watch import Informer
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from adl import contract as C

log = logging.getLogger("adl.tests.kubelet")

PROJECT = Path(__file__).resolve().parents[2]
#: how often pods waiting on a missing Secret/ConfigMap are tried again
RETRY_S = 1.0
#: the longest grace period honoured (a pod is outside input)
MAX_GRACE_S = 300


class MountError(S.ConfigError):
    """A volume's source is missing: the pod stays in ContainerCreating (FailedMount)."""


@dataclass
class PodRun:
    """One pod this kubelet has taken on."""

    uid: str
    namespace: str
    name: str
    pod: dict[str, Any]
    proc: subprocess.Popen[bytes] | None = None
    address: PodAddress | None = None
    started: str = ""
    done: bool = False
    deleting: bool = False
    kill_at: float | None = None
    retry_at: float | None = None
    dirs: list[Path] = field(default_factory=list)


class ProcessKubelet:
    def __init__(
        self,
        api: client.ApiClient,
        nodes: Sequence[NodeSpec],
        state_dir: Path,
        *,
        python: str = sys.executable,
        project: Path = PROJECT,
        heartbeat_s: float = 4.0,
        adopt: str | None = None,
    ) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        #: every node whose pods this kubelet runs: the static ones and those adopted since
        self.node_names = {n.name for n in nodes}
        #: the nodes this kubelet was started with, in the order given (never an adopted one,
        #: so a test that means "the static node" cannot pick a node Karpenter launched)
        self.static_names: tuple[str, ...] = tuple(n.name for n in nodes)
        self.state = state_dir
        self.logs_dir = state_dir / "logs"
        self.python = python
        self.project = project
        self.network = PodNetwork()
        self.host_ip = self.network.gateway
        self.nodes = NodeKeeper(api, nodes, self.host_ip, heartbeat_s)
        self.claims = ClaimProvisioner(api, state_dir / "claims")
        self.events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.runs: dict[str, PodRun] = {}
        #: pod uid -> the latest status the API server could not take yet (it was down)
        self.unsent: dict[str, tuple[PodRun, dict[str, Any]]] = {}
        #: pod uid -> a finished pod whose final removal the API server could not take yet
        self.undeleted: dict[str, PodRun] = {}
        self.resend_at = 0.0
        self.stopping = threading.Event()
        self.informer = Informer(
            self.core.list_pod_for_all_namespaces,
            lambda kind, pod: self.events.put(("pod", (kind, pod))),
            name="kubelet-pods",
        )
        #: the nodes adopted (``adopt``) and not deleted since
        self.adopted: set[str] = set()
        self.node_informer = (
            Informer(
                self.core.list_node,
                lambda kind, node: self.events.put(("node", (kind, node))),
                name="kubelet-nodes",
                on_relist=lambda nodes: self.events.put(("nodes", nodes)),
                label_selector=adopt,
            )
            if adopt
            else None
        )
        self.loop = threading.Thread(target=self._loop, name="kubelet", daemon=True)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> ProcessKubelet:
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        self.claims.start()
        self.nodes.start()
        self.loop.start()
        self.informer.start()
        if self.node_informer is not None:
            self.node_informer.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        if self.node_informer is not None:
            self.node_informer.stop()
        self.informer.stop()
        self.loop.join(timeout=10)
        for run in list(self.runs.values()):
            self._kill_all(run)
            if run.proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    run.proc.wait(timeout=5)
            self._cleanup(run)
            with contextlib.suppress(ApiException):
                self.core.delete_namespaced_pod(run.name, run.namespace, grace_period_seconds=0)
        self.nodes.stop()
        self.claims.stop()
        self.network.close()

    def __enter__(self) -> ProcessKubelet:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def fail_node(self, name: str, *, abrupt: bool = False, timeout: float = 30.0) -> list[str]:
        """The machine ``name`` dies: its heartbeat stops, its pods' processes are killed, and
        nothing about them is reported any more (no exit, no deletion: their pods stay as the
        API server last saw them). ``abrupt``: the pods' network is unplugged first (a power
        loss: peers get no FIN or RST and hang until a timeout); otherwise their sockets close
        as the processes die (peers see the connection end). Returns the pods that were
        running there."""
        done: queue.Queue[list[str]] = queue.Queue()
        self.events.put(("fail", (name, abrupt, done)))
        return done.get(timeout=timeout)

    def signal_pod(
        self, namespace: str, name: str, sig: signal.Signals, *, timeout: float = 30.0
    ) -> int:
        """Send ``sig`` to every process of the running pod ``namespace/name`` (its container's
        process group; SIGSTOP freezes a rank, heartbeat thread and all). Returns the group's
        id; raises LookupError when no running pod of that name is on these nodes."""
        done: queue.Queue[int | LookupError] = queue.Queue()
        self.events.put(("signal", (namespace, name, sig, done)))
        out = done.get(timeout=timeout)
        if isinstance(out, LookupError):
            raise out
        return out

    def log_path(self, namespace: str, name: str) -> Path:
        """The output of the latest pod of that name (stdout and stderr together)."""
        return self.logs_dir / f"{namespace}_{name}.log"

    def log(self, namespace: str, name: str) -> str:
        path = self.log_path(namespace, name)
        return path.read_text(errors="replace") if path.exists() else ""

    # ------------------------------------------------------------------ event loop
    def _loop(self) -> None:
        while not self.stopping.is_set():
            try:
                kind, data = self.events.get(timeout=0.2)
            except queue.Empty:
                kind, data = "tick", None
            try:
                if kind == "pod":
                    self._on_pod(*data)
                elif kind == "exit":
                    self._on_exit(*data)
                elif kind == "fail":
                    self._on_fail(*data)
                elif kind == "signal":
                    self._on_signal(*data)
                elif kind == "node":
                    self._on_node(*data)
                elif kind == "nodes":
                    self._on_nodes(data)
                self._on_tick()
            except Exception:  # one bad pod must not stop the kubelet
                log.exception("kubelet: handling %s failed", kind)

    def _on_tick(self) -> None:
        self._resend()
        now = time.monotonic()
        for run in list(self.runs.values()):
            if run.kill_at is not None and now >= run.kill_at and not run.done:
                self._kill_all(run)
                run.kill_at = None
            if run.retry_at is not None and now >= run.retry_at and not run.deleting:
                run.retry_at = None
                self._start(run)

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod.get("spec") or {}
        if spec.get("nodeName") not in self.node_names:
            return
        uid = meta["uid"]
        run = self.runs.get(uid)
        if kind == "DELETED":
            if run is not None:
                self._kill_all(run)
                self._forget(run)
            return
        if run is None:
            phase = (pod.get("status") or {}).get("phase")
            if phase in ("Succeeded", "Failed"):
                return  # finished before this kubelet: nothing to run or report
            run = PodRun(uid, meta["namespace"], meta["name"], pod)
            self.runs[uid] = run
            if meta.get("deletionTimestamp"):
                self._finish_delete(run)
                return
            if (pod.get("status") or {}).get("containerStatuses"):
                self._lost(run)  # started by an earlier kubelet whose process is gone
                return
            self._start(run)
            return
        run.pod = pod
        if meta.get("deletionTimestamp") and not run.deleting:
            run.deleting = True
            if run.proc is None or run.done:
                self._finish_delete(run)
                return
            grace = min(max(int(meta.get("deletionGracePeriodSeconds") or 0), 0), MAX_GRACE_S)
            with contextlib.suppress(ProcessLookupError):
                os.kill(run.proc.pid, signal.SIGTERM)  # the container's own process only
            run.kill_at = time.monotonic() + grace

    def _on_fail(self, node: str, abrupt: bool, done: queue.Queue[list[str]]) -> None:
        self.nodes.silence(node)
        self.node_names.discard(node)  # events about its pods are ignored from now on
        lost = [r for r in self.runs.values() if (r.pod.get("spec") or {}).get("nodeName") == node]
        for run in lost:
            if abrupt and run.address is not None:
                self.network.cut(run.address)
            self._kill_all(run)
            self._forget(run)  # its exit, when it comes, finds no run: nothing is reported
        done.put([f"{r.namespace}/{r.name}" for r in lost])

    def _on_signal(
        self, namespace: str, name: str, sig: signal.Signals, done: queue.Queue[int | LookupError]
    ) -> None:
        """On the loop's thread, which alone changes ``runs`` (a pod's process is replaced
        there)."""
        run = next(
            (r for r in self.runs.values() if (r.namespace, r.name) == (namespace, name)), None
        )
        if run is None or run.proc is None or run.done:
            done.put(LookupError(f"no running pod {namespace}/{name} on {sorted(self.node_names)}"))
            return
        try:
            os.killpg(run.proc.pid, sig)  # the session's leader: its pid is the group's id
        except ProcessLookupError as err:
            done.put(LookupError(f"pod {namespace}/{name}: {err}"))
            return
        done.put(run.proc.pid)

    def _on_node(self, kind: str, node: dict[str, Any]) -> None:
        """A node of the ``adopt`` selector appeared, changed or was deleted."""
        name = node["metadata"]["name"]
        if kind == "DELETED":
            self._release(name)
            return
        if (
            name in self.adopted
            or name in self.nodes.dead
            or node["metadata"].get("deletionTimestamp")
        ):
            return  # already ours, "dead" (fail_node), or going: nothing to take on
        self.nodes.adopt(node)
        self.adopted.add(name)
        self.node_names.add(name)
        log.info("kubelet: adopted node %s", name)
        # pods bound before the adoption were ignored then: take them on now
        pods = self.core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={name}", _preload_content=False
        )
        for pod in json.loads(pods.data).get("items") or []:
            self._on_pod("ADDED", pod)

    def _on_nodes(self, nodes: list[dict[str, Any]]) -> None:
        """A relist of the adopted kind: those deleted while the watch was down are released."""
        present = {n["metadata"]["name"] for n in nodes}
        for name in self.adopted - present:
            self._release(name)

    def _release(self, name: str) -> None:
        """An adopted node was deleted: the machine is gone, and its pods' processes with it
        (their Pod objects are the pod garbage collector's now)."""
        if name not in self.adopted:
            return
        self.adopted.discard(name)
        self.nodes.release(name)
        self.node_names.discard(name)
        for run in [r for r in self.runs.values() if r.pod["spec"].get("nodeName") == name]:
            self._kill_all(run)
            self._forget(run)
        log.info("kubelet: adopted node %s deleted", name)

    def _on_exit(self, uid: str, returncode: int) -> None:
        run = self.runs.get(uid)
        if run is None or run.done:
            return
        run.done = True
        self._kill_all(run)  # what is left of the container goes with its main process
        code = S.exit_code(returncode)
        assert run.proc is not None
        status = S.terminated_status(run.pod, code=code, started=run.started, pid=run.proc.pid)
        self._patch_status(run, status)
        if run.address is not None:
            self.network.remove(run.address)
            run.address = None
        if run.deleting:
            self._finish_delete(run)

    # ------------------------------------------------------------------ start
    def _gpu_type(self, pod: dict[str, Any]) -> str:
        """The GPU type of the pod's node (its ``nvidia.com/gpu.product`` label), which a CPU
        worker reports as its device's through ``ADL_GPU_TYPE``: on a GPU node the worker
        would read it from its GPU (``torch.cuda.get_device_name``); "" when unlabelled."""
        try:
            node = self.core.read_node(pod["spec"].get("nodeName") or "")
        except ApiException:
            return ""
        return str((node.metadata.labels or {}).get(C.LABEL_GPU_PRODUCT, ""))

    def _start(self, run: PodRun) -> None:
        pod = run.pod
        try:
            volume_dirs = self._volumes(run)
            mounts = S.mounts_of(pod, volume_dirs)
            if run.address is None:
                run.address = self.network.add(_dns_names(pod), _hostname(pod))
            sources = S.EnvSources(run.address.ip, self.host_ip, self._secret, self._config_map)
            env = S.resolve_env(pod, sources)
            gpu_type = self._gpu_type(pod)
            if gpu_type:
                env.setdefault(C.ENV_GPU_TYPE, gpu_type)
            launch = S.container_launch(pod, env, mounts, python=self.python, project=self.project)
        except MountError as err:
            self._wait(run, "ContainerCreating", str(err))
            return
        except S.ConfigError as err:
            self._wait(run, S.CONFIG_ERROR, str(err))
            return
        program = S.executable(launch)
        if program is None:
            message = (
                "failed to create containerd task: OCI runtime create failed: unable to start "
                f'container process: exec: "{launch.argv[0]}": executable file not found in '
                "$PATH: unknown"
            )
            run.done = True
            self._patch_status(run, S.start_error_status(pod, message))
            self.network.remove(run.address)
            run.address = None
            return
        out = open(self.log_path(run.namespace, run.name), "wb")  # noqa: SIM115 (child's)
        hostname = _hostname(pod)
        try:
            run.proc = subprocess.Popen(
                self.network.command(run.address, hostname, launch.argv),
                env=launch.env,
                cwd=launch.cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own group: the container's processes together
            )
        finally:
            out.close()
        run.started = S.now()
        status = S.running_status(
            pod, pod_ip=run.address.ip, host_ip=self.host_ip, pid=run.proc.pid, started=run.started
        )
        self._patch_status(run, status)
        proc = run.proc
        threading.Thread(
            target=lambda: self.events.put(("exit", (run.uid, proc.wait()))),
            name=f"wait-{run.name}",
            daemon=True,
        ).start()

    def _wait(self, run: PodRun, reason: str, message: str) -> None:
        self._patch_status(run, S.waiting_status(run.pod, reason, message))
        run.retry_at = time.monotonic() + RETRY_S

    def _lost(self, run: PodRun) -> None:
        run.done = True
        message = "The container could not be located when the pod was terminated"
        status = S.terminated_status(
            run.pod, code=137, started=S.now(), pid=0, reason="ContainerStatusUnknown"
        )
        status["containerStatuses"][0]["state"]["terminated"]["message"] = message
        self._patch_status(run, status)

    # ------------------------------------------------------------------ volumes and sources
    def _volumes(self, run: PodRun) -> dict[str, Path]:
        base = self.state / "pods" / run.uid / "volumes"
        out: dict[str, Path] = {}
        for vol in (run.pod.get("spec") or {}).get("volumes") or []:
            name, path = vol["name"], base / vol["name"]
            if "emptyDir" in vol:
                path.mkdir(parents=True, exist_ok=True)
            elif "secret" in vol or "configMap" in vol:
                ref = vol.get("secret") or vol.get("configMap") or {}
                lookup = self._secret if "secret" in vol else self._config_map
                key = "secretName" if "secret" in vol else "name"
                try:
                    data = lookup(run.namespace, ref[key])
                except S.ConfigError as err:
                    if ref.get("optional"):
                        data = {}
                    else:
                        raise MountError(
                            f"MountVolume.SetUp failed for volume {name!r}: {err}"
                        ) from None
                _write_files(path, data, ref.get("items"), int(ref.get("defaultMode", 0o644)))
            elif "projected" in vol:
                self._projected(run, path, vol["projected"])
            elif "persistentVolumeClaim" in vol:
                path = self._claim_dir(run.namespace, vol["persistentVolumeClaim"]["claimName"])
            else:
                raise S.ConfigError(f"volume {name!r}: only emptyDir, secret, configMap and claims")
            out[name] = path
        run.dirs = [self.state / "pods" / run.uid]
        return out

    def _projected(self, run: PodRun, path: Path, projected: Mapping[str, Any]) -> None:
        """The service-account volume admission adds (token, CA bundle, namespace) and its kin."""
        mode = int(projected.get("defaultMode", 0o644))
        for source in projected.get("sources") or []:
            if "serviceAccountToken" in source:
                ref = source["serviceAccountToken"]
                account = (run.pod.get("spec") or {}).get("serviceAccountName") or "default"
                seconds = min(max(int(ref.get("expirationSeconds", 3600)), 600), 86400)
                request = {"spec": {"audiences": [], "expirationSeconds": seconds}}
                if ref.get("audience"):
                    request["spec"]["audiences"] = [ref["audience"]]
                try:
                    token = self.core.create_namespaced_service_account_token(
                        account, run.namespace, request
                    ).status.token
                except ApiException as exc:
                    raise MountError(f"service account {account!r} token: {exc.reason}") from None
                _write_files(path, {"token": token}, [{"key": "token", "path": ref["path"]}], mode)
            elif "configMap" in source or "secret" in source:
                ref = source.get("configMap") or source.get("secret") or {}
                lookup = self._config_map if "configMap" in source else self._secret
                try:
                    data = lookup(run.namespace, ref["name"])
                except S.ConfigError as err:
                    if ref.get("optional"):
                        continue
                    raise MountError(str(err)) from None
                _write_files(path, data, ref.get("items"), mode)
            elif "downwardAPI" in source:
                for item in source["downwardAPI"].get("items") or []:
                    if "fieldRef" not in item:
                        raise S.ConfigError("downwardAPI volume: only fieldRef items")
                    value = S.field_ref(run.pod, item["fieldRef"]["fieldPath"], "", self.host_ip)
                    _write_files(path, {"v": value}, [{"key": "v", "path": item["path"]}], mode)
            else:
                raise S.ConfigError(f"projected volume source {sorted(source)} not supported")

    def _claim_dir(self, namespace: str, claim: str) -> Path:
        try:
            pvc = self.core.read_namespaced_persistent_volume_claim(claim, namespace)
            if not pvc.spec.volume_name:
                raise MountError(f"claim {claim!r} is not bound")
            pv = self.core.read_persistent_volume(pvc.spec.volume_name)
        except ApiException as exc:
            raise MountError(f"claim {claim!r}: {exc.reason}") from None
        source = pv.spec.host_path or pv.spec.local
        if source is None:
            raise MountError(f"volume {pv.metadata.name} is neither hostPath nor local")
        return Path(source.path)

    def _read(self, what: str, fn: Any, namespace: str, name: str) -> dict[str, Any]:
        try:
            resp = fn(name, namespace, _preload_content=False)
        except ApiException as exc:
            if exc.status == 404:
                raise S.ConfigError(f'{what} "{name}" not found') from None
            raise S.ConfigError(f"{what} {name!r}: {exc.reason}") from None
        return dict(json.loads(resp.data))

    def _secret(self, namespace: str, name: str) -> Mapping[str, str]:
        body = self._read("secret", self.core.read_namespaced_secret, namespace, name)
        data = body.get("data") or {}
        return {k: base64.b64decode(v).decode() for k, v in data.items()}

    def _config_map(self, namespace: str, name: str) -> Mapping[str, str]:
        body = self._read("configmap", self.core.read_namespaced_config_map, namespace, name)
        return dict(body.get("data") or {})

    # ------------------------------------------------------------------ API writes
    def _patch_status(self, run: PodRun, status: dict[str, Any]) -> None:
        """Report ``status``; while the API server is unreachable it is kept (the latest per
        pod) and sent when the server is back, as the kubelet's status manager does."""
        self.unsent.pop(run.uid, None)
        try:
            self.core.patch_namespaced_pod_status(run.name, run.namespace, {"status": status})
        except ApiException as exc:
            if _retryable(exc):
                self.unsent[run.uid] = (run, status)
            elif exc.status != 404:  # gone meanwhile: nothing to report to
                log.warning("status of %s/%s: %s", run.namespace, run.name, exc.reason)
        except Exception as exc:  # connection refused: the control plane is down
            log.warning("status of %s/%s kept to send later: %r", run.namespace, run.name, exc)
            self.unsent[run.uid] = (run, status)

    def _finish_delete(self, run: PodRun) -> None:
        """Remove the pod for good (grace 0), only this incarnation (uid precondition); tried
        again later while the API server is unreachable."""
        self.undeleted.pop(run.uid, None)
        body = client.V1DeleteOptions(
            grace_period_seconds=0, preconditions=client.V1Preconditions(uid=run.uid)
        )
        try:
            self.core.delete_namespaced_pod(run.name, run.namespace, body=body)
        except ApiException as exc:
            if _retryable(exc):
                self.undeleted[run.uid] = run
            elif exc.status not in (404, 409):
                log.warning("delete %s/%s: %s", run.namespace, run.name, exc.reason)
        except Exception as exc:
            log.warning("delete %s/%s kept to do later: %r", run.namespace, run.name, exc)
            self.undeleted[run.uid] = run
        self._forget(run)

    def _resend(self) -> None:
        """Statuses and deletions the API server could not take, tried again."""
        now = time.monotonic()
        if now < self.resend_at or not (self.unsent or self.undeleted):
            return
        self.resend_at = now + RETRY_S
        for run, status in list(self.unsent.values()):
            self._patch_status(run, status)
        for run in list(self.undeleted.values()):
            self._finish_delete(run)

    def _forget(self, run: PodRun) -> None:
        self.runs.pop(run.uid, None)
        self._cleanup(run)

    def _cleanup(self, run: PodRun) -> None:
        if run.address is not None:
            self.network.remove(run.address)
            run.address = None
        for d in run.dirs:
            shutil.rmtree(d, ignore_errors=True)

    def _kill_all(self, run: PodRun) -> None:
        if run.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(run.proc.pid, signal.SIGKILL)


def _retryable(exc: ApiException) -> bool:
    """An answer that a later try may change: the server (or a proxy) is failing or busy."""
    return exc.status in (0, 429) or exc.status >= 500


def _dns_names(pod: Mapping[str, Any]) -> list[str]:
    """What cluster DNS answers with this pod's address: ``hostname.subdomain.ns.svc`` (and
    the ``cluster.local`` form) for a pod with both set; its own hostname for itself."""
    meta, spec = pod["metadata"], pod.get("spec") or {}
    host, sub = spec.get("hostname"), spec.get("subdomain")
    if not (host and sub):
        return []
    fqdn = f"{host}.{sub}.{meta['namespace']}.svc"
    return [f"{fqdn}.cluster.local", fqdn]


def _hostname(pod: Mapping[str, Any]) -> str:
    return str((pod.get("spec") or {}).get("hostname") or pod["metadata"]["name"])[:63]


def _write_files(
    path: Path, data: Mapping[str, str], items: Sequence[Mapping[str, Any]] | None, mode: int
) -> None:
    path.mkdir(parents=True, exist_ok=True)
    wanted = {i["key"]: i.get("path", i["key"]) for i in items} if items else {k: k for k in data}
    for key, rel in wanted.items():
        if key not in data:
            raise S.ConfigError(f"couldn't find key {key}")
        if rel.startswith("/") or ".." in Path(rel).parts:
            raise S.ConfigError(f"item path {rel!r} must stay inside the volume")
        target = path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(data[key])
        os.chmod(target, min(max(mode, 0), 0o777))
