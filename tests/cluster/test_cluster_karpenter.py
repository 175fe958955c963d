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

from tests.waiting import wait_for

#: a GKE-style GPU pool taint: only pods that tolerate it run on the pool's nodes
GPU_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}
#: how long Karpenter may take to launch a node and the kubelet to run the pod on it, and
#: how long consolidation may take to remove it (2 busy cores; each is seconds when idle)
PROVISION_TIMEOUT_S = 120.0
CONSOLIDATE_TIMEOUT_S = 120.0
#: the pod: says where it runs, then waits to be stopped
POD_SCRIPT = (
    "import os, signal; print('running on', os.environ['NODE_NAME'], flush=True); signal.pause()"
)
#: a pod that, told to stop (SIGTERM), says so and takes 2 s to finish (a checkpoint's save)
GRACEFUL_SCRIPT = """
import os, signal, sys, time
def stop(*_):
    print("SIGTERM at", time.time(), flush=True)
    time.sleep(2)  # allowed: the save the graceful stop must be given time for
    print("saved", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("running on", os.environ["NODE_NAME"], flush=True)
while True:
    signal.pause()
"""
DISRUPTED = "karpenter.sh/disrupted"


@pytest.fixture
def kubelet(admin_api: client.ApiClient, tmp_path: Path) -> Iterator[ProcessKubelet]:
    """One static 1-GPU node of its own, and every node Karpenter's KWOK provider creates."""
    if not available():
        pytest.fail("the process kubelet needs root and network namespaces (ip netns)")
    static = [NodeSpec(f"static-{uuid.uuid4().hex[:4]}", 1)]
    with ProcessKubelet(admin_api, static, tmp_path / "kubelet", adopt=KWOK_NODES) as kl:
        yield kl


def gpu_pod(
    name: str, namespace: str, pool: str, gpus: int, script: str = POD_SCRIPT
) -> dict[str, Any]:
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
                    "command": ["python", "-c", script],
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


def _pool_node(core: client.CoreV1Api, pool: str) -> client.V1Node | None:
    return next(iter(core.list_node(label_selector=f"{NODEPOOL_LABEL}={pool}").items), None)


def _pod_gone(core: client.CoreV1Api, namespace: str, name: str) -> bool:
    try:
        core.read_namespaced_pod(name, namespace)
    except ApiException as exc:
        return exc.status == 404
    return False


def _events(core: client.CoreV1Api, involved: str) -> set[tuple[str, str]]:
    """(reason, message) of the Events about objects named ``involved``, in any namespace."""
    items = core.list_event_for_all_namespaces(
        field_selector=f"involvedObject.name={involved}"
    ).items
    return {(e.reason, e.message) for e in items}


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
    (static,) = kubelet.static_names
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
            lambda: _pool_node(core, pool),
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

        wait_for(lambda: _pod_gone(core, namespace, "gpu-4"), timeout=30, what="gpu-4 deleted")
        stage("pod deleted")

        wait_for(
            lambda: _pool_node(core, pool) is None and not _claims(custom, pool),
            timeout=CONSOLIDATE_TIMEOUT_S,
            what=f"node {name} consolidated away",
            details=karpenter.tail,
        )
        stage("empty node removed")
        consolidated_s = time.monotonic() - t_delete
        wait_for(lambda: name not in kubelet.adopted, timeout=30, what="the kubelet lets go")
        # Karpenter's events are sent in the background: waited for, not read once
        wait_for(
            lambda: ("DisruptionTerminating", "Disrupting Node: Empty") in _events(core, name),
            timeout=30,
            what=f"Karpenter's event: node {name} disrupted as empty",
            details=lambda: str(_events(core, name)),
        )

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


def test_a_deleted_nodeclaim_taints_its_node_and_evicts_its_pod_which_the_kubelet_stops_gracefully(
    karpenter: Karpenter, kubelet: ProcessKubelet, admin_api: client.ApiClient, namespace: str
) -> None:
    """What a spot interruption does in Karpenter (its interruption controller deletes the
    NodeClaim): the node is tainted ``karpenter.sh/disrupted:NoSchedule``, its pods are evicted
    through the Eviction API, the kubelet gives each SIGTERM and its grace period, and the node
    goes once empty. Prints each stage's time from the NodeClaim's deletion."""
    core = client.CoreV1Api(admin_api)
    custom = client.CustomObjectsApi(admin_api)
    pool = f"spot-{namespace}"[:63]
    stages: dict[str, float] = {}
    # consolidation out of the way: only the deletion below disrupts the node
    body = node_pool(pool, taints=[GPU_TAINT], consolidate_after="Never")
    custom.create_cluster_custom_object(*KARPENTER, "nodepools", body)
    try:
        pod_body = gpu_pod("trainer", namespace, pool, 1, script=GRACEFUL_SCRIPT)
        pod_body["spec"]["terminationGracePeriodSeconds"] = 30
        core.create_namespaced_pod(namespace, pod_body)
        wait_for(
            lambda: "running on " in kubelet.log(namespace, "trainer"),
            timeout=PROVISION_TIMEOUT_S,
            what="pod trainer running on a node Karpenter launched",
            details=karpenter.tail,
        )
        node = _pool_node(core, pool)
        assert node is not None
        name = node.metadata.name
        assert node.metadata.labels[INSTANCE_TYPE] == "gpu-1x"
        assert core.read_namespaced_pod("trainer", namespace).spec.node_name == name
        (claim,) = _claims(custom, pool)

        t0 = time.monotonic()
        custom.delete_cluster_custom_object(*KARPENTER, "nodeclaims", claim["metadata"]["name"])

        def tainted() -> bool:
            found = _pool_node(core, pool)
            taints = (found.spec.taints or []) if found else []
            return any(t.key == DISRUPTED and t.effect == "NoSchedule" for t in taints)

        wait_for(tainted, timeout=60, what=f"{DISRUPTED} on {name}", details=karpenter.tail)
        stages["node tainted"] = time.monotonic() - t0
        wait_for(
            lambda: "SIGTERM at" in kubelet.log(namespace, "trainer"),
            timeout=60,
            what="the pod told to stop",
            details=karpenter.tail,
        )
        stages["pod got SIGTERM"] = time.monotonic() - t0
        wait_for(lambda: _pod_gone(core, namespace, "trainer"), timeout=60, what="pod gone")
        stages["pod gone"] = time.monotonic() - t0
        wait_for(
            lambda: _pool_node(core, pool) is None and not _claims(custom, pool),
            timeout=60,
            what=f"node {name} and its NodeClaim removed",
            details=karpenter.tail,
        )
        stages["node removed"] = time.monotonic() - t0
        wait_for(lambda: name not in kubelet.adopted, timeout=30, what="the kubelet lets go")

        out = kubelet.log(namespace, "trainer")
        assert "saved" in out, out  # its grace period was honoured: it finished its save
        wait_for(
            lambda: any(reason == "Evicted" for reason, _ in _events(core, "trainer")),
            timeout=30,
            what="Karpenter's event: pod trainer evicted",
            details=lambda: str(_events(core, "trainer")),
        )
    finally:
        print(f"disruption stages (s since the NodeClaim's deletion): {stages}")
        custom.delete_cluster_custom_object(*KARPENTER, "nodepools", pool)
