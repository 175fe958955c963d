"""Pod networking for the process kubelet: one Linux network namespace per pod, joined to a
bridge by a veth pair, so every pod has its own address (fixed ports such as adl's rendezvous
port 29500 never collide, and a TCPStore binding all interfaces binds only its pod's) and
reaches the others and the host end of the bridge (where the operator's API listens).

Names resolve through ``/etc/netns/<netns>/hosts``, which ``ip netns exec`` bind-mounts over
``/etc/hosts`` in the process's own mount namespace: glibc reads it on each lookup, so the C
code of gloo and TCPStore resolves ``<hostname>.<subdomain>.<ns>.svc[.cluster.local]`` and the
headless Service's name to pod addresses, as cluster DNS would. Each pod's file is rewritten
*in place* whenever a pod gets or loses an address (a bind mount follows the inode, not the
name). Differences from cluster DNS: there are no search domains (the ``.svc`` and
``.svc.cluster.local`` forms are both listed instead), and a name is listed as soon as its
pod has an address, whether or not the Service exists yet.

Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and ``ip`` from iproute2; :func:`available`
says whether this machine has them.
"""

from __future__ import annotations

import contextlib
import ipaddress
import itertools
import os
import shutil
import subprocess
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

NETNS_DIR = Path("/etc/netns")
RUN_NETNS = Path("/var/run/netns")
#: /16 subnets tried for the bridge, first free one wins (several kubelets may coexist)
SUBNET_SECOND_OCTETS = range(200, 250)
#: pods per kubelet: a /16 less the network, bridge and broadcast addresses
MAX_PODS = 65_000
PREFIX = "adlk"
#: kubelets made by this process so far (part of every name they make)
_INSTANCES = itertools.count(1)


class IpError(subprocess.CalledProcessError):
    """A failed ``ip`` command whose message carries ip's own complaint and input (the base
    class's text drops both, which left a failed pod start unexplained in the logs)."""

    def __init__(self, code: int, cmd: list[str], out: str, err: str, stdin: str | None) -> None:
        super().__init__(code, cmd, out, err)
        self.stdin = stdin

    def __str__(self) -> str:
        sent = f" (input: {self.stdin.strip()!r})" if self.stdin else ""
        return f"{super().__str__()}: {str(self.stderr).strip()}{sent}"


def _ip(*args: str, stdin: str | None = None) -> None:
    done = subprocess.run(["ip", *args], input=stdin, text=True, capture_output=True)
    if done.returncode != 0:
        raise IpError(done.returncode, ["ip", *args], done.stdout, done.stderr, stdin)


def available() -> bool:
    """Whether network namespaces can be made here (root, iproute2, netns support)."""
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("unshare") is None:
        return False
    probe = f"{PREFIX}probe{os.getpid():x}"
    try:
        _ip("netns", "add", probe)
        _ip("netns", "del", probe)
        return True
    except (subprocess.CalledProcessError, OSError):
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_stale() -> None:
    """Remove namespaces, bridges and hosts files left by kubelets that died uncleanly
    (their owner pid, in the name, is gone)."""
    names = [p.name for p in RUN_NETNS.glob(f"{PREFIX}-*")] if RUN_NETNS.is_dir() else []
    for name in names:
        try:
            owner = int(name.split("-")[1], 16)
        except (IndexError, ValueError):
            continue
        if not _alive(owner):
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("netns", "del", name)
            shutil.rmtree(NETNS_DIR / name, ignore_errors=True)
    out = subprocess.run(["ip", "-o", "link", "show", "type", "bridge"], capture_output=True)
    for line in out.stdout.decode().splitlines():
        dev = line.split(":")[1].strip().split("@")[0]
        if dev.startswith(f"{PREFIX}br"):
            with contextlib.suppress(ValueError):
                if not _alive(int(dev[len(PREFIX) + 2 :].split("g")[0], 16)):
                    subprocess.run(["ip", "link", "del", dev], capture_output=True)


def _used_subnets() -> set[int]:
    out = subprocess.run(["ip", "-o", "-4", "route", "show"], capture_output=True, text=True)
    used = set()
    for line in out.stdout.splitlines():
        dest = line.split()[0]
        if dest.startswith("10."):
            used.add(int(dest.split(".")[1]))
    return used


@dataclass(frozen=True)
class PodAddress:
    netns: str
    ip: str
    names: tuple[str, ...]  # host names that resolve to ``ip`` (all pods' files list them)
    hostname: str = ""  # resolves to ``ip`` in this pod's own file (gloo binds to it)


class PodNetwork:
    """A bridge with a /16 and one namespace per pod; thread-safe."""

    def __init__(self) -> None:
        reap_stale()
        # Names are unique per kubelet, not per process: a pod process of an earlier kubelet in
        # this test session may still hold its namespace (and so its veth) a moment after that
        # kubelet closed, and reusing its names made the next kubelet's pod fail to start.
        self.owner = f"{os.getpid():x}"
        self.instance = next(_INSTANCES)
        self.bridge = f"{PREFIX}br{self.owner}g{self.instance:x}"
        free = [o for o in SUBNET_SECOND_OCTETS if o not in _used_subnets()]
        if not free:
            raise RuntimeError("no free 10.x.0.0/16 subnet for the pod bridge")
        self.subnet = ipaddress.ip_network(f"10.{free[0]}.0.0/16")
        hosts = self.subnet.hosts()
        self.gateway = str(next(hosts))  # the host end: pods reach host services here
        self._free = hosts
        self._lock = threading.Lock()
        self._pods: dict[str, PodAddress] = {}
        self._count = 0
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.gateway}/16", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")

    def add(self, names: Iterable[str], hostname: str = "") -> PodAddress:
        """A new namespace with an address; ``names`` resolve to it in every pod, ``hostname``
        in this one (as the kubelet's /etc/hosts of a pod lists its own name)."""
        with self._lock:
            self._count += 1
            if self._count > MAX_PODS:
                raise RuntimeError(f"more than {MAX_PODS} pods on one process kubelet")
            n = self._count
            ip = str(next(self._free))
        netns = f"{PREFIX}-{self.owner}-{self.instance:x}-{n:x}"
        host_end = f"v{self.owner}g{self.instance:x}g{n:x}"
        if len(host_end) > 15:  # the kernel's limit on interface names
            raise RuntimeError(f"interface name {host_end!r} too long")
        _ip("netns", "add", netns)
        try:
            self._wire(netns, host_end, ip)
        except BaseException:
            with contextlib.suppress(subprocess.CalledProcessError):
                _ip("netns", "del", netns)  # no half-made namespace left behind
            raise
        address = PodAddress(netns=netns, ip=ip, names=tuple(names), hostname=hostname)
        with self._lock:
            self._pods[netns] = address
            (NETNS_DIR / netns).mkdir(parents=True, exist_ok=True)
            self._write_hosts()
        return address

    def _wire(self, netns: str, host_end: str, ip: str) -> None:
        """The veth pair from the bridge into ``netns``, with ``ip`` inside."""
        # two batches (host side, pod side): a few ``ip`` processes per pod, not six
        host = [
            f"link add {host_end} type veth peer name eth0 netns {netns}",
            f"link set {host_end} master {self.bridge} up",
        ]
        _ip("-batch", "-", stdin="\n".join(host) + "\n")
        pod = [
            f"addr add {ip}/16 dev eth0",
            "link set eth0 up",
            "link set lo up",
            f"route add default via {self.gateway}",
        ]
        _ip("-n", netns, "-batch", "-", stdin="\n".join(pod) + "\n")

    def cut(self, address: PodAddress) -> None:
        """Unplug the pod's interface (the veth pair goes): its peers get no FIN or RST from
        it any more, as when a machine loses power."""
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("-n", address.netns, "link", "del", "eth0")

    def remove(self, address: PodAddress) -> None:
        with self._lock:
            self._pods.pop(address.netns, None)
            self._write_hosts()
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("netns", "del", address.netns)  # takes the veth pair with it
        shutil.rmtree(NETNS_DIR / address.netns, ignore_errors=True)

    def command(self, address: PodAddress, hostname: str, argv: list[str]) -> list[str]:
        """argv run in the pod's namespace (net, mount for /etc/hosts, UTS for its hostname);
        each step execs the next, so the pid is the container's own process."""
        return [
            "ip",
            "netns",
            "exec",
            address.netns,
            "unshare",
            "--uts",
            "--",
            "/bin/sh",
            "-c",
            'hostname "$0" && exec "$@"',
            hostname,
            *argv,
        ]

    def _write_hosts(self) -> None:
        shared = ["127.0.0.1 localhost", "::1 localhost ip6-localhost"]
        shared += [f"{p.ip} {' '.join(p.names)}" for p in self._pods.values() if p.names]
        for netns, pod in self._pods.items():
            own = [f"{pod.ip} {pod.hostname}"] if pod.hostname else []
            text = "\n".join(shared + own) + "\n"
            path = NETNS_DIR / netns / "hosts"
            # In place, never replaced: a running pod's bind mount holds the inode. Written
            # before the truncate, so a lookup in between never sees an empty file.
            with open(path, "a+") as fh:
                fh.seek(0)
                fh.write(text)
                fh.truncate()

    def close(self) -> None:
        with self._lock:
            pods = list(self._pods.values())
        for p in pods:
            self.remove(p)
        with contextlib.suppress(subprocess.CalledProcessError):
            _ip("link", "del", self.bridge)
