"""A ``WorkerBackend`` with its jobs in memory and no workers: the shared driver's round without
any I/O. The round-latency benchmark times the driver's own cost with it, and the driver's tests
run their scenarios through it beside the real backends."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from adl.controller.actions import Action, CreateGroup, DeleteGroup, EmitEvent, RemoveExited
from adl.controller.job_record import JobRecord
from adl.controller.lifecycle import ObservedWorkers
from adl.models import AdaptiveJobStatus, Condition, Hints
from adl.sched.types import NodeInfo


class MemoryWorkerBackend:
    """Jobs in a dict, nodes as given; groups are recorded, never run (no worker is ever
    observed); events are kept in order."""

    def __init__(self, jobs: Iterable[JobRecord], nodes: Sequence[NodeInfo]) -> None:
        self.jobs = {j.key: j for j in jobs}
        self.nodes = list(nodes)
        self.events: list[tuple[str, EmitEvent]] = []
        self.groups: list[CreateGroup | DeleteGroup] = []

    def _update(self, key: str, **status: object) -> None:
        job = self.jobs[key]
        self.jobs[key] = replace(job, status=job.status.model_copy(update=status))

    # ---- one job
    def observe(self, job: JobRecord) -> ObservedWorkers:
        return ObservedWorkers(())

    def set_status(self, job: JobRecord, status: AdaptiveJobStatus) -> None:
        self.jobs[job.key] = replace(self.jobs[job.key], status=status)

    def create_group(self, job: JobRecord, action: CreateGroup) -> None:
        self.groups.append(action)

    def delete_group(self, job: JobRecord, action: DeleteGroup) -> None:
        self.groups.append(action)

    def remove_exited(self, job: JobRecord, action: RemoveExited) -> None:
        pass  # no worker ever ran: nothing is left behind

    def after_step(self, job: JobRecord, actions: Sequence[Action]) -> None:
        pass  # nothing is kept beside the jobs

    def emit_event(self, job: JobRecord, event: EmitEvent) -> None:
        self.events.append((job.key, event))

    # ---- the round
    def round_jobs(self) -> list[JobRecord]:
        return list(self.jobs.values())

    def round_nodes(self) -> list[NodeInfo]:
        return list(self.nodes)

    def set_desired(self, changed: Mapping[str, list[str]]) -> None:
        for key, alloc in changed.items():
            self.jobs[key] = replace(self.jobs[key], desired=list(alloc))

    def record_service(self, service: Mapping[str, float]) -> None:
        for key, seconds in service.items():
            self._update(key, attained_service_s=seconds)

    def record_conditions(self, conditions: Mapping[str, list[Condition]]) -> None:
        for key, conds in conditions.items():
            self._update(key, conditions=list(conds))

    # ---- what a job would report
    def set_hints(self, key: str, hints: Hints) -> None:
        self._update(key, hints=hints)
