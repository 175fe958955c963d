"""Worker groups as local processes: launch a group's shim in its own session, observe it
(alive? which exit codes?) from files that survive a daemon restart, and stop it with
SIGTERM then SIGKILL on the whole process group."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adl.contract import EXIT_STOPPED
from adl.local.private import make_private_dir, open_private_append
from adl.local.shim import proc_start_ticks, write_atomic


@dataclass(frozen=True)
class GroupPaths:
    """Where one job keeps its files under the state directory."""

    root: Path

    @classmethod
    def for_job(cls, home: Path, namespace: str, name: str) -> GroupPaths:
        return cls(home / "jobs" / namespace / name)

    @property
    def checkpoint(self) -> Path:
        return self.root / "checkpoint"

    @property
    def token(self) -> Path:
        return self.root / "token"

    @property
    def owner(self) -> Path:
        """Which job (of which database) this directory belongs to: see ``WorkerGroups.claim``."""
        return self.root / "owner.json"

    def live_shims(self) -> list[GroupProcess]:
        """Every group shim and warm shim recorded here that still runs."""
        folder = self.root / "groups"
        found = [read_pidfile(p) for p in folder.glob("*.pid")] if folder.is_dir() else []
        return [proc for proc in found if proc is not None and group_alive(proc)]

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def log(self, rank: int) -> Path:
        return self.logs / f"r{rank}.log"

    def plan(self, group: int) -> Path:
        return self.root / "groups" / f"g{group}.plan.json"

    def pidfile(self, group: int) -> Path:
        return self.root / "groups" / f"g{group}.pid"

    def result(self, group: int) -> Path:
        return self.root / "groups" / f"g{group}.result.json"

    def warm_pid(self, pid: int) -> Path:
        """A warm shim's record (``warm-PID.pid``); it starts a group when ``.go`` appears."""
        return self.root / "groups" / f"warm-{pid}.pid"

    def warm_go(self, pid: int) -> Path:
        return self.root / "groups" / f"warm-{pid}.go"

    def warm_shims(self) -> list[Path]:
        folder = self.root / "groups"
        return sorted(folder.glob("warm-*.pid")) if folder.is_dir() else []

    def recorded_groups(self) -> list[int]:
        """Every group that ever wrote a pidfile (including ones the database never saw)."""
        folder = self.root / "groups"
        if not folder.is_dir():
            return []
        out = []
        for p in folder.glob("g*.pid"):
            try:
                out.append(int(p.name[1:-4]))
            except ValueError:
                continue
        return sorted(out)


#: Where job directories that no job owns are moved (``jobs/.orphaned/NS/NAME-TIME``); the dot
#: keeps it apart from namespaces, which cannot start with one.
ORPHANED = ".orphaned"


def job_dirs(home: Path) -> list[tuple[str, str, Path]]:
    """(namespace, name, directory) of every job directory under ``home``."""
    out = []
    for ns in sorted((home / "jobs").glob("*")):
        if ns.name.startswith(".") or not ns.is_dir():
            continue
        out += [(ns.name, d.name, d) for d in sorted(ns.iterdir()) if d.is_dir()]
    return out


@dataclass(frozen=True)
class GroupProcess:
    """The shim of a running group: pid plus its start time, which tells it from pid reuse."""

    pid: int
    start_ticks: int


def free_port() -> int:
    """A TCP port free right now on 127.0.0.1 (for the group's rendezvous store)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prewarm(
    paths: GroupPaths, env: dict[str, str], cwd: str | None
) -> tuple[GroupProcess, subprocess.Popen[bytes]]:
    """Start a warm shim for the job's next group (see :mod:`adl.local.warm`)."""
    folder = paths.root / "groups"
    make_private_dir(folder)
    err = open_private_append(folder / "warm.shim.log")
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "adl.local.shim", "--warm", str(folder)],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
            cwd=cwd or None,
            close_fds=True,
        )
    finally:
        os.close(err)
    ticks = proc_start_ticks(proc.pid) or 0
    write_atomic(paths.warm_pid(proc.pid), f"{proc.pid} {ticks}\n")
    return GroupProcess(proc.pid, ticks), proc


def drop_warm(paths: GroupPaths, only: GroupProcess | None = None) -> None:
    """Kill the job's waiting warm shims (``only`` that one), which have run nothing yet; one
    already handed a plan is a group's shim and is left alone."""
    records = [paths.warm_pid(only.pid)] if only is not None else paths.warm_shims()
    for record in records:
        if record.with_suffix(".go").exists():
            continue  # handed a group's plan: it is that group's shim now
        proc = read_pidfile(record)
        if proc is not None and alive(proc):
            signal_group(proc.pid, signal.SIGKILL)
        record.unlink(missing_ok=True)
        record.with_suffix(".go").unlink(missing_ok=True)


def launch(
    paths: GroupPaths,
    group: int,
    ranks: list[dict[str, Any]],
    *,
    grace_s: float,
    cwd: str | None = None,
    warm: GroupProcess | None = None,
) -> tuple[GroupProcess, subprocess.Popen[bytes] | None]:
    """Start the shim for ``group``; ``ranks`` holds per rank ``argv`` and ``env``. With a
    live ``warm`` shim, hand it the plan instead (no new process; returns None for the Popen).

    The caller keeps the Popen to reap the shim (it is our child until we die)."""
    plan_path = paths.plan(group)
    make_private_dir(plan_path.parent)
    for old in (paths.result(group), paths.pidfile(group)):
        old.unlink(missing_ok=True)
    plan = {
        "group": group,
        "grace_s": grace_s,
        "cwd": cwd,
        "pidfile": str(paths.pidfile(group)),
        "result": str(paths.result(group)),
        "ranks": [{**r, "log": str(paths.log(int(r["rank"])))} for r in ranks],
    }
    write_atomic(plan_path, json.dumps(plan))  # the job's environment: private
    if warm is not None and alive(warm) and paths.warm_pid(warm.pid).exists():
        # go first, then the pidfile: a daemon killed in between finds the group either
        # not started (the warm shim is dropped, the group relaunched) or started by it
        write_atomic(paths.warm_go(warm.pid), str(plan_path))
        write_atomic(paths.pidfile(group), f"{warm.pid} {warm.start_ticks}\n")
        return warm, None
    if warm is not None:
        drop_warm(paths, warm)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADL_")}
    err = open_private_append(paths.root / "groups" / f"g{group}.shim.log")
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "adl.local.shim", str(plan_path)],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
            close_fds=True,
        )
    finally:
        os.close(err)
    ticks = proc_start_ticks(proc.pid) or 0
    # The shim writes the same file itself; writing it here too closes the window before it
    # runs, so a daemon killed right now still finds this group on restart.
    write_atomic(paths.pidfile(group), f"{proc.pid} {ticks}\n")
    return GroupProcess(proc.pid, ticks), proc


def read_pidfile(path: Path) -> GroupProcess | None:
    try:
        pid, ticks = path.read_text().split()
        return GroupProcess(int(pid), int(ticks))
    except (OSError, ValueError):
        return None


def alive(proc: GroupProcess) -> bool:
    """The shim is running (the same process we launched, not a reused pid)."""
    ticks = proc_start_ticks(proc.pid)
    if ticks is None:
        return False
    return proc.start_ticks == 0 or ticks == proc.start_ticks


def group_alive(proc: GroupProcess) -> bool:
    """Any process of the group is still running (a rank may outlive a SIGKILLed shim)."""
    if alive(proc):
        return True
    return any_in_pgid(proc.pid)


def any_in_pgid(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # killpg(0) also succeeds for zombies; look for a live member.
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rfind(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


def signal_group(pgid: int, sig: signal.Signals) -> None:
    """Send ``sig`` to every process of the group; a group already gone is fine."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def read_result(path: Path) -> dict[str, Any] | None:
    """The shim's final record: per-rank exit codes, failure text; None while running."""
    return read_json(path)


def rank_codes(result: dict[str, Any]) -> list[int]:
    """Each rank's exit code from a group's result, as the controller is to see it. A rank
    that fails takes its group down (the shim's supervisor SIGTERMs the others), so a peer
    that died of that SIGTERM was stopped, not failed: it counts as stopped (143, what
    Kubernetes reports for a container ended by SIGTERM), and the job's reason names the rank
    that failed first rather than the lowest-numbered peer the teardown killed."""
    codes = [int(c) if c is not None else -9 for c in result.get("codes", [])]
    first = result.get("first_failed")
    if not isinstance(first, int) or isinstance(first, bool):
        return codes  # no failure, or a result from before the shim recorded it
    term = -int(signal.SIGTERM)
    return [EXIT_STOPPED if c == term and i != first else c for i, c in enumerate(codes)]


def write_result_if_missing(path: Path, codes: list[int]) -> None:
    """Record the end of a group whose shim was killed before it could (so the outcome is
    decided once and never re-derived differently)."""
    if not path.exists():
        write_atomic(
            path, json.dumps({"codes": codes, "ended": time.time(), "failure": "", "killed": True})
        )


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def last_line(path: Path, limit: int = 300) -> str:
    """The last non-empty line of a log file (at most ``limit`` characters)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(size - 4096, 0))
            lines = [ln for ln in fh.read().decode(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1].strip()[:limit] if lines else ""


#: The line the shim writes into a rank's log before each group's output (``adl.local.shim``).
_HEADER = re.compile(r"=== group (\S+) rank (\d+) ===")


def group_last_line(path: Path, group: int, rank: int, limit: int = 300) -> str:
    """The last non-empty line that ``rank`` of ``group`` itself printed into its log, which
    holds every group's output after a header line each: "" when it printed nothing (the
    shim's header and earlier groups' output are not the worker's words)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(size - 65536, 0))
            lines = fh.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    own = f"=== group {group} rank {rank} ==="
    starts = [i for i, ln in enumerate(lines) if ln.strip() == own]
    # without its header in the window, the group's output is what precedes the first header
    begin = starts[-1] + 1 if starts else 0
    found = ""
    for ln in lines[begin:]:
        if _HEADER.fullmatch(ln.strip()):
            break  # the next group's output
        if ln.strip():
            found = ln.strip()
    return found[:limit]
