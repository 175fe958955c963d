"""The API service's store protocol (``adl.api.store.ApiStore``) over the local SQLite state,
so the daemon serves the same hints, rendezvous and metrics endpoints as the operator."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from adl.api.auth import find_owner
from adl.api.store import JobSnapshot, UnknownJob
from adl.controller.env import node_slots
from adl.controller.liveness import ProgressBook
from adl.local.private import write_private
from adl.local.store import JobNotFound, Store
from adl.models import GroupInfo, Heartbeat, Hints


class LocalApiStore:
    """Reads and writes go straight to SQLite (the daemon reloads rows whose revision moved)."""

    def __init__(self, store: Store, progress: ProgressBook | None = None) -> None:
        self.store = store
        #: the daemon's, which its loop reads (heartbeats are kept in memory, not in SQLite)
        self.progress = progress if progress is not None else ProgressBook()

    def token_owner(self, token: str, job: str) -> str | None:
        # a deleted job's workers still report while they stop: their token stays valid until
        # the daemon forgets the job
        return find_owner(self.store.tokens(), token, prefer=job)

    def put_hints(self, job: str, hints: Hints) -> None:
        try:
            self.store.set_hints(job, hints)
        except JobNotFound:
            raise UnknownJob(job) from None

    def put_heartbeat(self, job: str, beat: Heartbeat) -> None:
        # the token named the job: it exists (a deleted one until the daemon purges it)
        self.progress.record(job, beat)

    def get_hints(self, job: str) -> Hints | None:
        try:
            return self.store.job(job).hints
        except JobNotFound:
            raise UnknownJob(job) from None

    def group_info(self, job: str) -> GroupInfo | None:
        try:
            rec = self.store.job(job)
        except JobNotFound:
            raise UnknownJob(job) from None
        st = rec.status
        if st.group == 0:
            return None
        port = next((g.port for g in self.store.groups(job) if g.group == st.group), None)
        return GroupInfo(
            job=job,
            group=st.group,
            phase=st.phase,
            master_addr="127.0.0.1",
            master_port=port or 0,
            world_size=len(st.allocation),
            num_nodes=len(node_slots(st.allocation)),
            allocation=list(st.allocation),
        )

    def list_jobs(self) -> Iterable[JobSnapshot]:
        return [
            JobSnapshot(r.key, r.status_with_hints(), r.spec.gpus_per_replica)
            for r in self.store.jobs()
        ]

    def ready(self) -> bool:
        """The state answers and can be written: a daemon that cannot record what its workers
        do (a full disk, a read-only file) would show stale phases, so it is not ready."""
        try:
            self.store.get_meta("daemon_pid")
        except Exception:
            return False
        return self.store.probe_write() is None


def build_app(store: Store, progress: ProgressBook, home: Path) -> tuple[Any, Any]:
    """The FastAPI app of ``adl.api`` over the daemon's state (its SQLite ``store``, the
    heartbeats its loop reads, its ``home``), and the metrics the daemon's rounds feed."""
    from adl.api.app import create_app
    from adl.api.metrics import AdlMetrics

    metrics = AdlMetrics()
    # The API listens on loopback, where every local user reaches it: job names in /metrics
    # only for a scrape bearing the token kept 0600 in the state directory.
    token = metrics_token(home)
    app = create_app(
        LocalApiStore(store, progress), metrics=metrics, title="adl local",
        metrics_token=lambda: token,
    )  # fmt: skip
    return app, metrics


#: the file in the state directory holding the bearer token of /metrics' per-job families
METRICS_TOKEN_FILE = "metrics-token"


def metrics_token(home: Path) -> str:
    """The daemon's metrics token: read from ``home``, or made there (0600) the first time."""
    path = home / METRICS_TOKEN_FILE
    with contextlib.suppress(FileNotFoundError):
        text = path.read_text().strip()
        if text:
            return text
    token = secrets.token_urlsafe(32)
    write_private(path, token + "\n")
    return token
