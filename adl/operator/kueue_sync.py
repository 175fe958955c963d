"""The operator's side of Kueue against the API server: make each queued job's Workload, read
its admission, and give quota back (``adl.operator.kueue`` holds the pure parts and the why)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
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
    workload_name,
)
from adl.operator.kueue_slices import (
    SLICE_REPLACED,
    growth_count,
    labelled_manifest,
    replacement_manifest,
    slice_number,
    sort_slices,
)
from adl.operator.pods import NodePool
from adl.operator.scheduling import desired_allocation
from adl.operator.store import KubeStore

log = logging.getLogger(__name__)


def ensure_workload(
    store: KubeStore, body: Mapping[str, Any], spec: AdaptiveJobSpec, resource: str
) -> tuple[dict[str, Any] | None, Admission | None]:
    """The job's current Workload (created when missing) and what Kueue decided; (None, None)
    for a job in no queue. One LIST finds the job's Workloads; a job that waits also reads its
    queue's usage (two GETs), and so does one that could grow (``adl.operator.kueue_slices``),
    which then asks for more with a replacement Workload."""
    queue = queue_of(body)
    if queue is None:
        return None, None
    meta = body["metadata"]
    namespace, uid = meta["namespace"], meta["uid"]
    workloads = store.list_job_workloads(namespace, uid)
    if not any(slice_number(w) == 0 for w in workloads):
        # the first one, made before Workloads were labelled with their job (or not yet made)
        first = store.get_workload(namespace, workload_name(meta["name"], uid))
        workloads += [first] if first is not None else []
    slices = sort_slices(workloads)
    workload = slices.current
    if workload is None and workloads:  # all finished: the job is done with Kueue
        workload = max(workloads, key=slice_number)
    if workload is None:
        if store.create_workload(labelled_manifest(body, spec, resource)):
            log.info("%s/%s: Workload created in queue %s", namespace, meta["name"], queue)
        adm = Admission(queue=queue, count=0)
    else:
        adm = slices.admission() or admission(workload)
    for old in slices.superseded:  # a Kueue that does not finish replaced slices itself
        _finish(store, old, SLICE_REPLACED, "replaced by a newer slice of the job")
    if adm.ceiling == 0 and adm.evicted is None and not adm.finished:
        # why it waits names the queue's use of its quota: two GETs, only while it waits
        usage = read_queue_usage(store, namespace, queue, resource)
        adm = dataclasses.replace(adm, usage=usage)
    elif workload is not None and slices.asking is None and _may_grow(adm, spec, body):
        usage = read_queue_usage(store, namespace, queue, resource)
        running = len(desired_allocation(body) or [])
        count = growth_count(adm, spec, running, usage)
        if count is not None:
            ask = replacement_manifest(body, spec, workload, count, resource)
            if store.create_workload(ask):
                log.info("%s/%s: admitted for %d replicas; asks queue %s for %d (Workload %s)",
                         namespace, meta["name"], adm.count, queue, count,
                         ask["metadata"]["name"])  # fmt: skip
    return workload, adm


def _may_grow(adm: Admission, spec: AdaptiveJobSpec, body: Mapping[str, Any]) -> bool:
    """Worth reading the queue's usage for: admitted for fewer than it could use, and adl's
    round gives it all it was admitted (the cheap half of ``growth_count``)."""
    running = len(desired_allocation(body) or [])
    return 0 < adm.ceiling < spec.max_replicas and running >= adm.count


def _finish(store: KubeStore, workload: Mapping[str, Any], reason: str, message: str) -> None:
    meta = workload["metadata"]
    patch = finished_patch(workload, False, message, datetime.now(UTC), reason=reason)
    store.patch_workload_status(meta["namespace"], meta["name"], patch)


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
        _withdraw_asks(store, workload, "the job finished")
    elif adm.evicted is not None and adm.reserved and not pods_alive:
        # an ask to grow replaces the evicted slice: withdrawn, the job queues again whole
        _withdraw_asks(store, workload, "the job was evicted")
        store.patch_workload_status(meta["namespace"], meta["name"], release_patch(workload, now))
        log.info("%s/%s: evicted by Kueue and stopped; its quota is given back",
                 meta["namespace"], meta["name"])  # fmt: skip


def _withdraw_asks(store: KubeStore, workload: Mapping[str, Any], why: str) -> None:
    """Finish the job's newer, unfinished slices (asks to grow): one LIST, on the rare step
    that finishes the job or gives an evicted one's quota back."""
    meta = workload["metadata"]
    uid = owner_uid(workload)
    if uid is None:
        return
    for other in store.list_job_workloads(meta["namespace"], uid):
        if slice_number(other) > slice_number(workload) and not admission(other).finished:
            _finish(store, other, "Withdrawn", f"ask to grow withdrawn: {why}")


def admissions(store: KubeStore, bodies: Sequence[Mapping[str, Any]]) -> dict[str, Admission]:
    """Kueue's decision for every queued job of a round, by the job's uid: one Workload LIST per
    namespace that holds queued jobs (a queued job without a Workload yet is absent)."""
    namespaces = sorted({b["metadata"]["namespace"] for b in bodies if queue_of(b)})
    out: dict[str, Admission] = {}
    for namespace in namespaces:
        by_job: dict[str, list[dict[str, Any]]] = {}
        for workload in store.list_workloads(namespace):
            uid = owner_uid(workload)
            if uid is not None:
                by_job.setdefault(uid, []).append(workload)
        for uid, workloads in by_job.items():
            adm = sort_slices(workloads).admission()  # a job's slices: the one that counts
            if adm is not None:
                out[uid] = adm
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
