"""The local workers: one shim process group per worker group, with its files under the job's
directory (plan, pid file, stop marker, result, per-rank logs), which survive a daemon restart.

``WorkerGroups`` is the process side of the local backend: it observes groups from their files,
launches a group (its shim, or the job's warm shim when one is ready), stops one (SIGTERM, then
SIGKILL once its stop deadline passes) and adopts or stops what a previous daemon left running.
The daemon decides *what* to do (``adl.controller``); this module only does it.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from adl.contract import CLEAN_EXITS, ENV_MASTER_PORT
from adl.controller.actions import CreateGroup
from adl.controller.env import WorkerSite
from adl.controller.lifecycle import ObservedWorkers, ReplicaPhase, ReplicaState
from adl.local import processes
from adl.local.gpus import LocalNode, gpu_ids
from adl.local.private import make_private_dir, write_private
from adl.local.settings import Settings
from adl.local.store import GroupRecord, Store, StoredJob

log = logging.getLogger("adl.local")

#: Seconds after a group's launch before the job's next warm shim starts (so its imports do not
#: compete with the new group's start).
WARM_DELAY_S = 2.0
#: Workers left running in a directory no job owns (after a reset of the state database) get
#: their grace period to stop, at most this long, then SIGKILL, then this long to be gone.
ORPHAN_GRACE_S = 10.0
ORPHAN_KILL_S = 5.0


class WorkerGroups:
    """Every job's worker groups on this machine (``jobs``: the daemon's view of the jobs)."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        jobs: Mapping[str, StoredJob],
        nodes: Sequence[LocalNode],
    ) -> None:
        self.s = settings
        self.home = settings.home
        self.store = store
        self.jobs = jobs
        self.capacity = settings.gpus or settings.slots
        #: each local node's GPU slots (the daemon's nodes): a group gets devices of the
        #: nodes it was placed on
        self.node_devices = {n.name: n.devices for n in nodes}
        self.api_url = ""
        self._children: dict[tuple[str, int], subprocess.Popen[bytes]] = {}
        self._warm: dict[str, tuple[processes.GroupProcess, subprocess.Popen[bytes]]] = {}
        self._warm_after: dict[str, float] = {}
        #: (job, group) -> (replicas, why) for groups whose launch failed: failed starts
        self._unstarted: dict[tuple[str, int], tuple[int, str]] = {}

    def forget(self, key: str) -> None:
        """Drop what is kept in memory about a purged job."""
        for unstarted in [k for k in self._unstarted if k[0] == key]:
            del self._unstarted[unstarted]
        self._warm_after.pop(key, None)

    def warm_due(self, rec: StoredJob) -> bool:
        """Whether a running elastic job should get its next warm shim now."""
        return rec.key not in self._warm and time.monotonic() >= self._warm_after.get(rec.key, 0.0)

    def close(self) -> None:
        """At daemon exit: idle warm shims are not workers (nothing to adopt); reap children.
        Running groups are left alone: the next daemon adopts them."""
        for key in list(self._warm):
            if key in self.jobs:
                self.drop_warm(self.jobs[key])
        for proc in self._children.values():
            with contextlib.suppress(Exception):
                proc.poll()

    def paths(self, rec: StoredJob) -> processes.GroupPaths:
        return processes.GroupPaths.for_job(self.home, rec.namespace, rec.name)

    def recover(self) -> None:
        """After a restart: stop every live group that is not the current one of an unfinished
        job (orphans of a resize the previous daemon did not finish), before launching
        anything. The current group of a running job is adopted as it is.

        First, job directories that no job in the database owns (the database was reset, or
        a new job of the same name was submitted into the new one) are stopped and moved aside:
        nothing of a predecessor is adopted, neither its workers nor its checkpoint."""
        by_key = {(r.namespace, r.name): r for r in self.jobs.values()}
        for ns, name, root in processes.job_dirs(self.home):
            rec = by_key.get((ns, name))
            try:
                if rec is None:
                    self.set_aside(
                        processes.GroupPaths(root), "no job in the state database owns it"
                    )
                elif not self.owns(rec):
                    self.set_aside(
                        processes.GroupPaths(root), "an earlier job of that name left it"
                    )
            except OSError as err:  # the job's launch tries again (claim) and says why it fails
                log.warning("cannot move aside the job directory %s: %s", root, err)
        for rec in self.jobs.values():
            paths = self.paths(rec)
            processes.drop_warm(paths)  # a warm shim nobody handed a plan to yet: not a group
            known = {g.group for g in self.store.groups(rec.key)}
            for g in paths.recorded_groups():
                proc = processes.read_pidfile(paths.pidfile(g))
                if proc is None or paths.result(g).exists() or not processes.group_alive(proc):
                    continue
                if g not in known:
                    self._restore_group_row(rec, g, proc)
                current = g == rec.status.group and not rec.status.phase.finished
                if not current or rec.deleted:
                    log.info("stopping orphan group %d of %s", g, rec.key)
                    self.stop_group(rec, g, rec.spec.termination_grace_period_seconds)

    @staticmethod
    def _owner(rec: StoredJob) -> dict[str, Any]:
        # key, seq and submission time: a job submitted again after a reset of the database
        # gets the same key and maybe the same seq, never the same time
        return {"job": rec.key, "seq": rec.seq, "created": rec.created}

    def owns(self, rec: StoredJob) -> bool:
        """Whether the job's directory (if any) is this job's and not a predecessor's."""
        paths = self.paths(rec)
        if not paths.root.exists():
            return True
        owner = processes.read_json(paths.owner)
        if owner is not None:
            return owner == self._owner(rec)
        # a directory from before owner records: the token, written before the first group
        # starts, says whose it is; with neither, nothing was ever launched from it
        try:
            token = paths.token.read_text()
        except OSError:
            return not paths.recorded_groups()
        return hmac.compare_digest(token.encode(), rec.token.encode())

    def claim(self, rec: StoredJob) -> None:
        """Before the job's first group or warm shim: the directory is this job's (a
        predecessor's is moved aside first) and says so."""
        paths = self.paths(rec)
        if not self.owns(rec):
            self.set_aside(paths, "an earlier job of that name left it")
        if not paths.owner.exists():
            make_private_dir(paths.root)
            write_private(paths.owner, json.dumps(self._owner(rec)))

    def set_aside(self, paths: processes.GroupPaths, why: str) -> None:
        """Stop whatever still runs from a job directory nobody owns and move the directory to
        ``jobs/.orphaned/``, where its checkpoint and logs stay for the user to look at. Blocks
        the daemon (at start) for at most ORPHAN_GRACE_S + ORPHAN_KILL_S: the workers must be
        gone before the directory moves, or one still checkpointing would recreate it."""
        processes.drop_warm(paths)  # waiting warm shims ran nothing: no grace
        live = paths.live_shims()
        for proc in live:
            processes.signal_group(proc.pid, signal.SIGTERM)  # a chance to checkpoint, as at a stop
        graces = [
            float((processes.read_json(paths.plan(g)) or {}).get("grace_s", ORPHAN_GRACE_S))
            for g in paths.recorded_groups()
        ]
        deadline = time.monotonic() + min(max(graces, default=0.0), ORPHAN_GRACE_S)
        while live and any(processes.group_alive(p) for p in live) and time.monotonic() < deadline:
            time.sleep(0.05)
        killed = [p for p in live if processes.group_alive(p)]
        for proc in killed:
            processes.signal_group(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + ORPHAN_KILL_S
        while any(processes.group_alive(p) for p in killed) and time.monotonic() < deadline:
            time.sleep(0.05)
        ns, name = paths.root.parent.name, paths.root.name
        folder = self.home / "jobs" / processes.ORPHANED / ns
        make_private_dir(folder)
        stamp = time.strftime("%Y%m%dT%H%M%S")
        dest = folder / f"{name}-{stamp}"
        n = 1
        while dest.exists():
            n += 1
            dest = folder / f"{name}-{stamp}.{n}"
        os.rename(paths.root, dest)
        log.warning(
            "job directory %s/%s: %s; stopped %d running group(s)%s and moved it to %s",
            ns,
            name,
            why,
            len(live),
            f" ({len(killed)} killed after the grace period)" if killed else "",
            dest,
        )

    def _restore_group_row(self, rec: StoredJob, group: int, proc: processes.GroupProcess) -> None:
        """Record a live group the previous daemon launched but was killed before recording:
        the slot gate and the SIGKILL escalation know groups only from the table."""
        plan_path = self.paths(rec).plan(group)
        ranks = (processes.read_json(plan_path) or {}).get("ranks", [])
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
                int(env.get(ENV_MASTER_PORT) or 0) or None,
                [ids.index(d) for d in given if d in ids],
                started=plan_path.stat().st_mtime if plan_path.exists() else time.time(),
            )
        )

    def observe(self, rec: StoredJob) -> ObservedWorkers:
        """Every replica of every recorded group, from the shims' files."""
        paths = self.paths(rec)
        out: list[ReplicaState] = []
        for g in paths.recorded_groups():
            child = self._children.get((rec.key, g))
            if child is not None and child.poll() is not None:
                del self._children[(rec.key, g)]
            result = processes.read_result(paths.result(g))
            n = self._group_size(rec, g)
            if result is not None:
                for rank, code in enumerate(processes.rank_codes(result)):
                    bad = code not in CLEAN_EXITS
                    msg = self._failure_text(paths, g, rank, code) if bad else ""
                    out.append(ReplicaState.exited(g, rank, code, msg))
                codes = [int(c) if c is not None else -9 for c in result.get("codes", [])]
                self._record_end(rec, g, codes, float(result.get("ended", time.time())))
                continue
            proc = processes.read_pidfile(paths.pidfile(g))
            terminating = paths.pidfile(g).with_suffix(".stop").exists()
            alive = proc is not None and processes.group_alive(proc)
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
                processes.write_result_if_missing(paths.result(g), codes)
        for (key, g), (n, why) in self._unstarted.items():
            if key == rec.key:
                failed = ReplicaPhase.FAILED
                out += [
                    ReplicaState(g, r, failed, False, None, "StartFailed", why) for r in range(n)
                ]
        return ObservedWorkers(tuple(out))

    @staticmethod
    def _failure_text(paths: processes.GroupPaths, group: int, rank: int, code: int) -> str:
        """Why a rank failed, for ``adl describe``: its exit and the last line it printed in
        this group (none: just the exit)."""
        what = f"killed by signal {-code}" if code < 0 else f"exited with code {code}"
        tail = processes.group_last_line(paths.log(rank), group, rank)
        return f"rank {rank} {what}" + (f": {tail}" if tail else "")

    def _group_size(self, rec: StoredJob, group: int) -> int:
        plan = processes.read_json(self.paths(rec).plan(group))
        return len(plan.get("ranks", [])) if plan else 0

    def _record_end(self, rec: StoredJob, group: int, codes: list[int], ended: float) -> None:
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
            proc = processes.GroupProcess(g.pid or 0, g.start_ticks or 0)
            if g.pid and processes.group_alive(proc):
                used += g.replicas
                devices.update(g.devices)
        return used, devices

    def launch(self, rec: StoredJob, action: CreateGroup) -> bool:
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
        devices = self.free_devices(action.allocation, taken) if self.s.gpus else []
        if devices is None:
            return False
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

    def free_devices(self, allocation: Sequence[str], taken: set[int]) -> list[int] | None:
        """Free GPU slots for a group placed on ``allocation`` (one node per replica), each
        replica on a device of its node, so a group never spans GPU types the policy kept
        apart; None while some node has fewer free (another job's group is still stopping)."""
        devices: list[int] = []
        for node in dict.fromkeys(allocation):
            need = allocation.count(node)
            # a node the daemon no longer has (its GPUs changed across a restart): any GPU,
            # as when the machine was one node
            mine = self.node_devices.get(node, tuple(range(self.s.gpus)))
            free = [d for d in mine if d not in taken and d not in devices][:need]
            if len(free) < need:
                return None
            devices += free
        return devices

    def _spawn(
        self, rec: StoredJob, action: CreateGroup, devices: list[int]
    ) -> tuple[processes.GroupProcess, subprocess.Popen[bytes] | None, int]:
        """Write the group's files and start its shim (or hand the plan to the warm one):
        the shim, the Popen to reap it, the rendezvous port."""
        self.claim(rec)
        paths = self.paths(rec)
        need = len(action.allocation)
        make_private_dir(paths.checkpoint)
        if not paths.token.exists():
            # 0600 from creation, never briefly readable: the token is the job's API identity
            write_private(paths.token, rec.token)
        port = processes.free_port()
        site = WorkerSite(
            master_addr="127.0.0.1",
            master_port=port,
            checkpoint_dir=str(paths.checkpoint),
            api_url=self.api_url,
            token_file=str(paths.token) if self.api_url else "",
        )
        trainer = rec.spec.trainer
        argv = [*(trainer.get("command") or []), *(trainer.get("args") or [])]
        base = self._base_env(trainer)
        if devices:
            ids = gpu_ids(self.s.gpus)
            base["CUDA_VISIBLE_DEVICES"] = ",".join(ids[d] for d in devices)
        ranks = [
            {"rank": r, "argv": argv, "env": {**base, **action.env(r, site)}} for r in range(need)
        ]
        grace = float(rec.spec.termination_grace_period_seconds)
        warm = self._warm.pop(rec.key, None)
        try:
            proc, child = processes.launch(
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

    def prewarm(self, rec: StoredJob) -> None:
        """Start the job's next shim now, importing torch while the old group checkpoints."""
        from adl.local.warm import script_of

        if not self.s.prewarm or self.s.gpus or rec.key in self._warm:
            # with GPUs, forking after torch is loaded risks a CUDA state the ranks cannot
            # re-initialize: GPU groups start cold
            return
        trainer = rec.spec.trainer
        argv = [*(trainer.get("command") or []), *(trainer.get("args") or [])]
        env, cwd = self._base_env(trainer), trainer.get("workingDir")
        if script_of(argv, env.get("PATH", os.defpath), cwd) is None:
            return
        try:
            self.claim(rec)
            self._warm[rec.key] = processes.prewarm(self.paths(rec), env, cwd)
        except OSError as err:
            log.warning("no warm start for %s: %s", rec.key, err)

    def drop_warm(self, rec: StoredJob) -> None:
        warm = self._warm.pop(rec.key, None)
        if warm is not None:
            processes.drop_warm(self.paths(rec), warm[0])
            with contextlib.suppress(Exception):
                warm[1].wait(timeout=5)

    def _base_env(self, trainer: dict[str, Any]) -> dict[str, str]:
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
        return env

    def stop_group(self, rec: StoredJob, group: int, grace_s: float) -> None:
        """SIGTERM the group once; the stop marker remembers it across daemon restarts. A
        grace of 0 is a hard stop (a hung group: a stopped rank does not act on SIGTERM):
        SIGKILL at once."""
        paths = self.paths(rec)
        proc = processes.read_pidfile(paths.pidfile(group))
        marker = paths.pidfile(group).with_suffix(".stop")
        if proc is None:
            return
        if not marker.exists():
            margin = self.s.kill_margin_s if grace_s > 0 else 0.0
            write_private(marker, f"{time.time() + grace_s + margin}\n")
            processes.signal_group(proc.pid, signal.SIGKILL if grace_s <= 0 else signal.SIGTERM)

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
            if now > deadline and processes.group_alive(
                processes.GroupProcess(g.pid, g.start_ticks or 0)
            ):
                processes.signal_group(g.pid, signal.SIGKILL)

    def reap(self) -> None:
        """Collect exited shims we launched (no zombies, even for purged jobs)."""
        for key, child in list(self._children.items()):
            if child.poll() is not None:
                del self._children[key]
        for job, (_, warm) in list(self._warm.items()):
            if warm.poll() is not None:  # it timed out or was killed
                del self._warm[job]
