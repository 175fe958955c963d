"""A real autoscaler on the real control plane: Karpenter (KWOK cloud provider, built from the
module pinned in ``versions.env``) provisions a GPU node for a pending pod, the process kubelet
adopts the node and runs the pod on it, and once the pod is gone Karpenter's consolidation
removes the empty node. Each stage's duration is printed (``-rP`` shows it)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_procs import wait_for
from karpenter_install import (
    CAPACITY_TYPE,
    GPU,
    INSTANCE_TYPE,
    KARPENTER,
    KWOK_NODES,
    NODEPOOL_LABEL,
    ZONE,
    ZONE_LABEL,
    Karpenter,
    node_pool,
)
from kubelet import ProcessKubelet
from kubelet_net import available
from kubelet_nodes import NodeSpec
from kubernetes import client
from kubernetes.client.exceptions import ApiException

#: a GKE-style GPU pool taint: only pods that tolerate it run on the pool's nodes
GPU_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}
#: how long Karpenter may take to launch a node and the kubelet to run the pod on it, and
#: how long consolidation may take to remove it (2 busy cores; each is seconds when idle)
PROVISION_TIMEOUT_S = 120.0
CONSOLIDATE_TIMEOUT_S = 120.0
#: the pod: says where it runs, then waits to be stopped
POD_SCRIPT = (
    "import os, time; print('running on', os.environ['NODE_NAME'], flush=True); time.sleep(3600)"
)


@pytest.fixture
def kubelet(admin_api: client.ApiClient, tmp_path: Path) -> Iterator[ProcessKubelet]:
    """One static 1-GPU node of its own, and every node Karpenter's KWOK provider creates."""
    if not available():
        pytest.fail("the process kubelet needs root and network namespaces (ip netns)")
    static = [NodeSpec(f"static-{uuid.uuid4().hex[:4]}", 1)]
    with ProcessKubelet(admin_api, static, tmp_path / "kubelet", adopt=KWOK_NODES) as kl:
        yield kl


def gpu_pod(name: str, namespace: str, pool: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeSelector": {NODEPOOL_LABEL: pool},
            "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
            "terminationGracePeriodSeconds": 5,
            "containers": [
                {
                    "name": "main",
                    "image": "adl-process-kubelet",
                    "command": ["python", "-c", POD_SCRIPT],
                    "env": [
                        {
                            "name": "NODE_NAME",
                            "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                        }
                    ],
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi", GPU: str(gpus)},
                        "limits": {GPU: str(gpus)},
                    },
                }
            ],
        },
    }


def _claims(custom: client.CustomObjectsApi, pool: str) -> list[dict[str, Any]]:
    return list(
        custom.list_cluster_custom_object(
            *KARPENTER, "nodeclaims", label_selector=f"{NODEPOOL_LABEL}={pool}"
        )["items"]
    )


def _condition(obj: dict[str, Any], kind: str) -> str | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == kind:
            return str(cond["status"])
    return None


def test_karpenter_provisions_a_spot_gpu_node_the_kubelet_runs_the_pod_and_consolidation_removes_it(
    karpenter: Karpenter, kubelet: ProcessKubelet, admin_api: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(admin_api)
    custom = client.CustomObjectsApi(admin_api)
    pool = f"gpu-{namespace}"[:63]
    static = next(iter(kubelet.node_names))
    stages: dict[str, float] = {}
    consolidated_s: float | None = None
    custom.create_cluster_custom_object(
        *KARPENTER, "nodepools", node_pool(pool, taints=[GPU_TAINT], consolidate_after="5s")
    )
    try:
        t0 = time.monotonic()

        def stage(name: str) -> None:
            stages[name] = time.monotonic() - t0

        core.create_namespaced_pod(namespace, gpu_pod("gpu-4", namespace, pool, 4))

        # Karpenter sees the pod unschedulable and launches a NodeClaim for it
        claim = wait_for(
            lambda: next(iter(_claims(custom, pool)), None),
            timeout=PROVISION_TIMEOUT_S,
            what=f"a NodeClaim of NodePool {pool}",
            details=karpenter.tail,
        )
        stage("NodeClaim created")

        # the KWOK provider creates the Node: the cheapest offering that fits 4 GPUs
        node = wait_for(
            lambda: next(
                iter(core.list_node(label_selector=f"{NODEPOOL_LABEL}={pool}").items), None
            ),
            timeout=PROVISION_TIMEOUT_S,
            what="the NodeClaim's Node",
            details=karpenter.tail,
        )
        stage("Node created")
        name = node.metadata.name
        labels = node.metadata.labels
        assert labels[INSTANCE_TYPE] == "gpu-4x", labels  # not gpu-8x: it costs more
        assert labels[CAPACITY_TYPE] == "spot", labels  # spot is cheaper than on-demand
        assert labels[ZONE_LABEL] == ZONE
        assert node.status.allocatable[GPU] == "4"
        assert node.spec.provider_id == f"kwok://{name}"

        # Karpenter registers and initializes it once the kubelet has adopted it (Ready)
        def initialized() -> dict[str, Any] | None:
            claims = _claims(custom, pool)
            return claims[0] if claims and _condition(claims[0], "Initialized") == "True" else None

        claim = wait_for(
            initialized,
            timeout=PROVISION_TIMEOUT_S,
            what=f"NodeClaim {claim['metadata']['name']} initialized",
            details=lambda: f"{_claims(custom, pool)}\n{karpenter.tail()}",
        )
        stage("NodeClaim initialized (node adopted, Ready)")
        assert name in kubelet.adopted
        assert claim["status"]["nodeName"] == name
        assert _condition(claim, "Registered") == "True"

        # kube-scheduler binds the pod there and the process kubelet runs it
        def running() -> client.V1Pod | None:
            pod = core.read_namespaced_pod("gpu-4", namespace)
            return pod if pod.status.phase == "Running" else None

        pod = wait_for(
            running,
            timeout=PROVISION_TIMEOUT_S,
            what="pod gpu-4 running",
            details=lambda: f"{core.read_namespaced_pod('gpu-4', namespace).status}",
        )
        stage("pod Running")
        assert pod.spec.node_name == name
        assert any(r.name == "gpu-4" and r.proc is not None for r in kubelet.runs.values())
        wait_for(
            lambda: f"running on {name}" in kubelet.log(namespace, "gpu-4"),
            timeout=30,
            what="the pod's own output",
        )
        node = core.read_node(name)
        taints = {t.key for t in node.spec.taints or []}
        assert "karpenter.sh/unregistered" not in taints and GPU in taints, taints

        # the pod goes; consolidation finds the node empty and removes it (NodeClaim too)
        t_delete = time.monotonic()
        core.delete_namespaced_pod("gpu-4", namespace)

        def pod_gone() -> bool:
            try:
                core.read_namespaced_pod("gpu-4", namespace)
            except ApiException as exc:
                return exc.status == 404
            return False

        wait_for(pod_gone, timeout=30, what="pod gpu-4 deleted")
        stage("pod deleted")

        def node_gone() -> bool:
            return (
                not _claims(custom, pool)
                and not core.list_node(label_selector=f"{NODEPOOL_LABEL}={pool}").items
            )

        wait_for(
            node_gone,
            timeout=CONSOLIDATE_TIMEOUT_S,
            what=f"node {name} consolidated away",
            details=karpenter.tail,
        )
        stage("empty node removed")
        consolidated_s = time.monotonic() - t_delete
        wait_for(lambda: name not in kubelet.adopted, timeout=30, what="the kubelet lets go")
        reasons = {
            (e.reason, e.message)
            for e in core.list_event_for_all_namespaces(
                field_selector=f"involvedObject.name={name}"
            ).items
        }
        assert ("DisruptionTerminating", "Disrupting Node: Empty") in reasons, reasons

        # the kubelet's own node was never Karpenter's: untouched, still Ready and running
        mine = core.read_node(static)
        assert not any(k.startswith("karpenter.sh/") for k in mine.metadata.labels), mine
        assert not mine.spec.taints, mine.spec.taints
        assert static in kubelet.node_names
    finally:
        print(f"Karpenter stages (s since the pod was created): {stages}")
        if consolidated_s is not None:
            print(f"pod deletion to node removed: {consolidated_s:.1f} s")
        custom.delete_cluster_custom_object(*KARPENTER, "nodepools", pool)
