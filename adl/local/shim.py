"""The supervisor of one local worker group (the local equivalent of a pod).

``python -m adl.local.shim PLAN.json`` runs one process per replica with its environment and
log file, all in the shim's own process group (the daemon starts it with a new session, so
``killpg`` reaches every rank). It exists because workers must outlive the daemon: when the
daemon is killed, nobody can ``wait()`` for the ranks any more, so the shim records its own pid
on start and the ranks' exit codes on finish, in files the restarted daemon reads.

The supervision itself (a rank that fails or stops takes the group down, SIGTERM to the shim
is forwarded, SIGKILL after the grace period) is :mod:`adl.supervisor`'s, the same as
``adl launch``'s; the shim adds the pid file, the per-rank log headers and the result file.
No torch, and of adl only standard-library modules: it starts in milliseconds.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from adl.local.private import private_umask, write_private
from adl.supervisor import DEFAULT_GRACE_S, RankProcess, RankSpec, Supervisor

#: starts one rank instead of a new process (None: the supervisor starts it as usual)
Spawn = Callable[[RankSpec], RankProcess | None]


def proc_start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (tells a pid from its reuse); None when
    the process is gone or a zombie."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw[raw.rfind(")") + 2 :].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` atomically; the file is private (0600) from creation."""
    write_private(path, text)


def run(plan: dict[str, Any], spawn: Spawn | None = None) -> int:
    """Run one group to its end and record the ranks' exit codes. ``spawn``: how a rank is
    started when not as a new process (a warm shim forks the ranks that run a Python script:
    :func:`adl.local.warm.spawn_forked`)."""
    pid = os.getpid()
    write_atomic(Path(plan["pidfile"]), f"{pid} {proc_start_ticks(pid) or 0}\n")
    cwd = plan.get("cwd") or None
    specs = [
        RankSpec(int(r["rank"]), list(r["argv"]), dict(r["env"]), cwd, str(r["log"]))
        for r in plan["ranks"]
    ]
    supervisor = Supervisor(
        specs, grace_s=float(plan.get("grace_s", DEFAULT_GRACE_S)), to_terminal=False, spawn=spawn
    )
    supervisor.install_signal_handlers()  # before anything slow: a stop must not be lost
    started = time.time()
    for spec in specs:
        assert spec.log is not None
        log_path = Path(spec.log)
        log_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with open(log_path, "ab") as log:  # what group_last_line() looks for
            log.write(f"=== group {plan.get('group')} rank {spec.rank} ===\n".encode())
    outcome = supervisor.run(handle_signals=False)
    result = {
        "codes": outcome.returncodes,
        "started": started,
        "ended": time.time(),
        "failure": outcome.failure,
        "first_failed": outcome.first_failed,  # its peers were stopped because of it
        "killed": outcome.killed,
    }
    write_atomic(Path(plan["result"]), json.dumps(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    # the logs, results and whatever the ranks write (checkpoints) stay the user's alone, even
    # under a daemon that did not set the umask itself (one run in a test's thread)
    private_umask()
    if len(args) == 2 and args[0] == "--warm":
        from adl.local.warm import spawn_forked, wait_and_run

        return wait_and_run(Path(args[1]), lambda plan: run(plan, spawn=spawn_forked))
    if len(args) != 1:
        print("usage: python -m adl.local.shim PLAN.json | --warm GROUPS_DIR", file=sys.stderr)
        return 2
    return run(json.loads(Path(args[0]).read_text()))


if __name__ == "__main__":
    sys.exit(main())
