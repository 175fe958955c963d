"""AdaptiveJob manifests and parameters the cluster tests share."""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from operator_process import OperatorProcess
from static_node import StaticNodes

from adl.operator.crd import GROUP, PLURAL, VERSION
from tests.waiting import wait_for

#: the two ways the chart installs the operator (``installed_chart``'s indirect parameters)
SCOPES = ["cluster", "namespaced"]


def job_manifest(name: str, **spec: Any) -> dict[str, Any]:
    """A minimal job (its image is never pulled: no kubelet runs it) with a claim made from a
    storage class, plus ``spec``'s fields."""
    container = {"name": "trainer", "image": "registry.example/t:1", "command": ["python", "t.py"]}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "AdaptiveJob",
        "metadata": {"name": name},
        "spec": {
            "template": {"spec": {"containers": [container]}},
            "checkpoint": {"storageClass": "standard"},
            **spec,
        },
    }


def run_a_job(admin_api: client.ApiClient, namespace: str, operator: OperatorProcess) -> None:
    """A job's whole life on the real API server: its objects, a suspension (the operator
    deletes its pods), a resumption (a second group beside the objects of the first), and its
    deletion."""
    core = client.CoreV1Api(admin_api)
    custom = client.CustomObjectsApi(admin_api)

    def pods() -> list[str]:
        items = core.list_namespaced_pod(namespace, label_selector="adl.dev/job=rbac").items
        return [p.metadata.name for p in items if not p.metadata.deletion_timestamp]

    def phase() -> str | None:
        body = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "rbac")
        return (body.get("status") or {}).get("phase")

    with StaticNodes(admin_api, {f"gpu-{namespace}": 2}):
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, job_manifest("rbac", maxReplicas=2)
        )
        wait_for(pods, timeout=60, what="the job's pods", details=operator.tail)
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, "rbac", {"spec": {"suspend": True}}
        )
        wait_for(
            lambda: phase() == "Suspended" and not pods(),
            timeout=60,
            what="suspended, pods deleted",
            details=operator.tail,
        )
        custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, "rbac", {"spec": {"suspend": False}}
        )
        wait_for(pods, timeout=60, what="the job's pods after resuming", details=operator.tail)
        custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "rbac")

        def gone() -> bool:
            try:
                phase()
            except ApiException as exc:
                return exc.status == 404
            return False

        wait_for(gone, timeout=60, what="the job deleted", details=operator.tail)


def bound_claim(api: client.ApiClient, namespace: str, name: str) -> str:
    """A PersistentVolumeClaim bound (by the real PV controller) to a hostPath volume made for
    it: a checkpoint claim the scheduler can place a pod with."""
    core = client.CoreV1Api(api)
    volume = f"{namespace}-{name}"[:63]
    core.create_persistent_volume(
        client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name=volume),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": "10Gi"},
                access_modes=["ReadWriteMany"],
                host_path=client.V1HostPathVolumeSource(path=f"/tmp/adl-cluster-tests/{volume}"),
                storage_class_name="",
                claim_ref=client.V1ObjectReference(namespace=namespace, name=name),
            ),
        )
    )
    claim_spec = client.V1PersistentVolumeClaimSpec(
        access_modes=["ReadWriteMany"],
        resources=client.V1VolumeResourceRequirements(requests={"storage": "10Gi"}),
        storage_class_name="",
        volume_name=volume,
    )
    core.create_namespaced_persistent_volume_claim(
        namespace,
        client.V1PersistentVolumeClaim(metadata=client.V1ObjectMeta(name=name), spec=claim_spec),
    )
    wait_for(
        lambda: (
            core.read_namespaced_persistent_volume_claim(name, namespace).status.phase == "Bound"
        ),
        timeout=60,
        what=f"claim {name} bound",
    )
    return name
