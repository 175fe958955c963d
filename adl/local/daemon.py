"""The local daemon's loop: this machine as a one-node cluster with its GPUs (or N CPU slots).

Split the way the operator is: the driver's backend over SQLite and process groups is
:mod:`adl.local.worker_backend`, the process entry (options, signals) :mod:`adl.local.daemon_main`,
and this module the loop. The shared driver (``adl.controller.driver``) does the rest: every
tick it steps each job's lifecycle and executes the actions; every few seconds, and at once when
a job arrives, ends, is suspended or resumed, it runs the scheduling round with the policy. The
API service (hints, rendezvous, metrics) runs in the same process on a 127.0.0.1 port
(``adl.local.api_server``). A second daemon for the same home refuses to start (file lock).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from adl.controller.driver import Driver
from adl.controller.history import CompletedWork
from adl.controller.liveness import ProgressBook
from adl.controller.rounds import RoundResult
from adl.local.api_server import LocalApi
from adl.local.client import DB_NAME, LOCK_NAME, PID_NAME, cannot_fit
from adl.local.gpus import local_nodes, slot_types
from adl.local.groups import WorkerGroups
from adl.local.private import create_private, make_private_home, write_private
from adl.local.settings import Settings
from adl.local.store import Store, StoredJob
from adl.local.worker_backend import NODE, LocalWorkerBackend, round_job
from adl.models import Phase
from adl.sched import registry
from adl.sched.types import Policy

__all__ = ["NODE", "Daemon", "DaemonRunning", "Settings"]

log = logging.getLogger("adl.local")


class DaemonRunning(RuntimeError):
    """Another daemon holds this state directory's lock."""


class Daemon:
    """One daemon per state directory; ``run()`` blocks until ``stop()`` or SIGTERM."""

    def __init__(
        self, settings: Settings, policy_factory: Callable[[], Policy] | None = None
    ) -> None:
        self.s = settings
        self.home = settings.home
        self.store = Store(self.home / DB_NAME)
        self.capacity = settings.gpus or settings.slots
        #: each GPU slot's type ("" where unknown); empty for CPU slots
        self.slot_types = slot_types(settings.gpus, settings.gpu_types)
        #: one node, or one per GPU type when the GPUs are of several
        self.nodes = local_nodes(self.capacity, self.slot_types)
        self.jobs: dict[str, StoredJob] = {}
        #: the ranks' heartbeats, written by the API thread (hung-rank detection)
        self.progress = ProgressBook()
        self.groups = WorkerGroups(settings, self.store, self.jobs, self.nodes)
        self.backend = LocalWorkerBackend(
            self.store, self.jobs, self.groups, self.progress, self.nodes
        )
        policy = (policy_factory or registry.policy_factory())()
        # the daemon runs container 0's command here, never its image: kinds come from the
        # command alone
        completed = CompletedWork(images=False)
        self.driver = Driver(
            self.backend,
            policy,
            settings.timing,
            on_round=self._on_round,
            completed=completed,
            unit="GPU" if settings.gpus else "slot",  # the decisions' word for a slot
        )
        self.rounds = self.driver.rounds
        self._revs: dict[str, int] = {}
        self._told_unfit: set[str] = set()
        self._step_errors: dict[str, str] = {}  # job -> the last error its step raised
        self._stop = threading.Event()
        self._round_due = True
        self._last_round = 0.0
        self.api = LocalApi()
        self.metrics: Any = None  # adl.api.metrics.AdlMetrics once the API runs
        self._lock_fh: Any = None

    @property
    def policy(self) -> Policy:
        return self.driver.policy

    @property
    def api_url(self) -> str:
        return self.api.url

    # ------------------------------------------------------------------ lifecycle of the daemon

    def acquire(self) -> None:
        """Take the home's lock (exactly one daemon per home) and record our pid."""
        make_private_home(self.home)
        create_private(self.home / LOCK_NAME)
        fh = open(self.home / LOCK_NAME, "a+")  # noqa: SIM115
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            raise DaemonRunning(f"another adl daemon already serves {self.home}") from None
        self._lock_fh = fh
        write_private(self.home / PID_NAME, f"{os.getpid()}\n")

    def run(self) -> None:
        self.acquire()
        try:
            self.reload()
            self.groups.recover()
            if self.s.api:
                self.start_api()
            self.store.set_meta("api_url", self.api_url)
            self.store.set_meta("slots", str(self.capacity))
            self.store.set_meta("gpu_types", ",".join(self.slot_types))
            self.store.set_meta("daemon_pid", str(os.getpid()))
            log.info(
                "adl daemon serving %s with %d slots, api %s",
                self.home,
                self.capacity,
                self.api_url or "off",
            )
            while not self._stop.is_set():
                t0 = time.monotonic()
                self.safe_tick()
                self._stop.wait(max(self.s.tick_s - (time.monotonic() - t0), 0.01))
        finally:
            self.shutdown()

    def stop(self) -> None:
        self._stop.set()

    def shutdown(self) -> None:
        """Leave workers running (the next daemon adopts them); release the lock."""
        self.api.stop()
        self.groups.close()
        with contextlib.suppress(Exception):
            self.store.set_meta("daemon_pid", "")
        if self._lock_fh is not None:
            with contextlib.suppress(Exception):
                (self.home / PID_NAME).unlink(missing_ok=True)
            self._lock_fh.close()
            self._lock_fh = None
        self.store.close()

    def start_api(self) -> None:
        try:
            from adl.local.api_store import build_app
        except ImportError as err:  # the API package is optional for the daemon
            log.warning("API disabled: %s", err)
            return
        app, self.metrics = build_app(self.store, self.progress, self.home)
        self.api.start(app, self.store.get_meta("api_url"))
        self.groups.api_url = self.api.url

    # ------------------------------------------------------------------ state

    def reload(self) -> bool:
        """Re-read the jobs whose row changed; True when a job appeared, left, or was suspended
        or resumed (each changes what the round may hand out)."""
        revs = self.store.revisions()
        arrived = False
        for key in list(self.jobs):
            if key not in revs:
                del self.jobs[key]
                self._revs.pop(key, None)
                arrived = True
        for key, rev in revs.items():
            if self._revs.get(key) != rev:
                before = self.jobs.get(key)
                rec = self.jobs[key] = self.store.job(key)
                if before is None or before.spec.suspend != rec.spec.suspend:
                    arrived = True
                self._revs[key] = rev
        return arrived

    # ------------------------------------------------------------------ the loop

    def safe_tick(self) -> None:
        """One tick of the loop; what fails is retried on the next one. A state database that
        cannot be written (a full disk) is logged once by the store, not once per tick, and
        shows in ``adl local status`` and ``/readyz`` until a write succeeds again."""
        try:
            self.tick()
        except sqlite3.Error:
            if self.store.write_error is None:  # not a write: say it
                log.exception("tick failed")
        except Exception:
            log.exception("tick failed")

    def tick(self) -> None:
        if self.reload():
            self._round_due = True
        now = datetime.now(UTC)
        for rec in list(self.jobs.values()):
            try:
                self._step_stored_job(rec, now)
                self._step_errors.pop(rec.key, None)
            except Exception as err:  # one job's trouble must not stop the others
                if self._step_errors.get(rec.key) != repr(err):  # once per new error, not per tick
                    self._step_errors[rec.key] = repr(err)
                    log.exception("step of %s failed", rec.key)
        self.groups.escalate()
        self.groups.reap()
        if self._round_due or time.monotonic() - self._last_round >= self.s.round_s:
            self.schedule(now)
        if self.reload():  # a user's write that landed during the round wants one of its own
            self._round_due = True

    def _step_stored_job(self, rec: StoredJob, now: datetime) -> None:
        if rec.deleted or rec.status.phase.finished:
            self.groups.drop_warm(rec)
        if rec.deleted:
            self._tear_down(rec)
            return
        if rec.status.phase.finished and not self.groups.observe(rec).any_present():
            return
        was_finished = rec.status.phase.finished
        self.driver.step_job(round_job(rec), now)
        if rec.status.phase == Phase.PENDING and rec.key not in self._told_unfit:
            self._tell_if_unfit(rec)
        if rec.status.phase.finished and not was_finished:
            self._round_due = True
        elif (
            rec.status.phase == Phase.RUNNING
            and rec.spec.max_replicas > rec.spec.min_replicas
            and self.groups.warm_due(rec)
        ):
            self.groups.prewarm(rec)  # an elastic job will be resized: keep its next shim ready

    def _tear_down(self, rec: StoredJob) -> None:
        """A deleted job: stop its groups; once none is left, remove every trace of it."""
        if not self.driver.tear_down(round_job(rec)):
            # files first: once the row is gone, nothing of the job is left anywhere (a daemon
            # killed in between finds the row again and finishes the removal)
            shutil.rmtree(self.groups.paths(rec).root, ignore_errors=True)
            self.store.purge(rec.key)
            self._told_unfit.discard(rec.key)
            self._step_errors.pop(rec.key, None)
            self.groups.forget(rec.key)
            self.progress.forget(rec.key)
            self._round_due = True

    def _tell_if_unfit(self, rec: StoredJob) -> None:
        """Say once why a pending job can never start here (it was submitted to a daemon with
        more slots); the scheduler alone would leave it waiting in silence."""
        why = cannot_fit(rec.spec, self.capacity, self.slot_types)
        if why is not None:
            self._told_unfit.add(rec.key)
            later = "here" if rec.spec.gpu_types and "GPU types" in why else "until it has more"
            self.store.add_event(
                rec.key, "Warning", "Unschedulable", f"{why}: it cannot start {later}"
            )

    def schedule(self, now: datetime) -> None:
        self._round_due = False
        self._last_round = time.monotonic()
        if any(not r.deleted for r in self.jobs.values()):
            self.driver.run_round(now)

    def _on_round(self, result: RoundResult) -> None:
        if self.metrics is not None:
            self.metrics.observe_round(result.duration_s)
