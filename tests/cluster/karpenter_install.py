"""Karpenter installed for real: the KWOK cloud provider's controller (``build_assets.sh
karpenter`` builds it from the module version pinned in ``versions.env`` and keeps that
version's CRDs beside it) run as a local process against the test API server.

The KWOK provider is Karpenter's own test provider: it launches an "instance" by creating the
Node object itself (there is no cloud and no kubelet), labelled ``kwok.x-k8s.io/node=fake``,
for instance types it reads from a JSON file (``INSTANCE_TYPES_FILE_PATH``), each with
offerings (capacity type, zone, price). Everything else is Karpenter's unchanged core:
provisioning from pending pods, NodeClaim registration and initialization, consolidation and
disruption. The process kubelet adopts its nodes (``ProcessKubelet(adopt=KWOK_NODES)``), so
pods bound to them really run.

What ``helm install`` of the KWOK chart would add and is left out here: the Deployment (the
controller is this process instead), its RBAC (it runs as the cluster admin), its Service and
PodDisruptionBudget. Its configuration is the chart's env (``METRICS_PORT``,
``HEALTH_PROBE_PORT``, ...) with leader election off (one controller) and its ports free ones.
Karpenter's core has no cluster-name setting (that is a cloud provider's), and the KWOK provider
has no webhooks.
"""

from __future__ import annotations

import contextlib
import json
import os
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from chart_install import apply
from cluster_procs import ManagedProcess, free_port
from controlplane import ControlPlane
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.waiting import wait_for

KARPENTER = ("karpenter.sh", "v1")
KWOK = ("karpenter.kwok.sh", "v1alpha1")
#: the label (and annotation) the KWOK provider puts on every Node it creates
KWOK_NODE_LABEL = "kwok.x-k8s.io/node"
#: the selector of those Nodes, the ones the process kubelet adopts
KWOK_NODES = f"{KWOK_NODE_LABEL}=fake"
CAPACITY_TYPE = "karpenter.sh/capacity-type"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
ZONE = "test-zone-a"
NODE_CLASS = "adl-kwok"
GPU = "nvidia.com/gpu"
#: how long the controller may take to sync its caches and serve /readyz (2 busy cores)
READY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class GpuInstanceType:
    """One instance type of the fake cloud: its shape and its hourly prices in ``ZONE``."""

    name: str
    gpus: int
    cpu: int
    memory_gi: int
    on_demand: float
    spot: float


#: 1-, 4- and 8-GPU shapes; spot at ~30 % of on-demand (prices per hour, A100-class)
GPU_INSTANCE_TYPES = (
    GpuInstanceType("gpu-1x", gpus=1, cpu=12, memory_gi=85, on_demand=3.67, spot=1.10),
    GpuInstanceType("gpu-4x", gpus=4, cpu=48, memory_gi=340, on_demand=14.69, spot=4.41),
    GpuInstanceType("gpu-8x", gpus=8, cpu=96, memory_gi=680, on_demand=29.39, spot=8.82),
)


def instance_types_json(types: Sequence[GpuInstanceType]) -> list[dict[str, Any]]:
    """The KWOK provider's instance-types file (``kwok/cloudprovider/helpers.go``
    ``InstanceTypeOptions``): ``resources`` is a core ResourceList, so an extended resource
    such as ``nvidia.com/gpu`` is capacity like cpu; each offering is a price and the
    requirements that pick it (capacity type and zone), all available. (The shape of the
    module's ``kwok/examples/instance_types.json``, with ``capacityType`` and ``zone`` keys,
    is not what the parser reads: those keys would be ignored, leaving offerings that no
    requirement picks.)"""

    def offering(capacity_type: str, price: float) -> dict[str, Any]:
        return {
            "Price": price,
            "Available": True,
            "Requirements": [
                {"key": CAPACITY_TYPE, "operator": "In", "values": [capacity_type]},
                {"key": ZONE_LABEL, "operator": "In", "values": [ZONE]},
            ],
        }

    return [
        {
            "name": t.name,
            "offerings": [offering("spot", t.spot), offering("on-demand", t.on_demand)],
            "architecture": "amd64",
            "operatingSystems": ["linux"],
            "resources": {
                "cpu": str(t.cpu),
                "memory": f"{t.memory_gi}Gi",
                "pods": "110",
                "ephemeral-storage": "100Gi",
                GPU: str(t.gpus),
            },
        }
        for t in types
    ]


def node_pool(
    name: str,
    *,
    capacity_types: Sequence[str] = ("spot", "on-demand"),
    instance_types: Sequence[str] = tuple(t.name for t in GPU_INSTANCE_TYPES),
    taints: Sequence[dict[str, str]] = (),
    consolidate_after: str = "5s",
    gpu_limit: int = 64,
) -> dict[str, Any]:
    """A NodePool of GPU instance types on the KWOK node class. Its nodes carry
    ``karpenter.sh/nodepool=<name>``, so a pod that selects that label runs on them only;
    consolidation may remove any of them once empty or underused for ``consolidate_after``."""
    return {
        "apiVersion": "/".join(KARPENTER),
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "spec": {
                    "nodeClassRef": {"group": KWOK[0], "kind": "KWOKNodeClass", "name": NODE_CLASS},
                    "requirements": [
                        {"key": CAPACITY_TYPE, "operator": "In", "values": list(capacity_types)},
                        {"key": INSTANCE_TYPE, "operator": "In", "values": list(instance_types)},
                    ],
                    "taints": list(taints),
                    "expireAfter": "Never",
                }
            },
            "disruption": {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": consolidate_after,
                # the default budget is 10 % of the pool's nodes: every node may go at once here
                "budgets": [{"nodes": "100%"}],
            },
            "limits": {GPU: str(gpu_limit)},
        },
    }


def crds(assets: Path) -> list[dict[str, Any]]:
    """The CRDs ``build_assets.sh karpenter`` copied beside the binary."""
    docs: list[dict[str, Any]] = []
    for path in sorted((assets / "crds").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def _apply_crds(api: client.ApiClient, assets: Path) -> None:
    ext = client.ApiextensionsV1Api(api)
    for crd in crds(assets):
        apply(api, crd)

    def established() -> bool:
        for crd in crds(assets):
            status = ext.read_custom_resource_definition(crd["metadata"]["name"]).status
            if not any(c.type == "Established" and c.status == "True" for c in status.conditions):
                return False
        return True

    wait_for(established, timeout=30, what="Karpenter's CRDs established")


@dataclass
class Karpenter:
    """A running Karpenter (KWOK provider): its process and the instance types it offers."""

    process: ManagedProcess
    health_port: int
    instance_types: tuple[GpuInstanceType, ...]

    def tail(self, lines: int = 60) -> str:
        return self.process.tail(lines)

    def ready(self) -> bool:
        url = f"http://127.0.0.1:{self.health_port}/readyz"
        with urllib.request.urlopen(url, timeout=2) as resp:
            return int(resp.status) == 200

    def stop(self) -> None:
        self.process.stop(grace_s=10.0)


def start_karpenter(
    plane: ControlPlane,
    api: client.ApiClient,
    assets: Path,
    workdir: Path,
    instance_types: Sequence[GpuInstanceType] = GPU_INSTANCE_TYPES,
) -> Karpenter:
    """Apply the CRDs and the KWOKNodeClass, start the controller, and return once it is ready
    (its caches synced and its CRDs mapped: ``/readyz``)."""
    workdir.mkdir(parents=True, exist_ok=True)
    _apply_crds(api, assets)
    # its status defaults to Ready (the CRD's default): there is no controller for it
    apply(
        api,
        {
            "apiVersion": "/".join(KWOK),
            "kind": "KWOKNodeClass",
            "metadata": {"name": NODE_CLASS},
            "spec": {},
        },
    )
    types_file = workdir / "instance_types.json"
    types_file.write_text(json.dumps(instance_types_json(instance_types), indent=2))
    health_port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env.update(
        KUBECONFIG=str(plane.admin_kubeconfig),
        DISABLE_LEADER_ELECTION="true",
        METRICS_PORT=str(free_port()),
        HEALTH_PROBE_PORT=str(health_port),
        INSTANCE_TYPES_FILE_PATH=str(types_file),
        LOG_LEVEL="debug",
        # a provisioning batch closes 1 s after the last new pending pod (the default), and
        # at most 3 s after the first (default 10 s): tests wait less, nothing else changes
        BATCH_IDLE_DURATION="1s",
        BATCH_MAX_DURATION="3s",
        CPU_REQUESTS="2000",  # its workers scale with the CPUs it is given: this machine's
    )
    process = ManagedProcess(
        "karpenter",
        [str(assets / "karpenter")],
        workdir / "karpenter.log",
        env=env,
        die_with_parent=True,
    )
    running = Karpenter(process, health_port, tuple(instance_types))
    wait_for(
        running.ready,
        timeout=READY_TIMEOUT_S,
        what="Karpenter ready (/readyz)",
        details=running.tail,
        give_up=lambda: None if process.alive() else "the karpenter process exited",
    )
    return running


def delete_node_pools(api: client.ApiClient, karpenter: Karpenter, timeout: float = 90.0) -> None:
    """Delete every NodePool and wait, with Karpenter still running, until its NodeClaims and
    Nodes are gone (their finalizers are Karpenter's: it drains and terminates them)."""
    custom = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    for pool in custom.list_cluster_custom_object(*KARPENTER, "nodepools")["items"]:
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object(*KARPENTER, "nodepools", pool["metadata"]["name"])

    def gone() -> bool:
        claims = custom.list_cluster_custom_object(*KARPENTER, "nodeclaims")["items"]
        return not claims and not core.list_node(label_selector=KWOK_NODES).items

    wait_for(
        gone,
        timeout=timeout,
        what="Karpenter's NodeClaims and Nodes removed with their NodePools",
        details=karpenter.tail,
    )
