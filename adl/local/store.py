"""The local backend's state in SQLite: jobs (spec, status, hints, desired allocation), worker
groups (pids, lifetimes, exit codes) and events.

SQLite (WAL mode) is the only state the daemon keeps, so a daemon killed at any point restarts
from here and carries on. The CLI opens the same file from another process: it inserts jobs and
marks them deleted, the daemon owns status, the API owns hints. Each writer touches only its own
columns, so concurrent writers never clobber each other; every write bumps ``rev`` so the daemon
reloads only rows that changed.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from adl.contract import ENV_HOME, JobKey
from adl.local.private import create_private
from adl.models import (
    MAX_OBJECT_BYTES,
    AdaptiveJobSpec,
    AdaptiveJobStatus,
    Hints,
    limit_text,
    oversized,
)

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    key TEXT PRIMARY KEY,
    namespace TEXT NOT NULL,
    name TEXT NOT NULL,
    seq INTEGER NOT NULL,
    created REAL NOT NULL,
    spec TEXT NOT NULL,
    status TEXT NOT NULL,
    hints TEXT,
    token TEXT NOT NULL,
    desired TEXT,
    restart_after REAL,
    deleted INTEGER NOT NULL DEFAULT 0,
    rev INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS groups (
    key TEXT NOT NULL,
    grp INTEGER NOT NULL,
    replicas INTEGER NOT NULL,
    pid INTEGER,
    start_ticks INTEGER,
    port INTEGER,
    devices TEXT,
    started REAL NOT NULL,
    ended REAL,
    codes TEXT,
    PRIMARY KEY (key, grp)
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL,
    ts REAL NOT NULL,
    type TEXT NOT NULL,
    reason TEXT NOT NULL,
    message TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_key ON events (key, id);
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
"""


def default_home() -> Path:
    """``$ADL_HOME`` or ``~/.adl/local``: where the daemon keeps its database, logs, checkpoints."""
    env = os.environ.get(ENV_HOME)
    return Path(env).expanduser() if env else Path.home() / ".adl" / "local"


def job_key(namespace: str, name: str) -> str:
    return str(JobKey(namespace, name))


class StateUnreadable(RuntimeError):
    """The state database is not one SQLite can read (a truncated or overwritten file)."""


class JobExists(ValueError):
    """A job with that namespace/name was already submitted."""


class JobNotFound(KeyError):
    """No such job."""


class JobFinished(ValueError):
    """The job has finished: there is nothing to suspend or resume."""


@dataclass
class StoredJob:
    """One row of ``jobs`` with its JSON columns parsed."""

    key: str
    namespace: str
    name: str
    seq: int
    created: float
    spec: AdaptiveJobSpec
    status: AdaptiveJobStatus
    token: str
    desired: list[str] | None = None
    restart_after: float | None = None
    deleted: bool = False
    rev: int = 0
    hints: Hints | None = None

    def status_with_hints(self) -> AdaptiveJobStatus:
        """The status as users see it: the last hints report merged in."""
        if self.hints is None:
            return self.status
        from adl.controller.status_hints import show_hints

        st = self.status.model_copy()
        st.hints = self.hints
        show_hints(st, self.hints)
        return st


@dataclass
class GroupRecord:
    """One launched worker group (the local equivalent of a pod)."""

    key: str
    group: int
    replicas: int
    pid: int | None
    start_ticks: int | None
    port: int | None
    devices: list[int] = field(default_factory=list)
    started: float = 0.0
    ended: float | None = None
    codes: list[int] | None = None


@dataclass(frozen=True)
class Event:
    key: str
    ts: float
    type: str
    reason: str
    message: str


class Store:
    """Thread-safe access to the state database (one connection, one lock per process)."""

    #: FAULT-INJECTION SEAM, for tests only: when set, every commit fails with
    #: ``sqlite3.OperationalError(fail_writes)`` as on a full disk or a read-only file (chmod
    #: cannot make a file unwritable for root, who runs the tests in CI). Never set otherwise.
    fail_writes: str | None = None

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        #: why the last write failed (None once one succeeds): the state on disk may be stale
        self.write_error: str | None = None
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        # SQLite creates the database with the process's umask (the CLI's may be 022) and its
        # WAL and shared-memory files with the database's mode: created 0600 here, all three
        # are private, whichever process comes first
        create_private(self.path)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(
            str(self.path), timeout=30.0, check_same_thread=False, isolation_level=None
        )
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(SCHEMA)
        except sqlite3.OperationalError:  # locked, unwritable: not the file's content
            self._db.close()
            raise
        except sqlite3.DatabaseError as err:
            self._db.close()
            raise StateUnreadable(
                f"{self.path} is not a readable adl state database ({err}): move it aside"
                f" (mv {self.path} {self.path}.corrupt) to start again with no jobs"
            ) from None

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction: writers serialize, readers never see half a change."""
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    yield self._db
                    if self.fail_writes is not None:  # fault injection (tests): see fail_writes
                        raise sqlite3.OperationalError(self.fail_writes)
                    self._db.execute("COMMIT")
                except BaseException:
                    # a COMMIT that failed (disk full) may leave the transaction open: every
                    # later BEGIN would then fail too, long after the disk has space again
                    if self._db.in_transaction:
                        with suppress(sqlite3.Error):
                            self._db.execute("ROLLBACK")
                    raise
            except sqlite3.Error as err:
                self._write_failed(err)
                raise
            if self.write_error is not None:
                log.warning("the state database %s can be written again", self.path)
                self.write_error = None

    def _write_failed(self, err: sqlite3.Error) -> None:
        text = f"{type(err).__name__}: {err}"
        if text != self.write_error:  # once per new error, not once per retry
            log.error("cannot write the state database %s (%s); retrying", self.path, text)
        self.write_error = text

    def probe_write(self) -> str | None:
        """Commit a tiny write; None when it worked, else why not (disk full, read-only): the
        database stays readable then, but what it says may be stale."""
        try:
            self.set_meta("write_probe", repr(time.time()))
        except sqlite3.Error as err:
            return f"{type(err).__name__}: {err}"
        return None

    def _query(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return list(self._db.execute(sql, args).fetchall())

    # ------------------------------------------------------------------ jobs

    def add_job(self, namespace: str, name: str, spec: AdaptiveJobSpec) -> StoredJob:
        key = job_key(namespace, name)
        text = _spec_text(spec)
        now = time.time()
        token = secrets.token_urlsafe(32)
        status = AdaptiveJobStatus()
        with self._tx() as db:
            row = db.execute("SELECT deleted FROM jobs WHERE key=?", (key,)).fetchone()
            if row and row[0]:
                raise JobExists(
                    f"job {key} was deleted and its workers are still stopping;"
                    " submit it again in a few seconds"
                )
            if row:
                raise JobExists(f"job {key} already exists (delete it first)")
            (seq,) = db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM jobs").fetchone()
            db.execute(
                "INSERT INTO jobs (key, namespace, name, seq, created, spec, status, token, rev)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, 1)",
                (key, namespace, name, seq, now, text, _dump(status), token),
            )
            _event(
                db,
                key,
                "Normal",
                "Submitted",
                f"{spec.min_replicas}-{spec.max_replicas} replicas requested",
            )
        return self.job(key)

    def job(self, key: str) -> StoredJob:
        rows = self._query(f"SELECT {_JOB_COLS} FROM jobs WHERE key=?", (key,))
        if not rows:
            raise JobNotFound(key)
        return _job(rows[0])

    def jobs(
        self, namespace: str | None = None, *, include_deleted: bool = False
    ) -> list[StoredJob]:
        sql = f"SELECT {_JOB_COLS} FROM jobs"
        where, args = [], []
        if namespace is not None:
            where.append("namespace=?")
            args.append(namespace)
        if not include_deleted:
            where.append("deleted=0")
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [_job(r) for r in self._query(sql + " ORDER BY seq", tuple(args))]

    def revisions(self) -> dict[str, int]:
        """key -> rev for every job; the daemon reloads rows whose rev moved."""
        return {k: r for k, r in self._query("SELECT key, rev FROM jobs")}

    def set_status(
        self,
        key: str,
        status: AdaptiveJobStatus,
        *,
        restart_after: float | None = None,
        events: list[tuple[str, str, str]] | None = None,
    ) -> None:
        """The daemon's write: status (without hints, which the API owns) plus its events."""
        body = status.model_copy()
        body.hints = None
        with self._tx() as db:
            db.execute(
                "UPDATE jobs SET status=?, restart_after=?, rev=rev+1 WHERE key=?",
                (_dump(body), restart_after, key),
            )
            for type_, reason, message in events or []:
                _event(db, key, type_, reason, message)

    def set_desired(self, desired: dict[str, list[str]]) -> None:
        """The scheduler's answer for several jobs at once (one transaction)."""
        with self._tx() as db:
            for key, alloc in desired.items():
                db.execute(
                    "UPDATE jobs SET desired=?, rev=rev+1 WHERE key=?", (json.dumps(alloc), key)
                )

    def set_service(self, service: Mapping[str, float]) -> None:
        """Attained service (GPU-seconds) of several jobs, written into their stored status.
        The revision is left alone: the daemon that writes it already holds the value."""
        with self._tx() as db:
            for key, seconds in service.items():
                db.execute(
                    "UPDATE jobs SET status=json_set(status, '$.attainedServiceS', ?) WHERE key=?",
                    (float(seconds), key),
                )

    def set_suspend(self, key: str, suspend: bool) -> bool:
        """Set ``spec.suspend`` (the user's write, like ``kubectl patch``); False when it already
        was. The daemon stops a suspended job's workers (checkpointed, no restart counted) and
        starts a resumed one again on the next round's answer."""
        with self._tx() as db:
            row = db.execute(
                "SELECT spec, status FROM jobs WHERE key=? AND deleted=0", (key,)
            ).fetchone()
            if row is None:
                raise JobNotFound(key)
            spec = AdaptiveJobSpec.model_validate_json(row[0], context={"stored": True})
            if _load(AdaptiveJobStatus, row[1]).phase.finished:
                raise JobFinished(key)
            if spec.suspend == suspend:
                return False
            spec = spec.model_copy(update={"suspend": suspend})
            db.execute("UPDATE jobs SET spec=?, rev=rev+1 WHERE key=?", (_dump(spec), key))
            what = ("Suspending", "suspension requested") if suspend else ("Resuming", "resumed")
            _event(db, key, "Normal", *what)
        return True

    def set_hints(self, key: str, hints: Hints) -> None:
        with self._tx() as db:
            cur = db.execute("UPDATE jobs SET hints=?, rev=rev+1 WHERE key=?", (_dump(hints), key))
            if cur.rowcount == 0:
                raise JobNotFound(key)

    def mark_deleted(self, key: str) -> None:
        with self._tx() as db:
            row = db.execute("SELECT deleted FROM jobs WHERE key=?", (key,)).fetchone()
            if row is None:
                raise JobNotFound(key)
            if row[0]:  # asked again while its workers stop: nothing new to record
                return
            db.execute("UPDATE jobs SET deleted=1, rev=rev+1 WHERE key=?", (key,))
            _event(db, key, "Normal", "Deleting", "deletion requested")

    def purge(self, key: str) -> None:
        """Forget a deleted job once its workers are gone."""
        with self._tx() as db:
            db.execute("DELETE FROM jobs WHERE key=?", (key,))
            db.execute("DELETE FROM groups WHERE key=?", (key,))
            db.execute("DELETE FROM events WHERE key=?", (key,))

    def tokens(self) -> list[tuple[str, str]]:
        """(job key, bearer token) of every job, deleted ones included (their workers report
        while they stop): the API's token check, without reading every job's spec and status."""
        return [(str(k), str(t)) for k, t in self._query("SELECT key, token FROM jobs")]

    # ------------------------------------------------------------------ groups

    def add_group(self, rec: GroupRecord) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO groups (key, grp, replicas, pid, start_ticks, port,"
                " devices, started, ended, codes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    rec.key,
                    rec.group,
                    rec.replicas,
                    rec.pid,
                    rec.start_ticks,
                    rec.port,
                    json.dumps(rec.devices),
                    rec.started,
                    rec.ended,
                    None if rec.codes is None else json.dumps(rec.codes),
                ),
            )

    def end_group(self, key: str, group: int, codes: list[int], ended: float) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE groups SET ended=?, codes=? WHERE key=? AND grp=? AND ended IS NULL",
                (ended, json.dumps(codes), key, group),
            )

    def groups(self, key: str | None = None, *, live_only: bool = False) -> list[GroupRecord]:
        sql = f"SELECT {_GROUP_COLS} FROM groups"
        where, args = [], []
        if key is not None:
            where.append("key=?")
            args.append(key)
        if live_only:
            where.append("ended IS NULL")
        if where:
            sql += " WHERE " + " AND ".join(where)
        return [_group(r) for r in self._query(sql + " ORDER BY key, grp", tuple(args))]

    # ------------------------------------------------------------------ events, meta

    def events(self, key: str, limit: int = 50) -> list[Event]:
        rows = self._query(
            "SELECT key, ts, type, reason, message FROM events WHERE key=? ORDER BY id DESC"
            " LIMIT ?",
            (key, limit),
        )
        return [Event(*r) for r in reversed(rows)]

    def add_event(self, key: str, type_: str, reason: str, message: str) -> None:
        with self._tx() as db:
            _event(db, key, type_, reason, message)

    def get_meta(self, k: str) -> str | None:
        rows = self._query("SELECT v FROM meta WHERE k=?", (k,))
        return str(rows[0][0]) if rows else None

    def set_meta(self, k: str, v: str) -> None:
        with self._tx() as db:
            db.execute("INSERT OR REPLACE INTO meta (k, v) VALUES (?, ?)", (k, v))


# ---------------------------------------------------------------------- row helpers

_JOB_COLS = (
    "key, namespace, name, seq, created, spec, status, token, desired, restart_after, deleted,"
    " rev, hints"
)
_GROUP_COLS = "key, grp, replicas, pid, start_ticks, port, devices, started, ended, codes"


def _dump(model: Any) -> str:
    return json.dumps(model.model_dump(mode="json", by_alias=True, exclude_none=True))


def _spec_text(spec: AdaptiveJobSpec) -> str:
    """The stored form of a new spec, refused over the object limit whoever built the model
    (validation caps the template; a model built around it must not reach every read)."""
    if oversized(spec.template):
        raise ValueError(f"spec is larger than {limit_text()} (the limit of a Kubernetes object)")
    text = _dump(spec)
    if len(text.encode()) > MAX_OBJECT_BYTES:
        raise ValueError(f"spec is {len(text.encode())} bytes, larger than {limit_text()}")
    return text


def _finite(value: Any) -> Any:
    """``value`` parsed from JSON with every NaN or infinity left out (earlier versions stored
    them; the models now refuse them)."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _load(model: type[M], text: str) -> M:
    try:
        return model.model_validate_json(text)
    except ValidationError:
        return model.model_validate(_finite(json.loads(text, parse_constant=lambda _: None)))


def _hints(text: str | None) -> Hints | None:
    """The stored report; one the models no longer accept is dropped (the job reports again
    within seconds) rather than make every read of the jobs fail."""
    if text is None:
        return None
    try:
        return _load(Hints, text)
    except ValidationError as err:
        log.warning("dropping a stored report the models refuse: %s", err)
        return None


def _job(row: tuple[Any, ...]) -> StoredJob:
    (key, ns, name, seq, created, spec, status, token, desired, ra, deleted, rev, hints) = row
    return StoredJob(
        key=key,
        namespace=ns,
        name=name,
        seq=int(seq),
        created=float(created),
        # stored by this or an earlier version, whose rules were looser in places
        spec=AdaptiveJobSpec.model_validate_json(spec, context={"stored": True}),
        status=_load(AdaptiveJobStatus, status),
        token=token,
        desired=None if desired is None else [str(n) for n in json.loads(desired)],
        restart_after=ra,
        deleted=bool(deleted),
        rev=int(rev),
        hints=_hints(hints),
    )


def _group(row: tuple[Any, ...]) -> GroupRecord:
    key, grp, replicas, pid, ticks, port, devices, started, ended, codes = row
    return GroupRecord(
        key=key,
        group=int(grp),
        replicas=int(replicas),
        pid=pid,
        start_ticks=ticks,
        port=port,
        devices=json.loads(devices) if devices else [],
        started=float(started),
        ended=ended,
        codes=None if codes is None else [int(c) for c in json.loads(codes)],
    )


def _event(db: sqlite3.Connection, key: str, type_: str, reason: str, message: str) -> None:
    db.execute(
        "INSERT INTO events (key, ts, type, reason, message) VALUES (?, ?, ?, ?, ?)",
        (key, time.time(), type_, reason, message),
    )
