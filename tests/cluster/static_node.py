"""Nodes that exist only as API objects: Ready, with GPU capacity, and nothing running on them.

Enough for the operator to count a GPU pool and for kube-scheduler to bind pods, which then
stay Pending because no kubelet starts them. A thread renews each node's Lease and Ready
condition, so the node lifecycle controller does not mark it unreachable and taint it during
a test. (The process kubelet of the later scenarios also runs the pods.)
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.waiting import wait_for

LEASE_NAMESPACE = "kube-node-lease"
#: the node lifecycle controller's grace period is 40-50 s; renew well within it
HEARTBEAT_S = 5.0


def _now() -> datetime:
    return datetime.now(UTC)


def _status(gpus: int, gpu_resource: str) -> dict[str, Any]:
    now = _now().isoformat()
    capacity = {"cpu": "8", "memory": "32Gi", "pods": "110", gpu_resource: str(gpus)}
    return {
        "capacity": capacity,
        "allocatable": capacity,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "StaticNode",
                "message": "an API object without a kubelet (adl cluster tests)",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        ],
    }


class StaticNodes:
    """``with StaticNodes(api, {"n1": 4}) as nodes:`` registers the nodes, deletes them after."""

    def __init__(
        self, api: client.ApiClient, gpus: dict[str, int], gpu_resource: str = "nvidia.com/gpu"
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.leases = client.CoordinationV1Api(api)
        self.gpus = dict(gpus)
        self.gpu_resource = gpu_resource
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="static-nodes", daemon=True)

    def __enter__(self) -> StaticNodes:
        for name, gpus in self.gpus.items():
            labels = {"kubernetes.io/hostname": name}
            self.core.create_node(
                client.V1Node(metadata=client.V1ObjectMeta(name=name, labels=labels))
            )
            self.core.patch_node_status(name, {"status": _status(gpus, self.gpu_resource)})
            self._renew_lease(name)
        self._thread.start()
        # A new node carries the not-ready taint (TaintNodesByCondition admission) until the
        # node lifecycle controller sees it Ready: until then no scheduler counts it.
        for name in self.gpus:
            wait_for(
                lambda name=name: not self.core.read_node(name).spec.taints,
                timeout=60,
                what=f"node {name} untainted",
            )
        return self

    def _renew_lease(self, name: str) -> None:
        now = _now()
        spec = client.V1LeaseSpec(holder_identity=name, lease_duration_seconds=40, renew_time=now)
        try:
            self.leases.patch_namespaced_lease(
                name, LEASE_NAMESPACE, {"spec": {"renewTime": now.isoformat()}}
            )
        except ApiException as exc:
            if exc.status != 404:
                raise
            lease = client.V1Lease(metadata=client.V1ObjectMeta(name=name), spec=spec)
            self.leases.create_namespaced_lease(LEASE_NAMESPACE, lease)

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            for name, gpus in self.gpus.items():
                try:
                    self.core.patch_node_status(name, {"status": _status(gpus, self.gpu_resource)})
                    self._renew_lease(name)
                except ApiException:
                    pass  # the next beat tries again; a test that needs the node will say so

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        for name in self.gpus:
            try:
                self.core.delete_node(name)
            except ApiException as err:
                if err.status != 404:
                    raise
