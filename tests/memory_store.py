"""The test kit's one store behind the worker API (``adl.api.store.ApiStore``), in memory.

Synchronous, like the local backend's SQLite store (a test subclasses it with coroutine methods
for the operator's side). Jobs are known by their status; a job in ``deleted`` or never given
is unknown (the API's 404). Reports and heartbeats are kept for the tests to read."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from adl.api import JobSnapshot, UnknownJob
from adl.api.auth import find_owner
from adl.controller.status_hints import show_hints
from adl.models import AdaptiveJobStatus, GroupInfo, Heartbeat, Hints

#: where every group of this store meets (the API passes it on as it is)
MASTER = ("127.0.0.1", 29500)


class MemoryStore:
    """``jobs``: each job's status by ``namespace/name``; ``tokens``: each job's bearer token.
    ``merge_reports``: a job's last report shows in the status that ``/metrics`` reads, as
    the backends do (``adl.controller.status_hints.show_hints``); off, the status stays as
    given, so a test can check the figures it wrote there."""

    def __init__(
        self,
        jobs: Mapping[str, AdaptiveJobStatus],
        tokens: Mapping[str, str],
        *,
        gpus_per_replica: int = 1,
        merge_reports: bool = False,
    ) -> None:
        self.status = dict(jobs)
        self.tokens = dict(tokens)
        self.gpus_per_replica = gpus_per_replica
        self.merge_reports = merge_reports
        self.hints: dict[str, Hints] = {}
        self.beats: list[tuple[str, Heartbeat]] = []
        self.deleted: set[str] = set()
        #: what ``ready`` answers; None makes it raise, as a locked database does
        self.healthy: bool | None = True

    def _known(self, job: str) -> AdaptiveJobStatus:
        if job in self.deleted or job not in self.status:
            raise UnknownJob(job)
        return self.status[job]

    def token_owner(self, token: str, job: str) -> str | None:
        return find_owner(self.tokens.items(), token, prefer=job)

    def put_hints(self, job: str, hints: Hints) -> None:
        self._known(job)
        self.hints[job] = hints

    def put_heartbeat(self, job: str, beat: Heartbeat) -> None:
        self._known(job)
        self.beats.append((job, beat))

    def get_hints(self, job: str) -> Hints | None:
        self._known(job)
        return self.hints.get(job)

    def group_info(self, job: str) -> GroupInfo | None:
        st = self._known(job)
        if st.group == 0:
            return None
        addr, port = MASTER
        return GroupInfo(
            job=job, group=st.group, phase=st.phase, master_addr=addr, master_port=port,
            world_size=len(st.allocation), num_nodes=len(set(st.allocation)),
            allocation=list(st.allocation),
        )  # fmt: skip

    def list_jobs(self) -> Iterable[JobSnapshot]:
        out = []
        for job, st in self.status.items():
            if job in self.deleted:
                continue
            report = self.hints.get(job) if self.merge_reports else None
            if report is not None:
                st = st.model_copy(deep=True)
                st.hints = report
                show_hints(st, report)
            out.append(JobSnapshot(job, st, gpus_per_replica=self.gpus_per_replica))
        return out

    def ready(self) -> bool:
        if self.healthy is None:
            raise RuntimeError("database is locked")
        return self.healthy
