"""The supervisor of one local worker group (the local equivalent of a pod).

``python -m adl.local.shim PLAN.json`` runs one process per replica with its environment and
log file, all in the shim's own process group (the daemon starts it with a new session, so
``killpg`` reaches every rank). It exists because workers must outlive the daemon: when the
daemon is killed, nobody can ``wait()`` for the ranks any more, so the shim records its own pid
on start and the ranks' exit codes on finish, in files the restarted daemon reads.

Like torchrun, a rank that fails takes the group down (the others would otherwise block in a
collective): the rest get SIGTERM, then SIGKILL after the grace period. A SIGTERM to the shim
is forwarded the same way. No torch, no adl imports: it starts in milliseconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: Exit code of a worker that checkpointed and stopped on request (128 + SIGTERM).
STOPPED = 143
#: Exit code recorded for a rank whose command could not be started (as a shell reports it).
NOT_STARTED = 127


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
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def run(plan: dict[str, Any], fork: bool = False) -> int:
    """Run one group to its end and record the ranks' exit codes. ``fork``: this is a warm
    shim (:mod:`adl.local.warm`), so ranks that run a Python script are forked from it."""
    pid = os.getpid()
    write_atomic(Path(plan["pidfile"]), f"{pid} {proc_start_ticks(pid) or 0}\n")
    grace = float(plan.get("grace_s", 30.0))
    stop_deadline: list[float] = []

    def on_term(signum: int, frame: Any) -> None:
        del frame
        if not stop_deadline:
            stop_deadline.append(time.monotonic() + grace)
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    procs: list[Any] = []  # subprocess.Popen or adl.local.warm.ForkedRank
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    started = time.time()
    failure = ""
    for rank in plan["ranks"]:
        log_path = Path(rank["log"])
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            log.write(f"=== group {plan.get('group')} rank {rank['rank']} ===\n".encode())
            log.flush()
            try:
                forked = None
                if fork:
                    from adl.local.warm import fork_rank

                    cwd = plan.get("cwd") or None
                    forked = fork_rank(rank["argv"], rank["env"], cwd, str(log_path))
                procs.append(
                    forked
                    or subprocess.Popen(
                        rank["argv"],
                        env=rank["env"],
                        cwd=plan.get("cwd") or None,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                    )
                )
            except (OSError, ValueError) as err:
                # an unstartable command is the rank's failure (exit 127 like a shell), with
                # the reason in its log, not a crash of the shim that reads as a SIGKILL
                argv0 = (rank["argv"] or [""])[0]
                log.write(f"cannot start {argv0!r}: {err}\n".encode())
                failure = f"rank {rank['rank']} could not start: {err}"
                break
    if failure:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()
        codes = [p.returncode for p in procs]
        codes += [NOT_STARTED] * (len(plan["ranks"]) - len(codes))
        write_atomic(
            Path(plan["result"]),
            json.dumps({"codes": codes, "started": started, "ended": time.time(),
                        "failure": failure, "killed": False}),
        )  # fmt: skip
        return 0
    killed = False
    while any(p.poll() is None for p in procs):
        codes = [p.returncode for p in procs]
        bad = [(i, c) for i, c in enumerate(codes) if c not in (None, 0, STOPPED, -15)]
        if bad and not stop_deadline:
            failure = f"rank {bad[0][0]} exited with code {bad[0][1]}"
            stop_deadline.append(time.monotonic() + grace)
            for p in procs:
                if p.poll() is None:
                    p.terminate()
        if stop_deadline and not killed and time.monotonic() > stop_deadline[0]:
            killed = True
            for p in procs:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.05)
    result = {
        "codes": [p.returncode for p in procs],
        "started": started,
        "ended": time.time(),
        "failure": failure,
        "killed": killed,
    }
    write_atomic(Path(plan["result"]), json.dumps(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "--warm":
        from adl.local.warm import wait_and_run

        return wait_and_run(Path(args[1]))
    if len(args) != 1:
        print("usage: python -m adl.local.shim PLAN.json | --warm GROUPS_DIR", file=sys.stderr)
        return 2
    return run(json.loads(Path(args[0]).read_text()))


if __name__ == "__main__":
    sys.exit(main())
