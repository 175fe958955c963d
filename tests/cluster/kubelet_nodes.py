"""The Node side of the process kubelet: register fake Nodes with their capacity, and keep them
alive as a kubelet does (a Lease in ``kube-node-lease`` renewed every few seconds, the Ready
condition's heartbeat refreshed), so the node lifecycle controller never marks them NotReady
or taints them, and kube-scheduler places pods on them.

Nodes someone else created (an autoscaler's: Karpenter's KWOK provider makes the Node object
itself, as a cloud's instance would register it) are *adopted*: from then on they are kept
alive the same way, with the capacity their creator gave them, and left in place when the
kubelet stops (their creator deletes them)."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.waiting import wait_for

log = logging.getLogger("adl.tests.nodes")

LEASE_NAMESPACE = "kube-node-lease"
LEASE_DURATION_S = 40
NOT_READY = "node.kubernetes.io/not-ready"
GPU = "nvidia.com/gpu"
#: what every fake node offers beside its slots: enough that only the slots ever bind
BASE_CAPACITY = {"cpu": "16", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi"}


@dataclass(frozen=True)
class NodeSpec:
    """One fake node: ``slots`` of ``slot_resource`` (GPUs, or CPU slots: ``cpu``)."""

    name: str
    slots: int
    slot_resource: str = GPU
    labels: Mapping[str, str] = field(default_factory=dict)

    def capacity(self) -> dict[str, str]:
        return {**BASE_CAPACITY, self.slot_resource: str(self.slots)}


def _micro(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _second(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def node_status(spec: NodeSpec, host_ip: str, now: datetime) -> dict[str, Any]:
    """The status a healthy kubelet reports (pure)."""
    return {
        "capacity": spec.capacity(),
        "allocatable": spec.capacity(),
        **_health(spec.name, host_ip, now),
    }


def adopted_status(
    name: str, capacity: Mapping[str, str], host_ip: str, now: datetime
) -> dict[str, Any]:
    """The status a kubelet reports on a machine of ``capacity`` that someone else described
    (pure): Ready, with the machine's capacity, and nothing held back from it."""
    return {
        "capacity": dict(capacity),
        "allocatable": dict(capacity),
        **_health(name, host_ip, now),
    }


def _health(name: str, host_ip: str, now: datetime) -> dict[str, Any]:
    """Conditions, addresses and node info of a healthy kubelet's status."""
    stamp = _second(now)

    def cond(kind: str, status: str, reason: str) -> dict[str, str]:
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": reason,
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }

    return {
        "conditions": [
            cond("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            cond("PIDPressure", "False", "KubeletHasSufficientPID"),
            cond("Ready", "True", "KubeletReady"),
        ],
        "addresses": [
            {"type": "InternalIP", "address": host_ip},
            {"type": "Hostname", "address": name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": name,
            "systemUUID": name,
            "bootID": name,
            "kernelVersion": "",
            "osImage": "adl process kubelet",
            "containerRuntimeVersion": "process://1",
            "kubeletVersion": "v0.0.0-process",
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }


def node_object(spec: NodeSpec, host_ip: str, now: datetime) -> dict[str, Any]:
    labels = {
        "kubernetes.io/hostname": spec.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        **spec.labels,
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": spec.name, "labels": labels},
        "spec": {},
        "status": node_status(spec, host_ip, now),
    }


class NodeKeeper:
    """Registers ``nodes`` and renews their leases and status until stopped."""

    def __init__(
        self,
        api: client.ApiClient,
        nodes: Sequence[NodeSpec],
        host_ip: str,
        heartbeat_s: float = 4.0,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.leases = client.CoordinationV1Api(api)
        self.nodes = list(nodes)
        self.host_ip = host_ip
        self.heartbeat_s = heartbeat_s
        self.stopping = threading.Event()
        #: nodes whose machine "died": no more leases or status from them
        self.dead: set[str] = set()
        #: adopted node -> its capacity; written by the kubelet's loop, read by the heartbeat
        self.adopted: dict[str, dict[str, str]] = {}
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._beat, name="node-heartbeat", daemon=True)

    def start(self) -> None:
        now = datetime.now(UTC)
        for spec in self.nodes:
            body = node_object(spec, self.host_ip, now)
            try:
                self.core.create_node(body)
            except ApiException as exc:
                if exc.status != 409:
                    raise
                self.core.patch_node(spec.name, {"metadata": body["metadata"]})
            # create may drop status (it is a subresource): always write it through status
            self.core.patch_node_status(spec.name, {"status": body["status"]})
            self._renew(spec.name, now)
        self.thread.start()
        self._wait_untainted()

    def _wait_untainted(self, timeout: float = 60.0) -> None:
        """A new Node carries ``node.kubernetes.io/not-ready`` until the node lifecycle
        controller has seen it Ready; the operator (rightly) leaves tainted nodes out."""
        names = {spec.name for spec in self.nodes}

        def untainted() -> bool:
            tainted = {
                node.metadata.name
                for node in self.core.list_node().items
                if any(t.key == NOT_READY for t in node.spec.taints or [])
            }
            return not names & tainted

        wait_for(untainted, timeout, what=f"nodes {sorted(names)} without {NOT_READY}")

    def _renew(self, name: str, now: datetime) -> None:
        node = self.core.read_node(name)
        lease_spec = {
            "holderIdentity": name,
            "leaseDurationSeconds": LEASE_DURATION_S,
            "renewTime": _micro(now),
        }
        try:
            self.leases.patch_namespaced_lease(name, LEASE_NAMESPACE, {"spec": lease_spec})
        except ApiException as exc:
            if exc.status != 404:
                raise
            # owned by its Node: the garbage collector removes it with the Node
            owner = {"apiVersion": "v1", "kind": "Node", "name": name, "uid": node.metadata.uid}
            lease = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {
                    "name": name,
                    "namespace": LEASE_NAMESPACE,
                    "ownerReferences": [owner],
                },
                "spec": lease_spec,
            }
            self.leases.create_namespaced_lease(LEASE_NAMESPACE, lease)

    def _statuses(self, now: datetime) -> list[tuple[str, dict[str, Any]]]:
        """(node, the status to report) for every node this kubelet keeps alive now."""
        out = [(s.name, node_status(s, self.host_ip, now)) for s in self.nodes]
        with self.lock:
            adopted = list(self.adopted.items())
        out += [(name, adopted_status(name, cap, self.host_ip, now)) for name, cap in adopted]
        return out

    def _beat(self) -> None:
        while not self.stopping.wait(self.heartbeat_s):
            for name, status in self._statuses(datetime.now(UTC)):
                if name in self.dead:  # looked at just before each node: silenced mid-beat
                    continue
                try:
                    self._renew(name, datetime.now(UTC))
                    self.core.patch_node_status(name, {"status": status})
                except Exception as exc:  # the control plane may be restarting: try next beat
                    log.warning("heartbeat of %s: %r", name, exc)

    def adopt(self, node: Mapping[str, Any]) -> None:
        """Keep ``node`` (a Node object someone else created) alive from now on: Ready, its
        lease renewed. Its capacity is what its creator put in ``allocatable`` (Karpenter's
        KWOK provider writes the instance type's there, and only the requests it launched the
        node for in ``capacity``), as a kubelet reports the machine it runs on."""
        name = node["metadata"]["name"]
        status = node.get("status") or {}
        capacity = {**(status.get("capacity") or {}), **(status.get("allocatable") or {})}
        now = datetime.now(UTC)
        self.core.patch_node_status(
            name, {"status": adopted_status(name, capacity, self.host_ip, now)}
        )
        self._renew(name, now)
        with self.lock:
            self.adopted[name] = capacity

    def release(self, name: str) -> None:
        """Stop keeping an adopted node alive (it was deleted: its lease goes with it)."""
        with self.lock:
            self.adopted.pop(name, None)

    def silence(self, name: str) -> None:
        """Stop heartbeating ``name`` (its lease and Ready condition go stale): the node
        lifecycle controller marks it NotReady after its grace period, as for a dead machine."""
        self.dead.add(name)

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=self.heartbeat_s + 10)
        for spec in self.nodes:
            with contextlib.suppress(ApiException):
                self.core.delete_node(spec.name)
            with contextlib.suppress(ApiException):
                self.leases.delete_namespaced_lease(spec.name, LEASE_NAMESPACE)
