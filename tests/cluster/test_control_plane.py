"""The harness itself: the pinned control plane is up, authorizes with RBAC, and its controllers
(service accounts, garbage collection, namespace lifecycle) work."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from controlplane import ControlPlane, pinned_versions
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.waiting import wait_for

HERE = Path(__file__).resolve().parent


def test_runs_the_pinned_version(control_plane: ControlPlane) -> None:
    assert control_plane.version == pinned_versions()["K8S_VERSION"]
    assert all(p.alive() for p in control_plane.processes), control_plane.details()


def test_rbac_denies_a_user_without_bindings(control_plane: ControlPlane, namespace: str) -> None:
    nobody = control_plane.api_client(control_plane.client_kubeconfig("nobody"))
    with pytest.raises(ApiException) as err:
        client.CoreV1Api(nobody).list_namespaced_secret(namespace)
    assert err.value.status == 403
    # the same call as the admin (system:masters) is allowed
    client.CoreV1Api(control_plane.api_client()).list_namespaced_secret(namespace)


def test_new_namespace_gets_its_service_account_and_root_ca(
    admin_api: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(admin_api)
    assert core.read_namespaced_service_account("default", namespace).metadata.name == "default"
    # the root-ca-cert-publisher controller (its own service-account credentials) at work
    ca = wait_for(
        lambda: core.read_namespaced_config_map("kube-root-ca.crt", namespace),
        timeout=30,
        what="kube-root-ca.crt",
    )
    assert "BEGIN CERTIFICATE" in ca.data["ca.crt"]


def test_garbage_collector_deletes_dependents(admin_api: client.ApiClient, namespace: str) -> None:
    core = client.CoreV1Api(admin_api)
    owner = core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="owner"))
    )
    ref = client.V1OwnerReference(
        api_version="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid
    )
    meta = client.V1ObjectMeta(name="dependent", owner_references=[ref])
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=meta))
    core.delete_namespaced_config_map("owner", namespace)

    def gone() -> bool:
        try:
            core.read_namespaced_config_map("dependent", namespace)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(gone, timeout=60, what="the garbage collector deleting the dependent")


def test_endpoint_slice_controller_runs(admin_api: client.ApiClient, namespace: str) -> None:
    port = client.V1ServicePort(port=80)
    spec = client.V1ServiceSpec(selector={"app": "x"}, ports=[port])
    client.CoreV1Api(admin_api).create_namespaced_service(
        namespace, client.V1Service(metadata=client.V1ObjectMeta(name="svc"), spec=spec)
    )
    slices = client.DiscoveryV1Api(admin_api)
    wait_for(
        lambda: (
            slices.list_namespaced_endpoint_slice(
                namespace, label_selector="kubernetes.io/service-name=svc"
            ).items
        ),
        timeout=60,
        what="an EndpointSlice for the Service",
    )


CHILD = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from cluster_procs import ManagedProcess
proc = ManagedProcess("sleeper", ["sleep", "600"], Path(sys.argv[2]), die_with_parent=True)
print(proc.pid, flush=True)
sys.stdin.read()  # until the test kills this process
"""


def test_processes_die_with_a_killed_test_run(tmp_path: Path) -> None:
    """A test run killed with -9 (a CI timeout) takes its processes with it."""
    runner = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(HERE), str(tmp_path / "sleeper.log")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert runner.stdout is not None
    pid = int(runner.stdout.readline())
    # setpriv has set the death signal once it has exec'd the command (before, the parent's
    # death goes unnoticed: the one window the mechanism leaves open)
    wait_for(
        lambda: Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep"),
        timeout=30,
        what="the sleeper started",
    )
    runner.kill()
    runner.wait()

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # reaped by init once it exits; a zombie still answers kill(0)
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"

    wait_for(gone, timeout=30, what="the orphaned process gone")
