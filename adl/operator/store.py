"""Kubernetes API access for the operator: the CRD status is the only state store.

Thin, synchronous wrappers over the official client (called from the event loop through
``asyncio.to_thread``). Every call here is one of ``adl.operator.permissions``; label-selected
lists are re-filtered locally (a fake API server may ignore selectors), creates tolerate
"already exists" so that repeated actions are idempotent, and status writes carry the
resourceVersion read with the job so a concurrent writer causes a retry, not a lost update.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from adl import __version__
from adl.contract import ENV_KUBE_URL
from adl.operator.crd import GROUP, PLURAL, VERSION
from adl.operator.kueue import (
    CLUSTER_QUEUES,
    KUEUE_GROUP,
    KUEUE_VERSION,
    LOCAL_QUEUES,
    RESOURCE_FLAVORS,
    WORKLOADS,
)
from adl.operator.kueue_slices import LABEL_JOB_UID
from adl.operator.pods import matches_selector

MERGE = "application/merge-patch+json"

USER_AGENT = f"adl-operator/{__version__}"

#: Environment variable naming the API server URL directly (tests, local development).
KUBE_URL_ENV = ENV_KUBE_URL


class Conflict(RuntimeError):
    """The object changed since it was read (HTTP 409 on an update)."""


def api_client() -> client.ApiClient:
    """A client for in-cluster, ``$ADL_KUBE_URL`` (insecure, tests) or the kubeconfig."""
    url = os.environ.get(KUBE_URL_ENV)
    if url:
        cfg = client.Configuration()
        cfg.host = url
        cfg.verify_ssl = False
        return client.ApiClient(cfg)
    try:
        config.load_incluster_config()
    except config.ConfigException:
        # $KUBECONFIG as it is now: the client library reads it only once, at import time
        config.load_kube_config(config_file=os.environ.get("KUBECONFIG") or None)
    return client.ApiClient()


def _plain(obj: Any, api: client.ApiClient) -> Any:
    return obj if isinstance(obj, dict) or obj is None else api.sanitize_for_serialization(obj)


class KubeStore:
    """The operator's view of the cluster."""

    def __init__(self, api: client.ApiClient | None = None) -> None:
        self.api = api or api_client()
        self.api.user_agent = USER_AGENT  # lets audits (and tests) tell the operator's calls apart
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.policy = client.PolicyV1Api(self.api)

    # -------------------------------------------------------------- AdaptiveJobs
    def _get_custom(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> dict[str, Any] | None:
        """A namespaced custom object; None when it does not exist."""
        try:
            obj: Any = self.custom.get_namespaced_custom_object(
                group, version, namespace, plural, name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return dict(obj)

    def get_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get_custom(GROUP, VERSION, namespace, PLURAL, name)

    def list_jobs(self, namespace: str | None = None) -> list[dict[str, Any]]:
        out: Any
        if namespace:
            out = self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)
        else:
            out = self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
        return list(out.get("items") or [])

    def patch_job_status(
        self, namespace: str, name: str, status: dict[str, Any], resource_version: str | None
    ) -> None:
        body: dict[str, Any] = {"status": status}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        try:
            self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, PLURAL, name, body, _content_type=MERGE
            )
        except ApiException as exc:
            if exc.status == 409:
                raise Conflict(f"{namespace}/{name} changed while being reconciled") from exc
            raise

    def patch_job_annotations(
        self, namespace: str, name: str, annotations: dict[str, str | None]
    ) -> None:
        body = {"metadata": {"annotations": annotations}}
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, name, body, _content_type=MERGE
        )

    # -------------------------------------------------------------- children
    def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        out = self.core.list_namespaced_pod(namespace, label_selector=selector)
        pods = [_plain(p, self.api) for p in out.items]
        return [p for p in pods if matches_selector(p["metadata"].get("labels") or {}, selector)]

    def create(self, obj: dict[str, Any]) -> bool:
        """Create a namespaced core object; False when it already exists."""
        ns = obj["metadata"]["namespace"]
        creators: dict[str, Callable[..., Any]] = {
            "Pod": self.core.create_namespaced_pod,
            "Service": self.core.create_namespaced_service,
            "Secret": self.core.create_namespaced_secret,
            "PersistentVolumeClaim": self.core.create_namespaced_persistent_volume_claim,
            "PodDisruptionBudget": self.policy.create_namespaced_pod_disruption_budget,
        }
        try:
            creators[obj["kind"]](ns, obj)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def delete_pod(self, namespace: str, name: str, grace_s: int) -> None:
        try:
            self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=grace_s)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def _read(self, read: Callable[..., Any], namespace: str, name: str) -> dict[str, Any] | None:
        """A namespaced object as plain data; None when it does not exist."""
        try:
            return _plain(read(name, namespace), self.api)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read(self.core.read_namespaced_secret, namespace, name)

    def get_service(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read(self.core.read_namespaced_service, namespace, name)

    def get_pvc(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._read(self.core.read_namespaced_persistent_volume_claim, namespace, name)

    # -------------------------------------------------------------- Kueue Workloads
    def get_workload(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get_custom(KUEUE_GROUP, KUEUE_VERSION, namespace, WORKLOADS, name)

    def list_workloads(self, namespace: str) -> list[dict[str, Any]]:
        out: Any = self.custom.list_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, namespace, WORKLOADS
        )
        return list(out.get("items") or [])

    def list_job_workloads(self, namespace: str, uid: str) -> list[dict[str, Any]]:
        """The Workloads of one job (its slices), by the label adl puts on them."""
        out: Any = self.custom.list_namespaced_custom_object(
            KUEUE_GROUP,
            KUEUE_VERSION,
            namespace,
            WORKLOADS,
            label_selector=f"{LABEL_JOB_UID}={uid}",
        )
        return list(out.get("items") or [])

    def list_resource_flavors(self) -> list[dict[str, Any]]:
        """Kueue's ResourceFlavors (cluster-scoped; a cluster has a handful)."""
        out: Any = self.custom.list_cluster_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, RESOURCE_FLAVORS
        )
        return list(out.get("items") or [])

    def get_local_queue(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._get_custom(KUEUE_GROUP, KUEUE_VERSION, namespace, LOCAL_QUEUES, name)

    def get_cluster_queue(self, name: str) -> dict[str, Any] | None:
        """A ClusterQueue (cluster-scoped): its quota and usage; None when it does not exist."""
        try:
            obj: Any = self.custom.get_cluster_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, CLUSTER_QUEUES, name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return dict(obj)

    def create_workload(self, obj: dict[str, Any]) -> bool:
        """False when it already exists."""
        try:
            self.custom.create_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, obj["metadata"]["namespace"], WORKLOADS, obj
            )
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        return True

    def patch_workload_status(self, namespace: str, name: str, patch: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object_status(
            KUEUE_GROUP, KUEUE_VERSION, namespace, WORKLOADS, name, patch, _content_type=MERGE
        )

    # -------------------------------------------------------------- the GPU pool
    def list_nodes(self) -> list[dict[str, Any]]:
        return [_plain(n, self.api) for n in self.core.list_node().items]

    def get_node(self, name: str) -> dict[str, Any] | None:
        """One Node (listed by name: the operator may list nodes, not get them)."""
        items = self.core.list_node(field_selector=f"metadata.name={name}").items
        return _plain(items[0], self.api) if items else None

    def jobs_on_node(self, node: str, selector: str) -> set[tuple[str, str]]:
        """(namespace, value of the ``selector`` label) of each pod bound to ``node`` that
        carries the label (one cluster-wide LIST, filtered by the API server)."""
        out = self.core.list_pod_for_all_namespaces(
            label_selector=selector, field_selector=f"spec.nodeName={node}"
        )
        found = set()
        for pod in (_plain(p, self.api) for p in out.items):
            meta = pod.get("metadata") or {}
            value = (meta.get("labels") or {}).get(selector)
            if value and (pod.get("spec") or {}).get("nodeName") == node:
                found.add((str(meta.get("namespace") or ""), str(value)))
        return found

    def list_all_pods(self) -> list[dict[str, Any]]:
        return [_plain(p, self.api) for p in self.core.list_pod_for_all_namespaces().items]
