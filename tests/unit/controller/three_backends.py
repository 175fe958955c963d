"""A stand-in for the KubeStore client calls a scheduling round makes: AdaptiveJob objects and
one node kept in memory (the controller tests' shared double for the Kubernetes API)."""

import copy
from collections.abc import Mapping
from typing import Any


class KubeObjects:
    """The KubeStore calls the round makes, over AdaptiveJob objects kept in memory."""

    def __init__(
        self, jobs: Mapping[str, tuple[dict[str, Any], dict[str, Any]]], gpus: int
    ) -> None:
        """``jobs``: ``ns/name`` -> (spec, status) as the API serves them; one node ``n1``."""
        self.gpus = gpus
        self.jobs: dict[str, dict[str, Any]] = {}
        for key, (spec, status) in jobs.items():
            ns, name = key.split("/")
            self.jobs[key] = {
                "metadata": {
                    "name": name,
                    "namespace": ns,
                    "uid": name,
                    "creationTimestamp": "2026-01-01T00:00:00Z",
                    "annotations": {},
                },
                "spec": spec,
                "status": status,
            }

    def list_jobs(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return [copy.deepcopy(b) for b in self.jobs.values()]

    def list_nodes(self) -> list[dict[str, Any]]:
        gpus = {"nvidia.com/gpu": str(self.gpus)}
        return [
            {"metadata": {"name": "n1", "labels": {}}, "spec": {}, "status": {"allocatable": gpus}}
        ]

    def list_all_pods(self) -> list[dict[str, Any]]:
        return []

    def patch_job_annotations(self, namespace: str, name: str, ann: dict[str, Any]) -> None:
        self.jobs[f"{namespace}/{name}"]["metadata"]["annotations"].update(ann)

    def patch_job_status(
        self, namespace: str, name: str, status: dict[str, Any], resource_version: str | None
    ) -> None:
        self.jobs[f"{namespace}/{name}"]["status"].update(copy.deepcopy(status))
