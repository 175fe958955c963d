"""Pure builders for the Kubernetes objects of one AdaptiveJob: worker pods, the headless
rendezvous Service, the token Secret and the checkpoint claim. No I/O, so every rule (names,
labels, owner references, GPU requests, mounts) is unit-tested without an API server.

One pod per node per group runs all of that node's replicas (one process per GPU, started by
``adl.client_lib.launch``), so intra-node traffic never leaves the host.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from adl.contract import (
    ANNOTATION_ALLOCATION as ANNOTATION_ALLOCATION,  # re-exported: callers import them here
)
from adl.contract import (
    ANNOTATION_TOKEN_HASH as ANNOTATION_TOKEN_HASH,
)
from adl.contract import (
    LABEL_GROUP,
    LABEL_JOB,
    LABEL_NODE_INDEX,
)
from adl.controller.env import WorkerSite, node_slots
from adl.controller.env import worker_env as env_of_replica
from adl.models import AdaptiveJobSpec
from adl.operator.crd import API_VERSION, KIND
from adl.operator.taints import pod_tolerations

LABEL_INDEX = LABEL_NODE_INDEX
LABEL_MANAGED = "app.kubernetes.io/managed-by"
MANAGER = "adl"

GPU_RESOURCE = "nvidia.com/gpu"
MASTER_PORT = 29500
CHECKPOINT_MOUNT = "/adl/checkpoint"
TOKEN_MOUNT = "/var/run/adl"
TOKEN_KEY = "token"
TOKEN_FILE = f"{TOKEN_MOUNT}/{TOKEN_KEY}"
LAUNCHER = ["python", "-m", "adl.client_lib.launch"]


@dataclass(frozen=True)
class NodePool:
    """Where a job's pods may run beyond their template: node labels they select and taints
    they tolerate (Kueue: those of the ResourceFlavor the job was admitted on)."""

    node_labels: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class JobRef:
    """Identity of an AdaptiveJob object, enough to own and name its children."""

    name: str
    namespace: str
    uid: str

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> JobRef:
        meta = body["metadata"]
        return cls(name=meta["name"], namespace=meta.get("namespace", ""), uid=meta.get("uid", ""))


# ------------------------------------------------------------------------------ names, labels


def pod_name(job: str, group: int, index: int) -> str:
    return f"{job}-g{group}-{index}"


def service_name(job: str) -> str:
    return job


def token_secret_name(job: str) -> str:
    return f"{job}-adl-token"


def pvc_name(job: str) -> str:
    return f"{job}-checkpoint"


def job_labels(job: str) -> dict[str, str]:
    return {LABEL_JOB: job, LABEL_MANAGED: MANAGER}


def group_labels(job: str, group: int) -> dict[str, str]:
    return {**job_labels(job), LABEL_GROUP: str(group)}


def job_selector(job: str) -> str:
    """Label selector of everything a job owns (for list/delete calls)."""
    return f"{LABEL_JOB}={job}"


def matches_selector(labels: Mapping[str, str], selector: str) -> bool:
    """Equality-based label selection as the API server does it (``a=b,c!=d,e``); kmock does
    not filter, so the operator re-checks every listed object with this."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.split("==", 1) if "==" in term else term.split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def owner_reference(job: JobRef) -> dict[str, Any]:
    """Children are garbage-collected with the job; ``controller`` marks adl as their manager."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": job.name,
        "uid": job.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _meta(job: JobRef, name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": job.namespace,
        "labels": labels,
        "ownerReferences": [owner_reference(job)],
    }


# ------------------------------------------------------------------------------ placement


def rank_offsets(allocation: list[str]) -> list[int]:
    offsets, total = [], 0
    for _, count in node_slots(allocation):
        offsets.append(total)
        total += count
    return offsets


def master_addr(job: JobRef, group: int) -> str:
    """Stable DNS name of the group's first pod (hostname + headless-Service subdomain)."""
    return f"{pod_name(job.name, group, 0)}.{service_name(job.name)}.{job.namespace}.svc"


def checkpoint_claim(job: JobRef, spec: AdaptiveJobSpec) -> str:
    return spec.checkpoint.claim_name or pvc_name(job.name)


# ------------------------------------------------------------------------------ objects


def _trainer_command(trainer: Mapping[str, Any], replicas: int) -> dict[str, Any]:
    """Wrap the trainer in the launcher when the pod runs several replicas."""
    if replicas <= 1:
        return {}
    command = list(trainer.get("command") or [])
    if not command:
        raise ValueError(
            "containers[0].command is required when a pod runs several replicas "
            "(the launcher starts one process per GPU)"
        )
    argv = [*LAUNCHER, "--nproc", str(replicas), "--", *command, *(trainer.get("args") or [])]
    return {"command": argv, "args": []}


def _merge_env(existing: list[dict[str, Any]], env: Mapping[str, str]) -> list[dict[str, Any]]:
    kept = [e for e in existing if e.get("name") not in env]
    return kept + [{"name": k, "value": v} for k, v in sorted(env.items())]


def build_pod(
    job: JobRef,
    spec: AdaptiveJobSpec,
    *,
    group: int,
    index: int,
    node: str,
    replicas: int,
    env: Mapping[str, str],
    claim: str | None = None,
    resource: str = GPU_RESOURCE,
    pool: NodePool | None = None,
) -> dict[str, Any]:
    """The pod running ``replicas`` replicas of ``group`` on ``node``, stamped with ``env``;
    it requests ``replicas * gpusPerReplica`` of ``resource`` (the scheduler's slot unit).
    A ``pool``'s node labels join the template's nodeSelector (a label of both: the pool's)
    and its tolerations the template's."""
    template = copy.deepcopy(spec.template)
    tmeta = template.get("metadata") or {}
    pspec = copy.deepcopy(template.get("spec") or {})
    # Placement is adl's: the pod is pinned to its node by affinity and bound by the default
    # scheduler, which checks it fits. A template's nodeName would bind it anywhere, unchecked,
    # and a schedulerName would hand it to a scheduler that ignores adl's allocation.
    for name in OVERRIDDEN_FIELDS:
        pspec.pop(name, None)
    containers = pspec["containers"]
    trainer = dict(containers[0])
    trainer.update(_trainer_command(trainer, replicas))
    trainer["env"] = _merge_env(list(trainer.get("env") or []), env)
    gpus = replicas * spec.gpus_per_replica
    if gpus:
        resources = copy.deepcopy(trainer.get("resources") or {})
        for kind in ("limits", "requests"):
            resources.setdefault(kind, {})[resource] = str(gpus)
        trainer["resources"] = resources
    if pool is not None:
        _join_pool(pspec, pool)
    if gpus or pspec.get("tolerations"):
        # the node pool's GPU taint is tolerated, as the policy counted on (adl.operator.taints)
        pspec["tolerations"] = pod_tolerations(pspec, resource, gpus)
    mounts = [m for m in trainer.get("volumeMounts") or [] if m.get("name") not in _VOLUMES]
    mounts += [
        {"name": "adl-checkpoint", "mountPath": CHECKPOINT_MOUNT},
        {"name": "adl-token", "mountPath": TOKEN_MOUNT, "readOnly": True},
    ]
    trainer["volumeMounts"] = mounts
    containers[0] = trainer

    volumes = [v for v in pspec.get("volumes") or [] if v.get("name") not in _VOLUMES]
    volumes += [
        {
            "name": "adl-checkpoint",
            "persistentVolumeClaim": {"claimName": claim or checkpoint_claim(job, spec)},
        },
        {
            "name": "adl-token",
            "secret": {"secretName": token_secret_name(job.name), "defaultMode": 0o440},
        },
    ]
    pspec["volumes"] = volumes
    # Workers talk to adl's API with the job's own token, not to Kubernetes: no API token in
    # user code unless the template names a service account or asks for the token itself.
    if not (pspec.get("serviceAccountName") or pspec.get("serviceAccount")):
        pspec.setdefault("automountServiceAccountToken", False)
    pspec["restartPolicy"] = "Never"  # restarts are the controller's decision, counted
    pspec["terminationGracePeriodSeconds"] = spec.termination_grace_period_seconds
    pspec["hostname"] = pod_name(job.name, group, index)
    pspec["subdomain"] = service_name(job.name)
    pspec["affinity"] = _pin_to_node(pspec.get("affinity"), node)

    labels = {**(tmeta.get("labels") or {}), **group_labels(job.name, group)}
    labels[LABEL_INDEX] = str(index)
    meta = _meta(job, pod_name(job.name, group, index), labels)
    if tmeta.get("annotations"):
        meta["annotations"] = dict(tmeta["annotations"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pspec}


_VOLUMES = {"adl-checkpoint", "adl-token"}
#: fields of a job's pod template that the worker pods never carry (see build_pod)
OVERRIDDEN_FIELDS = ("nodeName", "schedulerName")


def _join_pool(pspec: dict[str, Any], pool: NodePool) -> None:
    """Add a pool's node labels and tolerations to a pod spec, as Kueue's own integrations do
    when they start an admitted job: the pod then also states where it may run, although
    adl's affinity already names the node (chosen within the pool)."""
    if pool.node_labels:
        pspec["nodeSelector"] = {**(pspec.get("nodeSelector") or {}), **pool.node_labels}
    if pool.tolerations:
        tolerations = [dict(t) for t in pspec.get("tolerations") or []]
        tolerations += [dict(t) for t in pool.tolerations if dict(t) not in tolerations]
        pspec["tolerations"] = tolerations


def _pin_to_node(affinity: Mapping[str, Any] | None, node: str) -> dict[str, Any]:
    """Pin to the allocated node through the scheduler (matchFields on metadata.name, as
    DaemonSets do) rather than spec.nodeName, so resources and taints are still checked and
    an impossible placement surfaces as Unschedulable instead of a silent failure."""
    out = copy.deepcopy(dict(affinity or {}))
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
    out.setdefault("nodeAffinity", {})["requiredDuringSchedulingIgnoredDuringExecution"] = {
        "nodeSelectorTerms": [term]
    }
    return out


def build_service(job: JobRef) -> dict[str, Any]:
    """Headless Service giving every worker pod a DNS name for rendezvous."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(job, service_name(job.name), job_labels(job.name)),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,  # rendezvous happens before readiness
            "selector": {LABEL_JOB: job.name},
            "ports": [{"name": "rendezvous", "port": MASTER_PORT, "targetPort": MASTER_PORT}],
        },
    }


def disruption_budget_name(job: str) -> str:
    return f"{job}-adl"[:253]


def build_disruption_budget(job: JobRef) -> dict[str, Any]:
    """A PodDisruptionBudget that refuses every eviction of the job's workers
    (``maxUnavailable: 0``): a drain (``kubectl drain``, Karpenter's, cluster-autoscaler's)
    waits until adl, which sees the node's cordon or taint (``adl.operator.disruption``), has
    stopped the whole group with a checkpoint and moved it, rather than evicting one rank with
    only its grace period to save in. Deleting pods (adl's own resizes) is not an eviction, so
    the budget never holds adl back. A worker that is not Ready may still be evicted
    (``unhealthyPodEvictionPolicy: AlwaysAllow``): a broken pod must not block a drain."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": _meta(job, disruption_budget_name(job.name), job_labels(job.name)),
        "spec": {
            "maxUnavailable": 0,
            "selector": {"matchLabels": {LABEL_JOB: job.name}},
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }


def build_token_secret(job: JobRef, token: str) -> dict[str, Any]:
    """The job's bearer token for the hints API; only this job's pods mount it."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": _meta(job, token_secret_name(job.name), job_labels(job.name)),
        "stringData": {TOKEN_KEY: token},
    }


def token_from_secret(secret: Mapping[str, Any]) -> str | None:
    """The token stored in a job's Secret (``data`` is base64, ``stringData`` plain)."""
    import base64

    data = secret.get("data") or {}
    if data.get(TOKEN_KEY):
        return base64.b64decode(data[TOKEN_KEY]).decode()
    plain = (secret.get("stringData") or {}).get(TOKEN_KEY)
    return str(plain) if plain else None


def build_pvc(job: JobRef, spec: AdaptiveJobSpec) -> dict[str, Any] | None:
    """A checkpoint claim from the storage class (or the cluster default), unless the user
    named an existing claim. ReadWriteMany: pods of one group may sit on several nodes."""
    if spec.checkpoint.claim_name:
        return None
    pvc_spec: dict[str, Any] = {
        "accessModes": ["ReadWriteMany"],
        "resources": {"requests": {"storage": spec.checkpoint.size}},
    }
    if spec.checkpoint.storage_class:
        pvc_spec["storageClassName"] = spec.checkpoint.storage_class
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": _meta(job, pvc_name(job.name), job_labels(job.name)),
        "spec": pvc_spec,
    }


def worker_site(job: JobRef, group: int, api_url: str) -> WorkerSite:
    """Where a group runs on Kubernetes: the first pod's DNS name, a fixed port, the mounts."""
    return WorkerSite(
        master_addr=master_addr(job, group),
        master_port=MASTER_PORT,
        checkpoint_dir=f"{CHECKPOINT_MOUNT}/{job.namespace}/{job.name}",
        api_url=api_url,
        token_file=TOKEN_FILE,
    )


def worker_env(
    job: JobRef,
    group: int,
    allocation: list[str],
    index: int,
    api_url: str,
    scheduled_since: float | None = None,
) -> dict[str, str]:
    """Environment of pod ``index``: the controller's env of the pod's first replica (the same
    builder the local backend uses); the launcher derives each process's rank from it."""
    first_rank = rank_offsets(allocation)[index]
    site = worker_site(job, group, api_url)
    return env_of_replica(job.key, group, allocation, first_rank, site, scheduled_since)
