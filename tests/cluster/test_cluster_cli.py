"""The ``adl`` CLI's Kubernetes backend on the real API server, as a user with a kubeconfig:
submit (with its pre-flight reads), ls, describe (the operator's Events through a real field
selector), suspend, resume and delete, with the operator of the chart acting on each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_jobs import job_manifest
from controlplane import ControlPlane
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from operator_process import OperatorProcess
from static_node import StaticNodes

from adl.operator.crd import GROUP, PLURAL, VERSION
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def storage_class(admin_api: client.ApiClient) -> Iterator[str]:
    """The storage class the jobs name (pre-flight refuses one the cluster lacks)."""
    storage = client.StorageV1Api(admin_api)
    body = client.V1StorageClass(
        metadata=client.V1ObjectMeta(name="standard"), provisioner="example.com/none"
    )
    storage.create_storage_class(body)
    yield "standard"
    storage.delete_storage_class("standard")


def adl(control_plane: ControlPlane, *args: str, check: bool = True) -> str:
    env = {k: v for k, v in os.environ.items() if k != "ADL_KUBE_URL"}
    env.update(
        KUBECONFIG=str(control_plane.admin_kubeconfig),
        PYTHONPATH=str(ROOT),
        ADL_HOME=str(control_plane.workdir / "adl-home"),
    )
    done = subprocess.run(
        [sys.executable, "-m", "adl.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    if check:
        assert done.returncode == 0, f"adl {' '.join(args)}: {done.stdout}{done.stderr}"
    return done.stdout + done.stderr


def test_cli_runs_a_job_through_its_life(
    operator: OperatorProcess,
    control_plane: ControlPlane,
    admin_api: client.ApiClient,
    namespace: str,
    storage_class: str,
    tmp_path: Path,
) -> None:
    k8s = ("--backend", "k8s", "-n", namespace)
    custom = client.CustomObjectsApi(admin_api)

    def status() -> dict[str, Any]:
        body = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "cli")
        return dict(body.get("status") or {})

    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump(job_manifest("cli", maxReplicas=2)))
    with StaticNodes(admin_api, {f"gpu-{namespace}": 2}):
        # pre-flight reads the cluster: a job bigger than every node is refused before it exists
        too_big = tmp_path / "big.yaml"
        too_big.write_text(yaml.safe_dump(job_manifest("big", gpusPerReplica=4)))
        refused = adl(control_plane, "submit", *k8s, "-f", str(too_big), check=False)
        assert "gpusPerReplica=4 but the largest node has 2 GPUs" in refused
        with pytest.raises(ApiException):
            custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "big")

        adl(control_plane, "submit", *k8s, "-f", str(manifest))
        wait_for(lambda: status().get("group"), timeout=60, what="a group", details=operator.tail)
        listed = json.loads(adl(control_plane, "ls", *k8s, "-o", "json"))
        items = listed["items"] if isinstance(listed, dict) else listed
        assert [j["metadata"]["name"] for j in items] == ["cli"], listed
        described = adl(control_plane, "describe", *k8s, "cli")
        # the operator's Events, found through the API server's field selector on
        # involvedObject (kmock ignores field selectors; the client filters again)
        assert "\nEvents:\n  " in described, described

        adl(control_plane, "suspend", *k8s, "cli")
        wait_for(
            lambda: status().get("phase") == "Suspended",
            timeout=60,
            what="suspended",
            details=operator.tail,
        )
        adl(control_plane, "resume", *k8s, "cli")
        wait_for(
            lambda: status().get("phase") not in (None, "Suspended"),
            timeout=60,
            what="resumed",
            details=operator.tail,
        )
        adl(control_plane, "delete", *k8s, "cli")

        def gone() -> bool:
            try:
                status()
            except ApiException as exc:
                return exc.status == 404
            return False

        wait_for(gone, timeout=60, what="the job deleted", details=operator.tail)
