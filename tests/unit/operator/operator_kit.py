"""An API server in memory for driving the operator's handlers into what kmock does not
produce: resourceVersion conflicts, refused creates, a deleted job's leftovers."""

from __future__ import annotations

import copy
from typing import Any

from adl.operator.store import Conflict

TEMPLATE = {"spec": {"containers": [{"name": "t", "image": "i", "command": ["x"]}]}}


class MemoryCluster:
    """One AdaptiveJob ``ns/j`` and the objects the operator makes for it, by (kind, name).
    Writes bump resourceVersion; a status write carrying an old one is a conflict."""

    def __init__(self, allocation: str = '["n1"]', uid: str = "u", **spec: Any) -> None:
        self.job: dict[str, Any] = {
            "metadata": {
                "name": "j",
                "namespace": "ns",
                "uid": uid,
                "resourceVersion": "1",
                "annotations": {"adl.dev/allocation": allocation},
            },
            "spec": {"template": copy.deepcopy(TEMPLATE), **spec},
            "status": {},
        }
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        #: Node objects by name (none: every node the job names is up and staying)
        self.nodes: dict[str, dict[str, Any]] = {}

    @property
    def pods(self) -> list[dict[str, Any]]:
        return [o for (kind, _), o in self.objects.items() if kind == "Pod"]

    def _bump(self) -> None:
        rv = int(self.job["metadata"]["resourceVersion"]) + 1
        self.job["metadata"]["resourceVersion"] = str(rv)

    def get_job(self, namespace: str, name: str) -> dict[str, Any]:
        return copy.deepcopy(self.job)

    def patch_job_status(
        self, namespace: str, name: str, status: dict[str, Any], resource_version: str | None
    ) -> None:
        if resource_version and resource_version != self.job["metadata"]["resourceVersion"]:
            raise Conflict("stale")
        self.job["status"].update(copy.deepcopy(status))
        self._bump()

    def patch_job_annotations(self, namespace: str, name: str, ann: dict[str, Any]) -> None:
        self.job["metadata"]["annotations"].update(ann)
        self._bump()

    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        return copy.deepcopy(self.pods)

    def create(self, obj: dict[str, Any]) -> bool:
        key = (obj["kind"], obj["metadata"]["name"])
        if key in self.objects:
            return False
        self.objects[key] = copy.deepcopy(obj)
        return True

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        obj = self.objects.get((kind, name))
        return copy.deepcopy(obj) if obj is not None else None

    def get_service(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get("Service", name)

    def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get("Secret", name)

    def get_pvc(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.get("PersistentVolumeClaim", name)

    def delete_pod(self, namespace: str, name: str, grace_s: int) -> None:
        self.objects.pop(("Pod", name), None)

    def get_node(self, name: str) -> dict[str, Any] | None:
        """A Node the reconcile reads (is it down, is it going away?): the ones in ``nodes``."""
        node = self.nodes.get(name)
        return copy.deepcopy(node) if node is not None else None
