"""What the process kubelet makes of a pod, without doing it: the container's argv, working
directory and environment, the mount paths rewritten to local directories, and the status
dicts a kubelet reports. Pure (the API reads come in as callables), so each rule is
unit-tested without a control plane (test_kubelet_pods.py).

A process cannot mount a volume at an absolute path, so every volume is a local directory and
each ``mountPath`` is rewritten to that directory wherever it appears in an env value or an
argument (``/adl/checkpoint/ns/job`` -> ``<claim dir>/ns/job``). A program that builds such a
path from pieces it did not get through env or args would not see the rewrite.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

#: Exit code and reason of a container whose command cannot be started (what containerd and
#: the kubelet report for an executable that is not there).
START_ERROR_CODE = 128
START_ERROR = "StartError"
CONFIG_ERROR = "CreateContainerConfigError"

#: resourceFieldRef divisors are bounded: a pod is outside input
_MAX_DIVISOR = 10**12


class ConfigError(Exception):
    """The pod refers to something that is not there (a Secret, a key): the kubelet reports
    ``CreateContainerConfigError`` and tries again later."""


#: (namespace, name) -> the object's data (decoded), or raise ConfigError when it is not there;
#: one for Secrets, one for ConfigMaps
DataLookup = Callable[[str, str], Mapping[str, str]]


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ------------------------------------------------------------------------------ env


def field_ref(pod: Mapping[str, Any], path: str, pod_ip: str, host_ip: str) -> str:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    simple = {
        "metadata.name": meta.get("name", ""),
        "metadata.namespace": meta.get("namespace", ""),
        "metadata.uid": meta.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", ""),
        "spec.serviceAccountName": spec.get("serviceAccountName", ""),
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": host_ip,
        "status.hostIPs": host_ip,
    }
    if path in simple:
        return str(simple[path])
    match = re.fullmatch(r"metadata\.(labels|annotations)\['([^']+)'\]", path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise ConfigError(f"unsupported fieldRef {path!r}")


_CPU = re.compile(r"^(\d+)(m?)$")


def _resource_ref(container: Mapping[str, Any], ref: Mapping[str, Any]) -> str:
    """``limits.cpu`` and friends; cpu rounds up to whole cores, as the kubelet does."""
    kind, _, name = str(ref.get("resource", "")).partition(".")
    res = (container.get("resources") or {}).get(kind) or {}
    value = str(res.get(name, "0"))
    divisor = str(ref.get("divisor", "1"))
    if name == "cpu":
        m = _CPU.match(value)
        if not m:
            raise ConfigError(f"cannot read cpu quantity {value!r}")
        millis = int(m.group(1)) * (1 if m.group(2) else 1000)
        d = _CPU.match(divisor)
        div = int(d.group(1)) * (1 if d.group(2) else 1000) if d else 1000
        div = min(max(div, 1), _MAX_DIVISOR)
        return str(-(-millis // div))
    return value


@dataclass(frozen=True)
class EnvSources:
    """What env resolution may read beside the pod itself."""

    pod_ip: str
    host_ip: str
    secret: DataLookup
    config_map: DataLookup


def _expand(value: str, env: Mapping[str, str]) -> str:
    """``$(VAR)`` of an earlier variable, ``$$`` an escaped ``$`` (the kubelet's expansion)."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name = m.group(1)
        return env.get(name, m.group(0))

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", sub, value)


def resolve_env(pod: Mapping[str, Any], sources: EnvSources) -> dict[str, str]:
    """Container 0's ``env`` (``envFrom`` first, as the kubelet orders them), in order."""
    namespace = (pod.get("metadata") or {}).get("namespace", "")
    container = pod["spec"]["containers"][0]
    out: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        prefix = source.get("prefix", "")
        for kind, lookup in (("configMapRef", sources.config_map), ("secretRef", sources.secret)):
            ref = source.get(kind)
            if ref:
                for key, val in _all_keys(lookup, namespace, ref):
                    out[prefix + key] = val
    for item in container.get("env") or []:
        name = item["name"]
        if "value" in item:
            out[name] = _expand(str(item["value"]), out)
            continue
        ref = item.get("valueFrom") or {}
        if "fieldRef" in ref:
            out[name] = field_ref(
                pod, ref["fieldRef"]["fieldPath"], sources.pod_ip, sources.host_ip
            )
        elif "resourceFieldRef" in ref:
            out[name] = _resource_ref(container, ref["resourceFieldRef"])
        elif "secretKeyRef" in ref:
            out.update(_key(sources.secret, namespace, name, ref["secretKeyRef"]))
        elif "configMapKeyRef" in ref:
            out.update(_key(sources.config_map, namespace, name, ref["configMapKeyRef"]))
        else:
            out[name] = ""
    return out


def _key(lookup: DataLookup, ns: str, var: str, ref: Mapping[str, Any]) -> dict[str, str]:
    try:
        data = lookup(ns, ref["name"])
        if ref["key"] not in data:
            raise ConfigError(f"couldn't find key {ref['key']} in {ref['name']}")
        return {var: data[ref["key"]]}
    except ConfigError:
        if ref.get("optional"):
            return {}
        raise


def _all_keys(lookup: DataLookup, ns: str, ref: Mapping[str, Any]) -> list[tuple[str, str]]:
    try:
        return sorted(lookup(ns, ref["name"]).items())
    except ConfigError:
        if ref.get("optional"):
            return []
        raise


# ------------------------------------------------------------------------------ mounts


@dataclass(frozen=True)
class Mount:
    """One volumeMount made local: ``path`` (the pod's absolute mountPath) is ``local``."""

    path: str
    local: Path


def mounts_of(pod: Mapping[str, Any], volume_dirs: Mapping[str, Path]) -> list[Mount]:
    """Container 0's mounts, longest path first (a nested mount wins over its parent)."""
    out = []
    for m in pod["spec"]["containers"][0].get("volumeMounts") or []:
        base = volume_dirs.get(m["name"])
        if base is None:
            raise ConfigError(f"volumeMount {m['name']!r} names no volume of the pod")
        sub = str(m.get("subPath") or "")
        if sub.startswith("/") or ".." in Path(sub).parts:
            raise ConfigError(f"subPath {sub!r} must be relative and stay inside the volume")
        out.append(Mount(str(m["mountPath"]).rstrip("/") or "/", base / sub if sub else base))
    return sorted(out, key=lambda m: -len(m.path))


def rewrite(value: str, mounts: Sequence[Mount]) -> str:
    """``value`` with each mount path (as a whole path component run) made local, in one pass
    (longest path first), so a replacement is never rewritten again."""
    if not mounts:
        return value
    local = {m.path: str(m.local) for m in mounts}
    alternatives = "|".join(re.escape(p) for p in sorted(local, key=len, reverse=True))
    pattern = r"(?<![\w.-])(" + alternatives + r")(?=/|$|[^\w.-])"
    return re.sub(pattern, lambda found: local[found.group(1)], value)


# ------------------------------------------------------------------------------ argv


@dataclass(frozen=True)
class Launch:
    """How to start container 0 as a local process."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path


def container_launch(
    pod: Mapping[str, Any],
    env: Mapping[str, str],
    mounts: Sequence[Mount],
    *,
    python: str,
    project: Path,
) -> Launch:
    """argv (``python`` is this interpreter, ``$(VAR)`` expanded, mount paths local), the
    environment (the venv's bin first on PATH, the project importable) and the working
    directory (``workingDir`` rewritten if it is a mount, else the project: the "image")."""
    container = pod["spec"]["containers"][0]
    words = [*(container.get("command") or []), *(container.get("args") or [])]
    if not words:
        raise ConfigError("container 0 has no command: a process kubelet has no image entrypoint")
    bin_dir = str(Path(python).parent)
    base = {
        "PATH": f"{bin_dir}:/usr/local/bin:/usr/bin:/bin",
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(project),
        "PYTHONUNBUFFERED": "1",
        "HOSTNAME": (pod.get("spec") or {}).get("hostname") or pod["metadata"]["name"],
    }
    full = {**base, **{k: rewrite(v, mounts) for k, v in env.items()}}
    argv = [rewrite(_expand(str(w), full), mounts) for w in words]
    if argv[0] in ("python", "python3"):
        argv[0] = python
    workdir = container.get("workingDir")
    cwd = Path(rewrite(workdir, mounts)) if workdir else project
    return Launch(argv=argv, env=full, cwd=cwd if cwd.is_dir() else project)


def executable(launch: Launch) -> str | None:
    """The program the runtime would exec, or None when it cannot be found (a start error)."""
    prog = launch.argv[0]
    if "/" in prog:
        path = prog if prog.startswith("/") else str(launch.cwd / prog)
        return path if shutil.which(path) else None
    return shutil.which(prog, path=launch.env.get("PATH"))


# ------------------------------------------------------------------------------ status


def exit_code(returncode: int) -> int:
    """A container's exit code: killed by signal N reads 128 + N, as the runtime reports."""
    return 128 - returncode if returncode < 0 else returncode


def _conditions(ready: bool, reason: str = "") -> list[dict[str, Any]]:
    stamp = now()
    out = []
    for kind in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready"):
        value = "True" if ready or kind in ("Initialized", "PodReadyToStartContainers") else "False"
        cond = {"type": kind, "status": value, "lastTransitionTime": stamp}
        if value == "False" and reason:
            cond["reason"] = reason
        out.append(cond)
    return out


def _container(pod: Mapping[str, Any], state: dict[str, Any], **extra: Any) -> dict[str, Any]:
    c = pod["spec"]["containers"][0]
    return {
        "name": c["name"],
        "image": c.get("image") or "process",
        "imageID": "",
        "restartCount": 0,
        "ready": False,
        "started": False,
        "state": state,
        **extra,
    }


def running_status(
    pod: Mapping[str, Any], *, pod_ip: str, host_ip: str, pid: int, started: str
) -> dict[str, Any]:
    return {
        "phase": "Running",
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "startTime": started,
        "conditions": _conditions(True),
        "containerStatuses": [
            _container(
                pod,
                {"running": {"startedAt": started}},
                ready=True,
                started=True,
                containerID=f"process://{pid}",
            )
        ],
    }


def terminated_status(
    pod: Mapping[str, Any],
    *,
    code: int,
    started: str,
    pid: int,
    reason: str = "",
    message: str = "",
) -> dict[str, Any]:
    """Succeeded on 0, else Failed (restartPolicy Never: adl's pods never restart in place)."""
    term: dict[str, Any] = {
        "exitCode": code,
        "reason": reason or ("Completed" if code == 0 else "Error"),
        "startedAt": started,
        "finishedAt": now(),
        "containerID": f"process://{pid}",
    }
    if message:
        term["message"] = message
    return {
        "phase": "Succeeded" if code == 0 else "Failed",
        "conditions": _conditions(False, "PodCompleted" if code == 0 else "PodFailed"),
        "containerStatuses": [_container(pod, {"terminated": term})],
    }


def start_error_status(pod: Mapping[str, Any], message: str) -> dict[str, Any]:
    """A command that cannot run: terminated at once with StartError, exit 128."""
    stamp = now()
    return terminated_status(
        pod, code=START_ERROR_CODE, started=stamp, pid=0, reason=START_ERROR, message=message
    )


def waiting_status(pod: Mapping[str, Any], reason: str, message: str) -> dict[str, Any]:
    return {
        "phase": "Pending",
        "conditions": _conditions(False, "ContainersNotReady"),
        "containerStatuses": [_container(pod, {"waiting": {"reason": reason, "message": message}})],
    }
