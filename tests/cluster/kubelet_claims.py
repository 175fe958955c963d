"""A volume provisioner for the process kubelet: every PersistentVolumeClaim that waits for a
volume gets a PersistentVolume backed by a local directory (hostPath), pre-bound to it through
``claimRef`` so that kube-controller-manager's volume binder completes the binding, as with any
dynamic provisioner. Without one, kube-scheduler never places a pod whose claim is unbound.

The directory is the claim's (``<root>/<claim uid>``): every pod that mounts the claim, in any
group, sees the same files, so a resized job finds its checkpoint; a new claim of the same name
is a new directory. When the claim is deleted, the volume and its directory go too (what a
``Delete`` reclaim policy does; the volume is marked ``Retain`` so that the binder does not
look for a deleter plugin that hostPath lacks).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
from pathlib import Path
from typing import Any

from kubelet_watch import Informer
from kubernetes import client
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("adl.tests.claims")

PROVISIONER = "adl.dev/process-kubelet"


def volume_name(claim_uid: str) -> str:
    return f"pvc-{claim_uid}"


def volume_for(claim: dict[str, Any], path: Path) -> dict[str, Any]:
    """The PersistentVolume that satisfies ``claim`` from ``path`` (pure)."""
    meta, spec = claim["metadata"], claim.get("spec") or {}
    size = ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": volume_name(meta["uid"]),
            "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER},
        },
        "spec": {
            "capacity": {"storage": size},
            "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
            "storageClassName": spec.get("storageClassName") or "",
            "persistentVolumeReclaimPolicy": "Retain",
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "hostPath": {"path": str(path), "type": "DirectoryOrCreate"},
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
        },
    }


class ClaimProvisioner:
    """Watches claims in every namespace; makes and removes their local volumes."""

    def __init__(self, api: client.ApiClient, root: Path) -> None:
        self.core = client.CoreV1Api(api)
        self.root = root
        self.lock = threading.Lock()
        self.informer = Informer(
            self.core.list_persistent_volume_claim_for_all_namespaces,
            self._on_event,
            name="claim-provisioner",
        )

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.informer.start()

    def stop(self) -> None:
        self.informer.stop()

    def path_of(self, claim_uid: str) -> Path:
        return self.root / claim_uid

    def _on_event(self, kind: str, claim: dict[str, Any]) -> None:
        uid = claim["metadata"]["uid"]
        if kind == "DELETED":
            self._release(uid)
            return
        spec, status = claim.get("spec") or {}, claim.get("status") or {}
        if spec.get("volumeName") or status.get("phase") != "Pending":
            return
        if claim["metadata"].get("deletionTimestamp"):
            return
        path = self.path_of(uid)
        path.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(ApiException):  # 409: made on an earlier event
            self.core.create_persistent_volume(volume_for(claim, path))

    def _release(self, uid: str) -> None:
        try:
            self.core.delete_persistent_volume(volume_name(uid))
        except ApiException as exc:
            if exc.status != 404:
                log.warning("cannot delete volume of claim %s: %s", uid, exc.reason)
        shutil.rmtree(self.path_of(uid), ignore_errors=True)
