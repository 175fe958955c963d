"""The local daemon: this machine as a one-node cluster with its GPUs (or N CPU slots).

Every tick it observes each job's worker groups (shim pidfiles and result files, which survive
a daemon restart), runs the controller's pure lifecycle step and executes the actions: create a
group (launch the shim with the worker environment), stop a group (SIGTERM the process group,
SIGKILL after the grace period), record status and events in SQLite. Every few seconds, and at
once when a job arrives or ends, it runs the scheduling round with the policy. The API service
(hints, rendezvous, metrics) runs in the same process on a 127.0.0.1 port, the previous daemon's
when it is free (adopted workers know only that one).

``python -m adl.local.daemon --home DIR --slots N``; usually started by ``adl local up`` or on
demand by the CLI. A second daemon for the same home refuses to start (file lock).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from adl.contract import CLEAN_EXITS
from adl.controller.actions import Action, CreateGroup, DeleteGroup, EmitEvent, SetStatus
from adl.controller.env import WorkerSite
from adl.controller.lifecycle import (
    ObservedWorkers,
    ReplicaPhase,
    ReplicaState,
    Timing,
    step,
    teardown,
)
from adl.controller.rounds import JobRecord as RoundJob
from adl.controller.rounds import RoundLog, accrue_service, run_round
from adl.local import processes as P
from adl.local.client import DB_NAME, LOCK_NAME, PID_NAME, cannot_fit
from adl.local.store import GroupRecord, JobRecord, StateUnreadable, Store, default_home
from adl.models import Phase
from adl.sched.policy_knobs import parse_knobs
from adl.sched.types import NodeInfo, Policy

log = logging.getLogger("adl.local")

NODE = "local"
#: Seconds after a group's launch before the job's next warm shim starts (so its imports do not
#: compete with the new group's start).
WARM_DELAY_S = 2.0


def visible_gpus() -> list[str] | None:
    """The daemon's own ``CUDA_VISIBLE_DEVICES`` entries (indices, UUIDs or MIG ids, kept as
    given), or None when it is unset and every GPU of the machine is ours."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return None
    return [d.strip() for d in visible.split(",") if d.strip() and d.strip() != "-1"]


def gpu_ids(count: int) -> list[str]:
    """What GPU slot i is called in a rank's ``CUDA_VISIBLE_DEVICES``: entry i of the daemon's
    own list (a daemon given GPUs 2,3 hands out 2 and 3, not 0 and 1), else i."""
    visible = visible_gpus()
    return visible[:count] if visible is not None else [str(i) for i in range(count)]


def detect_gpus() -> int:
    """NVIDIA GPUs visible on this machine, without importing torch."""
    visible = visible_gpus()
    if visible is not None:
        return len(visible)
    nvsmi = shutil.which("nvidia-smi")
    if nvsmi is None:
        return 0
    try:
        out = subprocess.run([nvsmi, "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


@dataclass
class Settings:
    home: Path
    slots: int = 4
    gpus: int = 0  # > 0: slots are GPUs, each group gets CUDA_VISIBLE_DEVICES
    round_s: float = 5.0
    tick_s: float = 0.2
    api: bool = True
    timing: Timing = field(default_factory=Timing)
    kill_margin_s: float = 5.0  # SIGKILL the group this long after its grace period
    prewarm: bool = True  # CPU slots: keep the next group's shim ready (torch imported)


def _default_policy(knobs: Mapping[str, float] | None = None) -> Policy:
    from adl.sched.policy import AdlPolicy

    policy: Policy = AdlPolicy(seed=0, **dict(knobs or {}))
    return policy


class Daemon:
    """One daemon per state directory; ``run()`` blocks until ``stop()`` or SIGTERM."""

    def __init__(
        self, settings: Settings, policy_factory: Callable[[], Policy] = _default_policy
    ) -> None:
        self.s = settings
        self.home = settings.home
        self.store = Store(self.home / DB_NAME)
        self.policy = policy_factory()
        self.capacity = settings.gpus or settings.slots
        self.jobs: dict[str, JobRecord] = {}
        self._revs: dict[str, int] = {}
        self._children: dict[tuple[str, int], subprocess.Popen[bytes]] = {}
        self._warm: dict[str, tuple[P.GroupProcess, subprocess.Popen[bytes]]] = {}
        self._warm_after: dict[str, float] = {}
        self._told_unfit: set[str] = set()
        self._step_errors: dict[str, str] = {}  # job -> the last error its step raised
        #: (job, group) -> (replicas, why) for groups whose launch failed: failed starts
        self._unstarted: dict[tuple[str, int], tuple[int, str]] = {}
        self._stop = threading.Event()
        self._round_due = True
        self._last_round = 0.0
        self._last_accrue = time.monotonic()
        self.rounds = RoundLog()
        self.api_url = ""
        self._server: Any = None
        self._api_thread: threading.Thread | None = None
        self.metrics: Any = None  # adl.api.metrics.AdlMetrics once the API runs
        self._lock_fh: Any = None

    # ------------------------------------------------------------------ lifecycle of the daemon

    def acquire(self) -> None:
        """Take the home's lock (exactly one daemon per home) and record our pid."""
        self.home.mkdir(parents=True, exist_ok=True)
        fh = open(self.home / LOCK_NAME, "a+")  # noqa: SIM115
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            raise SystemExit(f"another adl daemon already serves {self.home}") from None
        self._lock_fh = fh
        (self.home / PID_NAME).write_text(f"{os.getpid()}\n")

    def run(self) -> None:
        self.acquire()
        try:
            self.reload()
            self.recover()
            if self.s.api:
                self.start_api()
            self.store.set_meta("api_url", self.api_url)
            self.store.set_meta("slots", str(self.capacity))
            self.store.set_meta("daemon_pid", str(os.getpid()))
            log.info(
                "adl daemon serving %s with %d slots, api %s",
                self.home,
                self.capacity,
                self.api_url or "off",
            )
            while not self._stop.is_set():
                t0 = time.monotonic()
                try:
                    self.tick()
                except Exception:
                    log.exception("tick failed")
                self._stop.wait(max(self.s.tick_s - (time.monotonic() - t0), 0.01))
        finally:
            self.shutdown()

    def stop(self) -> None:
        self._stop.set()

    def shutdown(self) -> None:
        """Leave workers running (the next daemon adopts them); release the lock."""
        if self._server is not None:
            self._server.should_exit = True
            if self._api_thread is not None:  # requests in flight finish before the store closes
                self._api_thread.join(timeout=5)
        for key in list(self._warm):  # idle warm shims are not workers: nothing to adopt
            if key in self.jobs:
                self.drop_warm(self.jobs[key])
        with contextlib.suppress(Exception):
            self.store.set_meta("daemon_pid", "")
        for proc in self._children.values():
            with contextlib.suppress(Exception):
                proc.poll()
        if self._lock_fh is not None:
            with contextlib.suppress(Exception):
                (self.home / PID_NAME).unlink(missing_ok=True)
            self._lock_fh.close()
            self._lock_fh = None
        self.store.close()

    def start_api(self) -> None:
        """Serve the API (hints, rendezvous, metrics) on 127.0.0.1, on the previous daemon's
        port when it is free."""
        try:
            from adl.local.api_store import build_app
        except ImportError as err:  # the API package is optional for the daemon
            log.warning("API disabled: %s", err)
            return
        import uvicorn

        app = build_app(self)
        sock = self._api_socket()
        port = int(sock.getsockname()[1])
        config = uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"
        )
        server = uvicorn.Server(config)
        thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name="adl-api", daemon=True
        )
        thread.start()
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline and thread.is_alive():
            time.sleep(0.02)
        self._server, self._api_thread = server, thread
        self.api_url = f"http://127.0.0.1:{port}"

    def _api_socket(self) -> socket.socket:
        """A socket bound to the port recorded by the previous daemon, else to a free one.
        Workers read ``ADL_API_URL`` once at start, so adopted groups reach the API only if it
        stays where it was."""
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT, not a listener
        previous = None
        with contextlib.suppress(ValueError):
            previous = urlsplit(self.store.get_meta("api_url") or "").port
        if previous:
            try:
                sock.bind(("127.0.0.1", previous))
                return sock
            except OSError as err:
                log.warning(
                    "API port %d of the previous daemon is taken (%s): running groups report "
                    "to the API again only after their next restart",
                    previous,
                    err,
                )
        sock.bind(("127.0.0.1", 0))
        return sock

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

    def paths(self, rec: JobRecord) -> P.GroupPaths:
        return P.GroupPaths.for_job(self.home, rec.namespace, rec.name)

    def recover(self) -> None:
        """After a restart: stop every live group that is not the current one of an unfinished
        job (orphans of a resize the previous daemon did not finish), before launching
        anything. The current group of a running job is adopted as it is."""
        for rec in self.jobs.values():
            paths = self.paths(rec)
            P.drop_warm(paths)  # a warm shim nobody handed a plan to yet: not a group
            known = {g.group for g in self.store.groups(rec.key)}
            for g in paths.recorded_groups():
                proc = P.read_pidfile(paths.pidfile(g))
                if proc is None or paths.result(g).exists() or not P.group_alive(proc):
                    continue
                if g not in known:
                    self._restore_group_row(rec, g, proc)
                current = g == rec.status.group and not rec.status.phase.finished
                if not current or rec.deleted:
                    log.info("stopping orphan group %d of %s", g, rec.key)
                    self.stop_group(rec, g, rec.spec.termination_grace_period_seconds)

    def _restore_group_row(self, rec: JobRecord, group: int, proc: P.GroupProcess) -> None:
        """Record a live group the previous daemon launched but was killed before recording:
        the slot gate and the SIGKILL escalation know groups only from the table."""
        plan_path = self.paths(rec).plan(group)
        ranks = (P.read_json(plan_path) or {}).get("ranks", [])
        env = ranks[0].get("env", {}) if ranks else {}
        ids = gpu_ids(self.s.gpus)
        given = env.get("CUDA_VISIBLE_DEVICES", "").split(",") if self.s.gpus else []
        log.info("recording group %d of %s, launched by the previous daemon", group, rec.key)
        self.store.add_group(
            GroupRecord(
                rec.key,
                group,
                len(ranks),
                proc.pid,
                proc.start_ticks,
                int(env.get("ADL_MASTER_PORT") or 0) or None,
                [ids.index(d) for d in given if d in ids],
                started=plan_path.stat().st_mtime if plan_path.exists() else time.time(),
            )
        )

    # ------------------------------------------------------------------ observation

    def observe(self, rec: JobRecord) -> ObservedWorkers:
        """Every replica of every recorded group, from the shims' files."""
        paths = self.paths(rec)
        out: list[ReplicaState] = []
        for g in paths.recorded_groups():
            child = self._children.get((rec.key, g))
            if child is not None and child.poll() is not None:
                del self._children[(rec.key, g)]
            result = P.read_result(paths.result(g))
            n = self._group_size(rec, g)
            if result is not None:
                codes = [int(c) if c is not None else -9 for c in result.get("codes", [])]
                for rank, code in enumerate(codes):
                    bad = code not in CLEAN_EXITS
                    msg = self._failure_text(paths, g, rank, code) if bad else ""
                    out.append(ReplicaState.exited(g, rank, code, msg))
                self._record_end(rec, g, codes, float(result.get("ended", time.time())))
                continue
            proc = P.read_pidfile(paths.pidfile(g))
            terminating = paths.pidfile(g).with_suffix(".stop").exists()
            alive = proc is not None and P.group_alive(proc)
            if not alive and paths.result(g).exists():
                continue  # it finished between the two reads; the next tick sees the result
            if alive:
                out += [
                    ReplicaState(g, r, ReplicaPhase.RUNNING, terminating=terminating)
                    for r in range(n)
                ]
            else:  # the shim died without a record (SIGKILL): its ranks count as killed
                codes = [-9] * n
                out += [ReplicaState.exited(g, r, -9, f"group {g} was killed") for r in range(n)]
                self._record_end(rec, g, codes, time.time())
                P.write_result_if_missing(paths.result(g), codes)
        for (key, g), (n, why) in self._unstarted.items():
            if key == rec.key:
                failed = ReplicaPhase.FAILED
                out += [
                    ReplicaState(g, r, failed, False, None, "StartFailed", why) for r in range(n)
                ]
        return ObservedWorkers(tuple(out))

    @staticmethod
    def _failure_text(paths: P.GroupPaths, group: int, rank: int, code: int) -> str:
        """Why a rank failed, for ``adl describe``: its exit and the last line it printed in
        this group (none: just the exit)."""
        what = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
        tail = P.group_last_line(paths.log(rank), group, rank)
        return f"rank {rank} {what}" + (f": {tail}" if tail else "")

    def _group_size(self, rec: JobRecord, group: int) -> int:
        plan = P.read_json(self.paths(rec).plan(group))
        return len(plan.get("ranks", [])) if plan else 0

    def _record_end(self, rec: JobRecord, group: int, codes: list[int], ended: float) -> None:
        self.store.end_group(rec.key, group, codes, ended)

    def live_slots(self, exclude: str | None = None) -> tuple[int, set[int]]:
        """(slots held by live groups of other jobs, their device indices)."""
        used, devices = 0, set()
        for g in self.store.groups(live_only=True):
            if g.key == exclude:
                continue
            rec = self.jobs.get(g.key)
            if rec is None:
                continue
            proc = P.GroupProcess(g.pid or 0, g.start_ticks or 0)
            if g.pid and P.group_alive(proc):
                used += g.replicas
                devices.update(g.devices)
        return used, devices

    # ------------------------------------------------------------------ actions

    def launch(self, rec: JobRecord, action: CreateGroup) -> bool:
        """Start the group unless its slots are still held by another job's group (then the
        next tick retries: the lifecycle re-issues CreateGroup for missing replicas). A group
        whose files cannot be written is observed as a failed start from then on."""
        paths = self.paths(rec)
        if paths.pidfile(action.group).exists():
            return True  # already launched (a re-issued create after a restart)
        need = len(action.allocation)
        used, taken = self.live_slots(exclude=rec.key)
        if used + need > self.capacity:
            return False
        devices = [d for d in range(self.s.gpus) if d not in taken][:need] if self.s.gpus else []
        try:
            proc, child, port = self._spawn(rec, action, devices)
        except OSError as err:  # its files cannot be written (disk full, a path taken)
            why = f"group {action.group} could not start: {err}"
            log.warning("%s: %s", rec.key, why)
            self._unstarted[(rec.key, action.group)] = (need, why)
            return False
        if child is not None:
            self._children[(rec.key, action.group)] = child
        # the standing warm shim for the next resize waits until this group is under way
        self._warm_after[rec.key] = time.monotonic() + WARM_DELAY_S
        self.store.add_group(
            GroupRecord(
                rec.key,
                action.group,
                need,
                proc.pid,
                proc.start_ticks,
                port,
                devices,
                started=time.time(),
            )
        )
        return True

    def _spawn(
        self, rec: JobRecord, action: CreateGroup, devices: list[int]
    ) -> tuple[P.GroupProcess, subprocess.Popen[bytes] | None, int]:
        """Write the group's files and start its shim (or hand the plan to the warm one):
        the shim, the Popen to reap it, the rendezvous port."""
        paths = self.paths(rec)
        need = len(action.allocation)
        paths.checkpoint.mkdir(parents=True, exist_ok=True)
        if not paths.token.exists():
            paths.token.write_text(rec.token)
            paths.token.chmod(0o600)
        port = P.free_port()
        site = WorkerSite(
            master_addr="127.0.0.1",
            master_port=port,
            checkpoint_dir=str(paths.checkpoint),
            api_url=self.api_url,
            token_file=str(paths.token) if self.api_url else "",
        )
        trainer = rec.spec.trainer
        argv = [*(trainer.get("command") or []), *(trainer.get("args") or [])]
        base = self._base_env(trainer, need)
        if devices:
            ids = gpu_ids(self.s.gpus)
            base["CUDA_VISIBLE_DEVICES"] = ",".join(ids[d] for d in devices)
        ranks = [
            {"rank": r, "argv": argv, "env": {**base, **action.env(r, site)}} for r in range(need)
        ]
        grace = float(rec.spec.termination_grace_period_seconds)
        warm = self._warm.pop(rec.key, None)
        try:
            proc, child = P.launch(
                paths,
                action.group,
                ranks,
                grace_s=grace,
                cwd=trainer.get("workingDir"),
                warm=warm[0] if warm is not None else None,
            )
        except OSError:
            if warm is not None:  # not handed this plan: it can still serve the next group
                self._warm[rec.key] = warm
            raise
        if child is None and warm is not None:
            child = warm[1]  # the warm shim became this group's shim
        return proc, child, port

    def prewarm(self, rec: JobRecord) -> None:
        """Start the job's next shim now, importing torch while the old group checkpoints."""
        from adl.local.warm import script_of

        if not self.s.prewarm or self.s.gpus or rec.key in self._warm:
            # with GPUs, forking after torch is loaded risks a CUDA state the ranks cannot
            # re-initialize: GPU groups start cold
            return
        trainer = rec.spec.trainer
        argv = [*(trainer.get("command") or []), *(trainer.get("args") or [])]
        env, cwd = self._base_env(trainer, 0), trainer.get("workingDir")
        if script_of(argv, env.get("PATH", os.defpath), cwd) is None:
            return
        try:
            self._warm[rec.key] = P.prewarm(self.paths(rec), env, cwd)
        except OSError as err:
            log.warning("no warm start for %s: %s", rec.key, err)

    def drop_warm(self, rec: JobRecord) -> None:
        warm = self._warm.pop(rec.key, None)
        if warm is not None:
            P.drop_warm(self.paths(rec), warm[0])
            with contextlib.suppress(Exception):
                warm[1].wait(timeout=5)

    def _base_env(self, trainer: dict[str, Any], replicas: int) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ADL_")}
        # `python` in a job is the interpreter adl runs under (the one that has adl and torch;
        # what a warm shim forks into anyway), as if its environment were activated
        bindir = os.path.dirname(sys.executable)
        path = env.get("PATH", "")
        if bindir and path.split(os.pathsep)[0] != bindir:
            env["PATH"] = os.pathsep.join([bindir, path]) if path else bindir
        for item in trainer.get("env") or []:
            if isinstance(item, dict) and "name" in item:
                env[str(item["name"])] = str(item.get("value", ""))
        if not self.s.gpus and "OMP_NUM_THREADS" not in env:
            cpus = os.cpu_count() or 1
            env["OMP_NUM_THREADS"] = str(max(cpus // max(self.capacity, 1), 1))
        del replicas
        return env

    def stop_group(self, rec: JobRecord, group: int, grace_s: float) -> None:
        """SIGTERM the group once; the stop marker remembers it across daemon restarts."""
        paths = self.paths(rec)
        proc = P.read_pidfile(paths.pidfile(group))
        marker = paths.pidfile(group).with_suffix(".stop")
        if proc is None:
            return
        if not marker.exists():
            marker.write_text(f"{time.time() + grace_s + self.s.kill_margin_s}\n")
            P.signal_group(proc.pid, signal.SIGTERM)

    def escalate(self) -> None:
        """SIGKILL groups still alive past their stop deadline."""
        now = time.time()
        for g in self.store.groups(live_only=True):
            rec = self.jobs.get(g.key)
            if rec is None or not g.pid:
                continue
            marker = self.paths(rec).pidfile(g.group).with_suffix(".stop")
            try:
                deadline = float(marker.read_text())
            except (OSError, ValueError):
                continue
            if now > deadline and P.group_alive(P.GroupProcess(g.pid, g.start_ticks or 0)):
                P.signal_group(g.pid, signal.SIGKILL)

    def reap(self) -> None:
        """Collect exited shims we launched (no zombies, even for purged jobs)."""
        for key, child in list(self._children.items()):
            if child.poll() is not None:
                del self._children[key]
        for job, (_, warm) in list(self._warm.items()):
            if warm.poll() is not None:  # it timed out or was killed
                del self._warm[job]

    def execute(self, rec: JobRecord, actions: list[Action]) -> None:
        events: list[tuple[str, str, str]] = []
        for action in actions:
            if isinstance(action, SetStatus):
                self.store.set_status(rec.key, action.status)
                rec.status = action.status.model_copy()
            elif isinstance(action, EmitEvent):
                events.append((action.type, action.reason, action.message))
            elif isinstance(action, DeleteGroup):
                self.stop_group(rec, action.group, action.grace_s)
                if rec.desired and not rec.deleted and not rec.status.phase.finished:
                    self.prewarm(rec)  # a resize or a restart: a next group will follow
            elif isinstance(action, CreateGroup):
                self.launch(rec, action)
        for type_, reason, message in events:
            self.store.add_event(rec.key, type_, reason, message)

    # ------------------------------------------------------------------ the loop

    def tick(self) -> None:
        if self.reload():
            self._round_due = True
        now_mono = time.monotonic()
        elapsed, self._last_accrue = now_mono - self._last_accrue, now_mono
        now = datetime.now(UTC)
        for rec in list(self.jobs.values()):
            try:
                self.step_job(rec, now, elapsed)
                self._step_errors.pop(rec.key, None)
            except Exception as err:  # one job's trouble must not stop the others
                if self._step_errors.get(rec.key) != repr(err):  # once per new error, not per tick
                    self._step_errors[rec.key] = repr(err)
                    log.exception("step of %s failed", rec.key)
        self.escalate()
        self.reap()
        if self._round_due or now_mono - self._last_round >= self.s.round_s:
            self.schedule(now)
        self.reload()

    def step_job(self, rec: JobRecord, now: datetime, elapsed: float) -> None:
        observed = self.observe(rec)
        if rec.deleted or rec.status.phase.finished:
            self.drop_warm(rec)
        if rec.deleted:
            self.execute(rec, teardown(rec.key, rec.spec, observed))
            if not observed.any_present():
                # files first: once the row is gone, nothing of the job is left anywhere (a
                # daemon killed in between finds the row again and finishes the removal)
                shutil.rmtree(self.paths(rec).root, ignore_errors=True)
                self.store.purge(rec.key)
                self._told_unfit.discard(rec.key)
                self._step_errors.pop(rec.key, None)
                for unstarted in [k for k in self._unstarted if k[0] == rec.key]:
                    del self._unstarted[unstarted]
                self._round_due = True
            return
        if rec.status.phase.finished and not observed.any_present():
            return
        was_finished = rec.status.phase.finished
        status = rec.status_with_hints()
        status = accrue_service(status, rec.spec.gpus_per_replica, elapsed)
        actions = step(rec.key, rec.spec, status, observed, rec.desired, now, self.s.timing)
        if status.attained_service_s != rec.status.attained_service_s and not any(
            isinstance(a, SetStatus) for a in actions
        ):
            # service accrues continuously; persist it with the next real change only
            rec.status = rec.status.model_copy(
                update={"attained_service_s": status.attained_service_s}
            )
        self.execute(rec, actions)
        if rec.status.phase == Phase.PENDING and rec.key not in self._told_unfit:
            self._tell_if_unfit(rec)
        if rec.status.phase.finished and not was_finished:
            self._round_due = True
        elif (
            rec.status.phase == Phase.RUNNING
            and rec.spec.max_replicas > rec.spec.min_replicas
            and rec.key not in self._warm
            and time.monotonic() >= self._warm_after.get(rec.key, 0.0)
        ):
            self.prewarm(rec)  # an elastic job will be resized: keep its next shim ready

    def _tell_if_unfit(self, rec: JobRecord) -> None:
        """Say once why a pending job can never start here (it was submitted to a daemon with
        more slots); the scheduler alone would leave it waiting in silence."""
        why = cannot_fit(rec.spec, self.capacity)
        if why is not None:
            self._told_unfit.add(rec.key)
            self.store.add_event(
                rec.key, "Warning", "Unschedulable", f"{why}: it cannot start until it has more"
            )

    def schedule(self, now: datetime) -> None:
        self._round_due = False
        self._last_round = time.monotonic()
        jobs = [
            RoundJob(
                key=r.key,
                spec=r.spec,
                status=r.status_with_hints(),
                created=datetime.fromtimestamp(r.created, UTC),
                desired=r.desired,
            )
            for r in self.jobs.values()
            if not r.deleted
        ]
        if not jobs:
            return
        nodes = [NodeInfo(NODE, self.capacity)]
        result = run_round(self.policy, jobs, nodes, now)
        self.rounds.add(result)
        if self.metrics is not None:
            self.metrics.observe_round(result.duration_s)
        if result.changed:
            self.store.set_desired(result.changed)
            for key, alloc in result.changed.items():
                if key in self.jobs:
                    self.jobs[key].desired = list(alloc)


def load_policy(spec: str, home: Path) -> Callable[[], Policy]:
    """``module:factory`` -> a policy factory; the factory gets the state directory when it
    accepts an argument (tests steer a policy through a file there)."""
    import importlib
    import inspect

    module, _, attr = spec.partition(":")
    factory: Callable[..., Policy] = getattr(importlib.import_module(module), attr or "Policy")
    if inspect.signature(factory).parameters:
        return lambda: factory(home)
    return factory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="adl-local-daemon", description=__doc__)
    parser.add_argument("--home", type=Path, default=None)
    parser.add_argument("--slots", type=int, default=None, help="CPU slots when no GPU")
    parser.add_argument("--gpus", type=int, default=None, help="override GPU detection")
    parser.add_argument("--round-s", type=float, default=5.0)
    parser.add_argument("--tick-s", type=float, default=0.2)
    parser.add_argument("--backoff-s", type=float, default=None, help="failure backoff base")
    parser.add_argument(
        "--policy", default=None, help="module:factory returning a Policy (default AdlPolicy)"
    )
    parser.add_argument(
        "--policy-knob",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an adl policy constant, e.g. srpt_power=0.25 (repeatable; not with --policy)",
    )
    parser.add_argument(
        "--no-prewarm", action="store_true", help="start every group from a fresh interpreter"
    )
    args = parser.parse_args(argv)
    try:
        knobs = parse_knobs(args.policy_knob)
    except ValueError as err:
        parser.error(str(err))
    if knobs and args.policy:
        parser.error("--policy-knob sets the default adl policy's constants; not with --policy")
    visible = visible_gpus()
    if args.gpus and args.slots is None and visible is not None and args.gpus > len(visible):
        parser.error(f"--gpus {args.gpus}, but CUDA_VISIBLE_DEVICES lists {len(visible)} GPUs")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    home = args.home or default_home()
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise SystemExit(f"adl daemon: cannot use {home} as the state directory: {err}") from None
    gpus = detect_gpus() if args.gpus is None else args.gpus
    timing = Timing() if args.backoff_s is None else Timing(backoff_base_s=args.backoff_s)
    settings = Settings(
        home=home,
        slots=args.slots or (gpus or 4),
        gpus=gpus if args.slots is None else 0,
        round_s=args.round_s,
        tick_s=args.tick_s,
        timing=timing,
        prewarm=not args.no_prewarm,
    )
    factory = load_policy(args.policy, home) if args.policy else partial(_default_policy, knobs)
    if knobs:
        log.info("adl policy knobs: %s", knobs)
    try:
        daemon = Daemon(settings, factory)
    except StateUnreadable as err:
        raise SystemExit(f"adl daemon: {err}") from None
    signal.signal(signal.SIGTERM, lambda *_: daemon.stop())
    signal.signal(signal.SIGINT, lambda *_: daemon.stop())
    daemon.run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
