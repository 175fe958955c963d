"""The operator's side of Kueue against the API server: make each queued job's Workload, read
its admission, and give quota back (``adl.operator.kueue`` holds the pure parts and the why)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, Phase
from adl.operator.kueue import (
    Admission,
    QueueUsage,
    admission,
    finished_patch,
    flavor_pool,
    owner_uid,
    queue_of,
    queue_usage,
    release_patch,
    workload_manifest,
    workload_name,
)
from adl.operator.pods import NodePool
from adl.operator.store import KubeStore

log = logging.getLogger(__name__)


def ensure_workload(
    store: KubeStore, body: Mapping[str, Any], spec: AdaptiveJobSpec, resource: str
) -> tuple[dict[str, Any] | None, Admission | None]:
    """The job's Workload (created when missing) and what Kueue decided; (None, None) for a
    job in no queue."""
    queue = queue_of(body)
    if queue is None:
        return None, None
    meta = body["metadata"]
    name = workload_name(meta["name"], meta["uid"])
    workload = store.get_workload(meta["namespace"], name)
    if workload is None:
        if store.create_workload(workload_manifest(body, spec, resource)):
            log.info("%s/%s: Workload %s created in queue %s", meta["namespace"], meta["name"],
                     name, queue)  # fmt: skip
        adm = Admission(queue=queue, count=0)
    else:
        adm = admission(workload)
    if adm.ceiling == 0 and adm.evicted is None and not adm.finished:
        # why it waits names the queue's use of its quota: two GETs, only while it waits
        usage = read_queue_usage(store, meta["namespace"], queue, resource)
        adm = dataclasses.replace(adm, usage=usage)
    return workload, adm


def read_queue_usage(
    store: KubeStore, namespace: str, queue: str, resource: str
) -> QueueUsage | str:
    """The GPUs in use in the ClusterQueue behind LocalQueue ``queue`` against its quota, or
    why they cannot be told (a missing queue is also why Kueue admits nothing)."""
    local = store.get_local_queue(namespace, queue)
    if local is None:
        return f"LocalQueue {queue} does not exist in namespace {namespace}"
    name = str((local.get("spec") or {}).get("clusterQueue") or "")
    cluster = store.get_cluster_queue(name) if name else None
    if cluster is None:
        return f"its ClusterQueue {name or '(none named)'} does not exist"
    try:
        return queue_usage(cluster, resource)
    except ValueError:  # a quantity with a suffix no GPU count has
        return f"ClusterQueue {name} reports a {resource} quantity adl cannot read"


def settle_workload(
    store: KubeStore,
    workload: Mapping[str, Any] | None,
    status: AdaptiveJobStatus,
    pods_alive: bool,
    now: datetime,
) -> None:
    """After the job's step: a finished job finishes its Workload (its quota is released); an
    evicted one whose pods are all gone gives its quota reservation back, so Kueue requeues it."""
    if workload is None:
        return
    meta = workload["metadata"]
    adm = admission(workload)
    if status.phase.finished and not adm.finished:
        succeeded = status.phase == Phase.SUCCEEDED
        patch = finished_patch(workload, succeeded, status.message or status.reason or "", now)
        store.patch_workload_status(meta["namespace"], meta["name"], patch)
    elif adm.evicted is not None and adm.reserved and not pods_alive:
        store.patch_workload_status(meta["namespace"], meta["name"], release_patch(workload, now))
        log.info("%s/%s: evicted by Kueue and stopped; its quota is given back",
                 meta["namespace"], meta["name"])  # fmt: skip


def admissions(store: KubeStore, bodies: Sequence[Mapping[str, Any]]) -> dict[str, Admission]:
    """Kueue's decision for every queued job of a round, by the job's uid: one Workload LIST per
    namespace that holds queued jobs (a queued job without a Workload yet is absent)."""
    namespaces = sorted({b["metadata"]["namespace"] for b in bodies if queue_of(b)})
    out: dict[str, Admission] = {}
    for namespace in namespaces:
        for workload in store.list_workloads(namespace):
            uid = owner_uid(workload)
            if uid is not None:
                out[uid] = admission(workload)
    return out


def flavors_by_name(store: KubeStore, wanted: Sequence[Admission]) -> dict[str, dict[str, Any]]:
    """The ResourceFlavors these admissions name, by name: one LIST, and none when no
    admission names a flavor (before admission; or a Kueue that assigns none)."""
    if not any(adm.flavors for adm in wanted):
        return {}
    return {str(f["metadata"]["name"]): f for f in store.list_resource_flavors()}


def admitted_pool(store: KubeStore, adm: Admission | None) -> NodePool | None:
    """The node pool an admitted job's pods go to (None: no flavor, or none yet); raises
    ``FlavorError`` when its flavors give none."""
    if adm is None or not adm.flavors:
        return None
    return flavor_pool(adm.flavors, flavors_by_name(store, [adm]))
