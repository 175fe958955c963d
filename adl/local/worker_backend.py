"""The local daemon's side of ``adl.controller.backend.WorkerBackend``: the shared driver's view
of this machine as a one-node cluster (a node per GPU type when its GPUs are of several).
Jobs are rows of the SQLite store (kept in memory as ``StoredJob``s, reloaded by the daemon
when their revision moves), workers are process groups (:mod:`adl.local.groups`), the node
is ``local`` with the daemon's GPUs or CPU slots."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime

from adl.controller.actions import Action, CreateGroup, DeleteGroup, EmitEvent, RemoveExited
from adl.controller.job_record import JobRecord
from adl.controller.lifecycle import ObservedWorkers
from adl.controller.liveness import ProgressBook
from adl.local.gpus import LOCAL_NODE, LocalNode
from adl.local.groups import WorkerGroups
from adl.local.store import Store, StoredJob
from adl.models import AdaptiveJobStatus, Condition
from adl.sched.types import NodeInfo

#: the node of the local cluster (the only one unless the GPUs are of several types)
NODE = LOCAL_NODE


def round_job(rec: StoredJob) -> JobRecord:
    """The controller's view of a stored job (the status with the last hints merged in)."""
    created = datetime.fromtimestamp(rec.created, UTC)
    return JobRecord(rec.key, rec.spec, rec.status_with_hints(), created, rec.desired)


class LocalWorkerBackend:
    """The driver's backend over the daemon's store, jobs, worker groups and heartbeats."""

    def __init__(
        self,
        store: Store,
        jobs: dict[str, StoredJob],
        groups: WorkerGroups,
        progress: ProgressBook,
        nodes: Sequence[LocalNode],
    ) -> None:
        self.store = store
        self.jobs = jobs  # the daemon's: it reloads them, this writes through to both
        self.groups = groups
        self.progress = progress
        self.nodes = list(nodes)

    def observe(self, job: JobRecord) -> ObservedWorkers:
        observed = self.groups.observe(self.jobs[job.key])
        return replace(observed, progress=self.progress.snapshot(job.key))

    def set_status(self, job: JobRecord, status: AdaptiveJobStatus) -> None:
        self.store.set_status(job.key, status)
        self.jobs[job.key].status = status.model_copy()

    def create_group(self, job: JobRecord, action: CreateGroup) -> None:
        # a launch that must wait (slots still held by another job's group) is retried at the
        # next tick: the lifecycle re-issues CreateGroup for the missing replicas
        self.groups.launch(self.jobs[job.key], action)

    def delete_group(self, job: JobRecord, action: DeleteGroup) -> None:
        rec = self.jobs[job.key]
        self.groups.stop_group(rec, action.group, action.grace_s)
        if rec.desired and not rec.deleted and not rec.status.phase.finished:
            self.groups.prewarm(rec)  # a resize or a restart: a next group will follow

    def remove_exited(self, job: JobRecord, action: RemoveExited) -> None:
        # an exited process holds nothing; its group's files stay for `adl logs` and are
        # removed with the job
        pass

    def after_step(self, job: JobRecord, actions: Sequence[Action]) -> None:
        pass  # no quota manager: nothing is kept beside the job's row

    def emit_event(self, job: JobRecord, event: EmitEvent) -> None:
        self.store.add_event(job.key, event.type, event.reason, event.message)

    def round_jobs(self) -> list[JobRecord]:
        return [round_job(r) for r in self.jobs.values() if not r.deleted]

    def round_nodes(self) -> list[NodeInfo]:
        return [NodeInfo(n.name, n.slots, gpu_type=n.gpu_type) for n in self.nodes]

    def set_desired(self, changed: Mapping[str, list[str]]) -> None:
        self.store.set_desired(dict(changed))
        for key, alloc in changed.items():
            if key in self.jobs:
                self.jobs[key].desired = list(alloc)

    def record_service(self, service: Mapping[str, float]) -> None:
        self.store.set_service(service)
        for key, seconds in service.items():
            if key in self.jobs:
                self.jobs[key].status.attained_service_s = seconds

    def record_conditions(self, conditions: Mapping[str, list[Condition]]) -> None:
        for key, conds in conditions.items():
            rec = self.jobs.get(key)
            if rec is None:
                continue
            rec.status.conditions = list(conds)
            self.store.set_status(key, rec.status)
