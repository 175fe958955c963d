"""The Kubernetes backend of the ``adl`` CLI (``--backend k8s``): AdaptiveJob objects through the
API server with the user's own kubeconfig credentials. Submission is checked first (storage
class, image, GPU sizes) so that a job which could never run is refused before anything exists.
"""

from __future__ import annotations

import builtins
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from adl.contract import ENV_GPU_RESOURCE
from adl.jobs_api import BackendError, JobView
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, Phase
from adl.operator import pods as P
from adl.operator.crd import API_VERSION, GROUP, KIND, MAX_NAME_LENGTH, PLURAL, VERSION
from adl.operator.kueue import QUEUE_LABEL, queue_of
from adl.operator.scheduling import quantity
from adl.operator.store import MERGE, api_client
from adl.operator.timestamps import parse_time

_IMAGE = re.compile(r"^[a-z0-9]+([._/:@-][A-Za-z0-9_.-]+)*$")
#: (group, version, plural) of Karpenter's NodePools, and (name, namespace) of the ConfigMap
#: cluster-autoscaler keeps its status in: either says nodes are added on demand
KARPENTER_NODEPOOLS = ("karpenter.sh", "v1", "nodepools")
CLUSTER_AUTOSCALER_STATUS = ("cluster-autoscaler-status", "kube-system")
_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def preflight(
    name: str,
    spec: AdaptiveJobSpec,
    *,
    storage_classes: Sequence[str] | None,
    node_gpus: Sequence[int] | None,
    claims: Sequence[str] | None = None,
) -> list[str]:
    """Problems that would keep the job from ever running (empty when it can be submitted).
    ``None`` for a list means "could not be read": that check is skipped, not failed.
    ``claims``: the PersistentVolumeClaims in the job's namespace (for checkpoint.claimName)."""
    errors = []
    if len(name) > MAX_NAME_LENGTH or not _NAME.match(name):
        errors.append(
            f"name {name!r}: lowercase letters, digits and '-', starting with a letter, "
            f"at most {MAX_NAME_LENGTH} characters"
        )
    image = spec.trainer.get("image")
    if not image:
        errors.append(
            "template.spec.containers[0].image is required on Kubernetes "
            "(adl submit --image IMAGE ..., or an AdaptiveJob manifest with -f FILE)"
        )
    elif not _IMAGE.match(str(image)):
        errors.append(f"image {image!r} is not a valid image reference")
    if spec.max_replicas > 1 and not spec.trainer.get("command"):
        errors.append("template.spec.containers[0].command is required when maxReplicas > 1")
    wanted = spec.checkpoint.storage_class
    if wanted and storage_classes is not None and wanted not in storage_classes:
        known = ", ".join(sorted(storage_classes)) or "none"
        errors.append(f"storage class {wanted!r} does not exist (available: {known})")
    claim = spec.checkpoint.claim_name
    if claim and claims is not None and claim not in claims:
        errors.append(f"checkpoint claim {claim!r} does not exist in the job's namespace")
    if node_gpus is not None and spec.gpus_per_replica > 0:
        biggest = max(node_gpus, default=0)
        if spec.gpus_per_replica > biggest:
            errors.append(
                f"gpusPerReplica={spec.gpus_per_replica} but the largest node has {biggest} GPUs"
            )
        elif spec.min_replicas * spec.gpus_per_replica > sum(node_gpus):
            errors.append(
                f"minReplicas={spec.min_replicas} x gpusPerReplica={spec.gpus_per_replica} "
                f"exceeds the cluster's {sum(node_gpus)} GPUs"
            )
    return errors


def _view(body: Mapping[str, Any], events: list[str] | None = None) -> JobView:
    meta = body["metadata"]
    return JobView(
        name=meta["name"],
        namespace=meta.get("namespace", ""),
        spec=AdaptiveJobSpec.model_validate(body["spec"]),
        status=AdaptiveJobStatus.from_object(body),
        created=parse_time(meta.get("creationTimestamp")),
        events=events or [],
        queue=queue_of(body),
    )


def _unreachable(api: client.ApiClient, exc: Exception) -> BackendError:
    reason = getattr(exc, "reason", None) or exc
    return BackendError(f"cannot reach the Kubernetes API at {api.configuration.host}: {reason}")


class KubernetesBackend:
    """Backend protocol implementation over the Kubernetes API."""

    def __init__(self, api: client.ApiClient | None = None, gpu_resource: str | None = None):
        try:
            self.api = api or api_client()
        except Exception as exc:  # no kubeconfig, bad context: one clear line for the CLI
            raise BackendError(f"cannot reach Kubernetes: {exc}") from exc
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.storage = client.StorageV1Api(self.api)
        # the scheduler's slot unit; ADL_GPU_RESOURCE=cpu on clusters without GPUs
        self.gpu_resource = gpu_resource or os.environ.get(ENV_GPU_RESOURCE, P.GPU_RESOURCE)

    # ------------------------------------------------------------------ helpers
    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except urllib3.exceptions.HTTPError as exc:
            raise _unreachable(self.api, exc) from None
        except ApiException as exc:
            if exc.status == 404:
                raise BackendError(f"{what}: not found") from exc
            if exc.status == 409:
                raise BackendError(f"{what}: already exists") from exc
            if exc.status == 403:
                raise BackendError(f"{what}: forbidden by RBAC ({exc.reason})") from exc
            if exc.status == 422:
                raise BackendError(f"{what}: rejected by the API server: {exc.body}") from exc
            raise BackendError(f"{what}: API error {exc.status} {exc.reason}") from exc

    def _optional(self, fn: Any) -> Any:
        """A read that may be forbidden to the user; None then (the check is skipped)."""
        try:
            return fn()
        except ApiException:
            return None
        except urllib3.exceptions.HTTPError as exc:  # no server at all: say so, skip nothing
            raise _unreachable(self.api, exc) from None

    def _autoscaled(self) -> bool:
        """Whether an autoscaler we can see adds nodes on demand (a Karpenter NodePool, or
        cluster-autoscaler's status ConfigMap): then the nodes there now say nothing about the
        nodes the job will get (a cluster scaled to zero has none), and the node checks are
        skipped. What cannot be read counts as no autoscaler."""
        listed: Any = self._optional(
            lambda: self.custom.list_cluster_custom_object(*KARPENTER_NODEPOOLS)
        )
        if isinstance(listed, dict) and listed.get("items"):
            return True
        status = self._optional(
            lambda: self.core.read_namespaced_config_map(*CLUSTER_AUTOSCALER_STATUS)
        )
        return status is not None

    # ------------------------------------------------------------------ Backend
    def submit(
        self, name: str, namespace: str, spec: AdaptiveJobSpec, *, queue: str | None = None
    ) -> JobView:
        classes = self._optional(
            lambda: [c.metadata.name for c in self.storage.list_storage_class().items if c.metadata]
        )
        claims = None
        if spec.checkpoint.claim_name:
            found = self._optional(
                lambda: self.core.list_namespaced_persistent_volume_claim(namespace).items
            )
            claims = None if found is None else [c.metadata.name for c in found if c.metadata]
        nodes = self._optional(lambda: self.core.list_node().items)
        gpus = None
        if nodes is not None and not self._autoscaled():
            gpus = [
                quantity((n.status.allocatable or {}).get(self.gpu_resource))
                for n in nodes
                if n.status is not None
            ]
        errors = preflight(
            name,
            spec,
            storage_classes=classes,
            node_gpus=gpus,
            claims=claims,
        )
        if errors:
            raise BackendError("; ".join(errors))
        body = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {
                "name": name,
                "namespace": namespace,
                # the label every Kueue integration reads (adl.operator.kueue)
                **({"labels": {QUEUE_LABEL: queue}} if queue else {}),
            },
            "spec": spec.wire(),
        }
        created = self._call(
            f"AdaptiveJob {namespace}/{name}",
            self.custom.create_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            body,
        )
        return _view(created if isinstance(created, dict) and created else body)

    def list(self, namespace: str | None = None) -> list[JobView]:
        if namespace:
            out = self._call(
                "AdaptiveJobs",
                self.custom.list_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                PLURAL,
            )
        else:
            out = self._call(
                "AdaptiveJobs", self.custom.list_cluster_custom_object, GROUP, VERSION, PLURAL
            )
        views = [_view(item) for item in out.get("items") or []]
        return sorted(views, key=lambda v: (v.namespace, v.name))

    def get(self, name: str, namespace: str) -> JobView:
        body = self._call(
            f"AdaptiveJob {namespace}/{name}",
            self.custom.get_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
        )
        return _view(body, self._events(name, namespace))

    def _events(self, name: str, namespace: str) -> builtins.list[str]:
        selector = f"involvedObject.name={name},involvedObject.kind={KIND}"
        out = self._optional(
            lambda: self.core.list_namespaced_event(namespace, field_selector=selector).items
        )
        lines = []
        for ev in out or []:
            involved = ev.involved_object
            if involved is not None and (involved.name != name or involved.kind != KIND):
                continue  # a server that ignores field selectors
            when = ev.last_timestamp or ev.event_time or ev.first_timestamp
            stamp = when.strftime("%H:%M:%S ") if isinstance(when, datetime) else ""
            lines.append(f"{stamp}{ev.type or 'Normal'} {ev.reason or ''}: {ev.message or ''}")
        return lines

    def _pods(self, name: str, namespace: str) -> builtins.list[dict[str, Any]]:
        out = self._call(
            "pods", self.core.list_namespaced_pod, namespace, label_selector=P.job_selector(name)
        )
        pods = [self.api.sanitize_for_serialization(p) for p in out.items]
        return [
            p
            for p in pods
            if P.matches_selector(p["metadata"].get("labels") or {}, P.job_selector(name))
        ]

    def logs(
        self, name: str, namespace: str, *, follow: bool = False, replica: int | None = None
    ) -> Iterator[str]:
        view = self.get(name, namespace)
        group = str(view.status.group)
        pods = [
            p
            for p in self._pods(name, namespace)
            if p["metadata"]["labels"].get(P.LABEL_GROUP) == group
        ]
        if not pods:
            raise BackendError(f"{namespace}/{name} has no worker pods in group {group}")
        index = 0
        if replica is not None:
            offsets = P.rank_offsets(view.status.allocation)
            if not 0 <= replica < len(view.status.allocation):
                raise BackendError(f"replica {replica} out of range 0..{view.status.replicas - 1}")
            index = max(i for i, off in enumerate(offsets) if off <= replica)
        pod = next(
            (p for p in pods if p["metadata"]["labels"].get(P.LABEL_INDEX) == str(index)), None
        )
        if pod is None:
            raise BackendError(f"no pod for replica {replica} in group {group}")
        container = pod["spec"]["containers"][0]["name"]
        stream = self._call(
            f"logs of {pod['metadata']['name']}",
            self.core.read_namespaced_pod_log,
            pod["metadata"]["name"],
            namespace,
            container=container,
            follow=follow,
            _preload_content=False,
        )
        buffer = b""
        for chunk in stream.stream() if hasattr(stream, "stream") else [stream.data]:
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                yield line.decode(errors="replace")
        if buffer:
            yield buffer.decode(errors="replace")

    def set_suspend(self, name: str, namespace: str, suspend: bool) -> bool:
        what = f"AdaptiveJob {namespace}/{name}"
        body = self._call(
            what, self.custom.get_namespaced_custom_object, GROUP, VERSION, namespace, PLURAL, name
        )
        phase = (body.get("status") or {}).get("phase")
        if phase in (Phase.SUCCEEDED.value, Phase.FAILED.value):
            raise BackendError(f"job {namespace}/{name} has finished")
        if bool((body.get("spec") or {}).get("suspend", False)) == suspend:
            return False
        self._call(
            what,
            self.custom.patch_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
            {"spec": {"suspend": suspend}},
            _content_type=MERGE,
        )
        return True

    def delete(self, name: str, namespace: str) -> None:
        self._call(
            f"AdaptiveJob {namespace}/{name}",
            self.custom.delete_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            name,
        )
