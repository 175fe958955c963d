"""The process kubelet adopting a Node someone else created (as Karpenter's KWOK provider
does), on the real control plane and without Karpenter: the node becomes Ready with its
creator's allocatable as capacity and a lease, a pod bound to it runs, and deleting the Node
kills that pod's process and releases the node."""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path

import pytest
from kubelet import ProcessKubelet
from kubelet_net import available
from kubelet_nodes import GPU, LEASE_NAMESPACE, NOT_READY
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.waiting import wait_for

SCRIPT = "import signal; print('running', flush=True); signal.pause()"


def test_an_adopted_node_is_kept_ready_runs_its_pods_and_is_released_when_deleted(
    admin_api: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    if not available():
        pytest.fail("the process kubelet needs root and network namespaces (ip netns)")
    core = client.CoreV1Api(admin_api)
    leases = client.CoordinationV1Api(admin_api)
    tag = uuid.uuid4().hex[:6]
    name = f"adopted-{tag}"
    selector = f"adl.dev/adopt-test={tag}"
    # as the KWOK provider writes it: capacity holds only what the node was launched for,
    # allocatable the whole machine
    allocatable = {"cpu": "8", "memory": "32Gi", "pods": "110", GPU: "2"}
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"adl.dev/adopt-test": tag}},
        "spec": {"providerID": f"test://{name}"},
        "status": {"capacity": {GPU: "1", "pods": "1"}, "allocatable": allocatable},
    }
    with ProcessKubelet(admin_api, [], tmp_path / "kubelet", adopt=selector) as kubelet:
        core.create_node(node)
        try:

            def ready() -> client.V1Node | None:
                got = core.read_node(name)
                conditions = {c.type: c.status for c in got.status.conditions or []}
                taints = {t.key for t in got.spec.taints or []}
                untainted = NOT_READY not in taints
                return got if conditions.get("Ready") == "True" and untainted else None

            got = wait_for(ready, timeout=60, what=f"node {name} adopted and untainted")
            assert got.status.capacity == allocatable
            assert got.status.allocatable == allocatable
            lease = leases.read_namespaced_lease(name, LEASE_NAMESPACE)
            assert lease.spec.holder_identity == name
            assert name in kubelet.adopted and name in kubelet.node_names

            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "on-adopted", "namespace": namespace},
                "spec": {
                    "nodeName": name,  # bound directly: the kubelet's part only
                    "containers": [
                        {"name": "main", "image": "x", "command": ["python", "-c", SCRIPT]}
                    ],
                },
            }
            core.create_namespaced_pod(namespace, pod)
            wait_for(
                lambda: "running" in kubelet.log(namespace, "on-adopted"),
                timeout=60,
                what="the pod running on the adopted node",
            )
            (run,) = [r for r in kubelet.runs.values() if r.name == "on-adopted"]
            assert run.proc is not None and run.proc.poll() is None
            assert core.read_namespaced_pod("on-adopted", namespace).status.phase == "Running"

            core.delete_node(name)
            wait_for(lambda: name not in kubelet.adopted, timeout=30, what="the node released")
            assert name not in kubelet.node_names
            # the machine is gone: its pod's process with it
            proc = run.proc
            wait_for(lambda: proc.poll() is not None, timeout=30, what="the pod's process ended")
            assert not any(r.name == "on-adopted" for r in kubelet.runs.values())
        finally:
            with contextlib.suppress(ApiException):  # gone already when the test got there
                core.delete_node(name)
