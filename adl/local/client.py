"""The local backend as the CLI sees it: jobs go into the daemon's SQLite database, status and
events come out of it, logs are read from the per-job log files. The daemon is started on
demand (a detached process) when a job is submitted and none is running."""

from __future__ import annotations

import copy
import fcntl
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

from adl.jobs_api import BackendError, JobView
from adl.local.gpus import local_nodes
from adl.local.private import make_private_home, open_private_append
from adl.local.processes import GroupPaths, last_line
from adl.local.shim import write_atomic
from adl.local.store import (
    JobExists,
    JobFinished,
    JobNotFound,
    StateUnreadable,
    Store,
    StoredJob,
    default_home,
    job_key,
)
from adl.models import AdaptiveJobSpec

DB_NAME = "state.db"
LOCK_NAME = "daemon.lock"
PID_NAME = "daemon.pid"
#: the daemon flags of the last explicit ``adl local up`` (JSON), reused by on-demand starts
SETTINGS_NAME = "daemon.json"


def daemon_pid(home: Path) -> int | None:
    """The pid of the daemon serving ``home``, or None when none holds the lock."""
    lock = home / LOCK_NAME
    if not lock.exists():
        return None
    with open(lock, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                return int((home / PID_NAME).read_text().split()[0])
            except (OSError, ValueError, IndexError):
                return -1  # locked but the pidfile is not written yet
        fcntl.flock(fh, fcntl.LOCK_UN)
    return None


def ensure_home(home: Path) -> None:
    """Create the state directory; one clear error when it cannot be (a file in the way)."""
    try:
        make_private_home(home)  # the CLI may create it: private as the daemon would make it
    except OSError as err:
        why = {
            FileExistsError: "it is a file, not a directory",
            NotADirectoryError: "a file is in its path",
        }.get(type(err), err.strerror or str(err))
        raise BackendError(
            f"cannot use {home} as the adl state directory ($ADL_HOME, --home): {why}"
        ) from None


def save_settings(home: Path, args: list[str]) -> None:
    """Remember the daemon flags of an explicit ``adl local up`` in ``home``, for the daemons
    started on demand later (:func:`saved_settings`); each ``up`` replaces them."""
    ensure_home(home)
    write_atomic(home / SETTINGS_NAME, json.dumps({"args": args}) + "\n")


def saved_settings(home: Path) -> list[str]:
    """The daemon flags the last ``adl local up`` in ``home`` gave ([] when none or unreadable)."""
    try:
        data = json.loads((home / SETTINGS_NAME).read_text())
    except (OSError, ValueError):
        return []
    args = data.get("args") if isinstance(data, dict) else None
    return [str(a) for a in args] if isinstance(args, list) else []


def start_daemon(
    home: Path,
    *,
    slots: int | None = None,
    round_s: float | None = None,
    wait_s: float = 30.0,
    extra_args: list[str] | None = None,
    reuse_settings: bool = False,
) -> int:
    """Start a detached daemon for ``home`` unless one runs; wait until it serves. Returns its
    pid. ``reuse_settings``: an on-demand start, with the flags of the last ``adl local up``
    (those given here win)."""
    pid = daemon_pid(home)
    if pid is not None and pid > 0 and _serving(home, pid):
        return pid
    ensure_home(home)
    log_path = home / "daemon.log"
    proc = None
    if pid is None:
        args = [sys.executable, "-m", "adl.local.daemon_main", "--home", str(home)]
        args += saved_settings(home) if reuse_settings else []
        if slots is not None:
            args += ["--slots", str(slots)]
        if round_s is not None:
            args += ["--round-s", str(round_s)]
        args += extra_args or []
        log = open_private_append(log_path)  # this process's umask may be lax
        try:
            proc = subprocess.Popen(
                args,
                start_new_session=True,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                close_fds=True,
            )
        finally:
            os.close(log)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        pid = daemon_pid(home)
        if pid is not None and pid > 0 and _serving(home, pid):
            return pid
        if proc is not None and proc.poll() is not None and pid is None:
            # it gave up (its last line says why) and no other daemon took over
            raise BackendError(f"the local daemon did not start: {last_line(log_path, 2000)}")
        time.sleep(0.05)
    raise BackendError(f"the local daemon did not start; see {log_path}")


def _serving(home: Path, pid: int) -> bool:
    """The daemon with ``pid`` finished starting (it records itself last)."""
    db = home / DB_NAME
    if not db.exists():
        return False
    store = Store(db)
    try:
        return store.get_meta("daemon_pid") == str(pid)
    finally:
        store.close()


def stop_daemon(home: Path, timeout_s: float = 30.0) -> bool:
    """SIGTERM the daemon (workers keep running and are adopted by the next one). True when a
    daemon was stopped."""
    import signal

    pid = daemon_pid(home)
    if pid is None or pid <= 0:
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and daemon_pid(home) is not None:
        time.sleep(0.05)
    return daemon_pid(home) is None


def kill_workers(home: Path) -> int:
    """SIGKILL every worker group and warm shim recorded under ``home`` that is still alive:
    for a home being abandoned (the daemon stops workers itself; they outlive it by design).
    Returns how many were killed."""
    import signal

    from adl.local.processes import group_alive, read_pidfile, signal_group

    killed = 0
    for pidfile in [*home.glob("jobs/*/*/groups/g*.pid"), *home.glob("jobs/*/*/groups/warm-*.pid")]:
        proc = read_pidfile(pidfile)
        if proc is not None and group_alive(proc):
            signal_group(proc.pid, signal.SIGKILL)
            killed += 1
    return killed


def view(rec: StoredJob, events: bool = False, store: Store | None = None) -> JobView:
    evs: list[str] = []
    if events and store is not None:
        for e in store.events(rec.key):
            ts = datetime.fromtimestamp(e.ts, UTC).strftime("%H:%M:%S")
            evs.append(f"{ts} {e.type} {e.reason}: {e.message}")
    return JobView(
        name=rec.name,
        namespace=rec.namespace,
        spec=rec.spec,
        status=rec.status_with_hints(),
        created=datetime.fromtimestamp(rec.created, UTC),
        events=evs,
    )


class LocalBackend:
    """:class:`adl.jobs_api.Backend` over the local daemon's state directory. Its capabilities
    (:mod:`adl.jobs_api`): ReportsStaleness, RunsOwnController, IgnoresSettings."""

    def __init__(
        self, home: Path | str | None = None, *, autostart: bool = True, slots: int | None = None
    ) -> None:
        self.home = Path(home) if home is not None else default_home()
        self.autostart = autostart
        self.slots = slots
        self._store: Store | None = None

    @property
    def store(self) -> Store:
        if self._store is None:
            ensure_home(self.home)
            try:
                self._store = Store(self.home / DB_NAME)
            except StateUnreadable as err:
                raise BackendError(str(err)) from None
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    def submit(
        self, name: str, namespace: str, spec: AdaptiveJobSpec, *, queue: str | None = None
    ) -> JobView:
        if not spec.trainer.get("command"):
            raise BackendError(
                "the local backend runs commands, not images: set "
                "template.spec.containers[0].command"
            )
        spec = in_submitting_directory(spec)
        if self.autostart:  # first, so that its slots are known
            start_daemon(self.home, slots=self.slots, reuse_settings=True)
        slots = self.store.get_meta("slots")
        types = self.store.get_meta("gpu_types")
        slot_types = (types.split(",") if types else []) if types is not None else None
        why = cannot_fit(spec, int(slots), slot_types) if slots else None
        if why is not None:
            fix = "drop spec.gpuTypes" if "GPU types" in why else "lower minReplicas"
            raise BackendError(f"job {namespace}/{name} {why}: {fix} or give the daemon more slots")
        try:
            rec = self.store.add_job(namespace, name, spec)
        except JobExists as err:
            raise BackendError(str(err)) from None
        return view(rec)

    def list(self, namespace: str | None = None) -> list[JobView]:
        return [view(r) for r in self.store.jobs(namespace)]

    def get(self, name: str, namespace: str) -> JobView:
        try:
            rec = self.store.job(job_key(namespace, name))
        except JobNotFound:
            raise BackendError(f"job {namespace}/{name} not found") from None
        return view(rec, events=True, store=self.store)

    def delete(self, name: str, namespace: str) -> None:
        try:
            self.store.mark_deleted(job_key(namespace, name))
        except JobNotFound:
            raise BackendError(f"job {namespace}/{name} not found") from None
        if self.autostart and daemon_pid(self.home) is None:
            start_daemon(self.home, slots=self.slots, reuse_settings=True)

    def set_suspend(self, name: str, namespace: str, suspend: bool) -> bool:
        try:
            changed = self.store.set_suspend(job_key(namespace, name), suspend)
        except JobNotFound:
            raise BackendError(f"job {namespace}/{name} not found") from None
        except JobFinished:
            raise BackendError(f"job {namespace}/{name} has finished") from None
        if self.autostart and daemon_pid(self.home) is None:
            start_daemon(self.home, slots=self.slots, reuse_settings=True)
        return changed

    def logs(
        self, name: str, namespace: str, *, follow: bool = False, replica: int | None = None
    ) -> Iterator[str]:
        key = job_key(namespace, name)
        try:
            self.store.job(key)
        except JobNotFound:
            raise BackendError(f"job {namespace}/{name} not found") from None
        rank = replica or 0
        if rank < 0:
            raise BackendError(f"--replica must be >= 0, got {rank}")
        paths = GroupPaths.for_job(self.home, namespace, name)
        path = paths.log(rank)
        if not follow and not path.exists():
            ranks = sorted(
                int(p.stem[1:]) for p in paths.logs.glob("r*.log") if p.stem[1:].isdigit()
            )
            have = f"logs of ranks {', '.join(map(str, ranks))}" if ranks else "no logs yet"
            raise BackendError(f"no log of rank {rank} for {namespace}/{name} ({have})")
        return _tail(path, follow, lambda: self._finished(key))

    def _finished(self, key: str) -> bool:
        try:
            rec = self.store.job(key)
        except JobNotFound:
            return True
        if rec.status.phase.finished and not self.store.groups(key, live_only=True):
            return True
        # with no daemon nothing updates the state: the log is complete once no worker runs
        return not self.daemon_running() and not self._workers_alive(rec)

    def _workers_alive(self, rec: StoredJob) -> bool:
        from adl.local.processes import group_alive, read_pidfile

        groups = GroupPaths.for_job(self.home, rec.namespace, rec.name).root / "groups"
        for pidfile in groups.glob("g*.pid"):
            proc = read_pidfile(pidfile)
            if proc is not None and group_alive(proc):
                return True
        return False

    def daemon_running(self) -> bool:
        return daemon_pid(self.home) is not None

    def ignored_settings(self) -> frozenset[str]:
        # the command runs on this machine's file system: no image, no checkpoint volume; no
        # Kueue either (this machine's slots are the whole quota)
        return frozenset({"image", "checkpoint", "queue"})

    def stale_note(self, views: Iterable[JobView]) -> str | None:
        """What to tell the reader of ``views`` when no daemon runs: nothing updates the
        state then, so an unfinished phase shown may be long over (None when all is current)."""
        if self.daemon_running() or all(v.status.phase.finished for v in views):
            return None
        return "the local daemon is not running, so phases may be stale (start it: adl local up)"


def cannot_fit(
    spec: AdaptiveJobSpec, slots: int, gpu_types: Sequence[str] | None = None
) -> str | None:
    """Why the job can never start on a daemon with ``slots`` slots, None when it can: its
    smallest group takes minReplicas (at least one) replicas of gpusPerReplica (at least one)
    slots each, as the scheduler counts them, on one local node (GPUs of one type); and a job
    that lists GPU types needs GPUs of one of them (``gpu_types``: each GPU slot's type, ""
    where unknown; empty for CPU slots; None: not known yet, so not checked)."""
    nodes = local_nodes(slots, gpu_types or [])
    if gpu_types is not None and spec.gpu_types:
        nodes = [n for n in nodes if n.gpu_type in spec.gpu_types]
        if not nodes:
            known = sorted({t for t in gpu_types if t})
            have = f"GPUs of type {', '.join(known)}" if known else "no GPUs of a known type"
            return (
                f"may run only on GPU types {', '.join(spec.gpu_types)} "
                f"but the local daemon has {have}"
            )
    per_replica = max(spec.gpus_per_replica, 1)
    need = max(spec.min_replicas, 1) * per_replica
    room = max(n.slots for n in nodes)
    if need <= room:
        return None
    has = f"{slots}" if room == slots else f"{slots}, at most {room} GPUs of one type"
    return (
        f"needs {need} slots (minReplicas {spec.min_replicas} x {per_replica} per replica)"
        f" but the local daemon has {has}"
    )


def in_submitting_directory(spec: AdaptiveJobSpec) -> AdaptiveJobSpec:
    """The spec with the trainer's working directory made absolute against the directory the
    job is submitted from (the default when it has none), so a manifest's relative paths mean
    what they meant where it was submitted, not wherever the daemon happened to start."""
    workdir = spec.trainer.get("workingDir")
    resolved = str(Path(workdir or ".").resolve())
    if workdir == resolved:
        return spec
    template = copy.deepcopy(spec.template)
    template["spec"]["containers"][0]["workingDir"] = resolved
    return spec.model_copy(update={"template": template})


def _tail(path: Path, follow: bool, done: Callable[[], bool]) -> Iterator[str]:
    """Lines of ``path``; with ``follow``, keep reading until ``done()`` and the file is drained."""
    pos = 0
    partial = ""
    while True:
        if path.exists():
            with open(path, encoding="utf-8", errors="replace") as fh:
                fh.seek(pos)
                chunk = fh.read()
                pos = fh.tell()
            text = partial + chunk
            lines = text.split("\n")
            partial = lines.pop()
            yield from lines
        if not follow:
            if partial:
                yield partial
            return
        if done():
            follow = False
            continue
        time.sleep(0.2)
