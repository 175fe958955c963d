"""Warm starts for local worker groups: most of a resize is the new workers importing torch.

When the daemon stops a group to resize it, it also starts a *warm shim* for the job's next
group: a shim process that imports the heavy modules (torch, torch.distributed, torch._dynamo,
adl.client_lib) while the old group is still checkpointing, then waits. It runs no user code and
touches no checkpoint until the daemon hands it the next group's plan (``warm-PID.go``, written
after the old group has exited); it then becomes that group's shim and forks one child per rank.
Each child already has the modules loaded, so it goes straight to the user's script (run with
``runpy`` as ``python script.py`` or ``python -m module`` would), with the rank's environment,
working directory and log. Commands that are not this interpreter running a script or a module
start the usual way. Fork after importing torch (no threads of ours, no CUDA initialized) is what
DataLoader workers do all the time.

Only the standard library here: the shim imports this module before anything heavy.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import runpy
import shutil
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from adl.local.private import write_private
from adl.supervisor import RankProcess, RankSpec

#: Modules a warm shim loads before it is needed (those that are missing are skipped).
PRELOAD = (
    "torch",
    "torch.distributed",
    "torch.optim",
    "torch._dynamo",
    "adl.client_lib",
    "adl.client_lib.parallel",
)
#: A warm shim nobody claimed in this long exits by itself.
WAIT_S = 600.0
_HARMLESS_FLAGS = ("-u", "-B")


def script_of(
    argv: list[str], path: str | None = None, cwd: str | None = None
) -> tuple[str, str, list[str], bool] | None:
    """``(kind, target, args, unbuffered)`` when ``argv`` runs this interpreter on a script
    (kind ``path``) or a module (``-m``, kind ``module``); None for anything else. ``path``
    and ``cwd`` are the job's PATH and working directory, which decide what ``argv[0]`` runs."""
    if not argv or not _is_this_interpreter(argv[0], path, cwd):
        return None
    rest = list(argv[1:])
    unbuffered = False
    while rest and rest[0] in _HARMLESS_FLAGS:
        unbuffered = unbuffered or rest[0] == "-u"
        rest.pop(0)
    if len(rest) >= 2 and rest[0] == "-m":
        return "module", rest[1], rest[2:], unbuffered
    if not rest or rest[0].startswith("-"):
        return None
    return "path", rest[0], rest[1:], unbuffered


def _is_this_interpreter(command: str, path: str | None, cwd: str | None) -> bool:
    """``command`` found as the rank's exec would find it (a bare name on the job's PATH, a
    relative path from its working directory) is this interpreter."""
    if os.sep not in command:
        found = shutil.which(command, path=path)
        if found is None:
            return False
        command = found
    command = os.path.join(cwd or os.getcwd(), command)  # an absolute command stays as it is
    # Every virtual environment's python links to the same base interpreter: the directory
    # it sits in tells the daemon's environment from another one.
    here = os.path.realpath(os.path.dirname(sys.executable))
    return os.path.realpath(os.path.dirname(command)) == here and os.path.realpath(
        command
    ) == os.path.realpath(sys.executable)


class ForkedRank:
    """A rank forked by the shim, with the part of ``subprocess.Popen`` the shim uses."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -signal.SIGKILL
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        while self.poll() is None:
            time.sleep(0.01)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def _exit_code(code: Any) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def fork_rank(argv: list[str], env: dict[str, str], cwd: str | None, log: str) -> ForkedRank | None:
    """Fork a child that runs ``argv`` as ``python ...`` would; None when ``argv`` is not a
    script or module of this interpreter (the caller then starts it the usual way)."""
    target = script_of(argv, env.get("PATH", os.defpath), cwd)
    if target is None:
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        return ForkedRank(pid)
    code = 1
    try:  # the child: never returns to the shim's code
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)  # private
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.environ.clear()
        os.environ.update(env)
        if cwd:
            os.chdir(cwd)
        kind, name, args, unbuffered = target
        # fresh streams over the rank's fds, buffered as a new interpreter's would be
        sys.stdout = os.fdopen(1, "w", buffering=1 if unbuffered else -1, closefd=False)
        sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
        sys.argv = [name, *args]
        if kind == "path":
            sys.path[0] = os.path.dirname(os.path.abspath(name))
            runpy.run_path(name, run_name="__main__")
        else:
            sys.path[0] = os.getcwd()
            runpy.run_module(name, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as stop:
        code = _exit_code(stop.code)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        # what interpreter exit does, minus the slow teardown of every module: join the
        # non-daemon threads, then run the atexit functions (adl's shutdown among them)
        try:
            threading._shutdown()  # type: ignore[attr-defined]
        except BaseException:
            traceback.print_exc()
        try:
            atexit._run_exitfuncs()
        except BaseException:
            traceback.print_exc()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


class _Stopped(BaseException):
    """SIGTERM while the warm shim waits for its group, before the group's ranks started. A
    BaseException, like KeyboardInterrupt, so that no ``except Exception`` can swallow it."""


class _StopOnTerm:
    """The warm shim's SIGTERM handler. While preloading it only remembers the request, checked
    between imports: an exception raised from a signal handler inside a library's import can be
    swallowed (a bare ``except:``; under load 6 of 30 shims then sat out their whole wait) or
    abort the process (raised through C++ code: ``terminate called ...``). Once ``interrupt`` is
    set (pure Python from there on) it also raises :class:`_Stopped` to stop at once."""

    def __init__(self) -> None:
        self.requested = False
        self.interrupt = False

    def __call__(self, signum: int, frame: Any) -> None:
        self.requested = True
        if self.interrupt:
            raise _Stopped

    def check(self) -> None:
        """Raise :class:`_Stopped` if a SIGTERM was requested."""
        if self.requested:
            raise _Stopped


def _record_stopped(go: Path, plan: dict[str, Any] | None = None) -> None:
    """A group stopped before its ranks started: every rank 'exited' on SIGTERM, as a cold
    shim would record it (the daemon would otherwise only find a dead shim)."""
    if plan is None:
        try:
            plan = json.loads(Path(go.read_text().strip()).read_text())
        except (OSError, ValueError):
            return
    codes = [-signal.SIGTERM] * len(plan.get("ranks", []))
    write_private(
        Path(plan["result"]),
        json.dumps({"codes": codes, "started": time.time(), "ended": time.time(),
                    "failure": "", "killed": False}),
    )  # fmt: skip


def spawn_forked(spec: RankSpec) -> RankProcess | None:
    """How a warm shim starts a rank (:func:`adl.local.shim.run`'s ``spawn``): forked from this
    process when it runs a Python script (:func:`fork_rank`)."""
    assert spec.log is not None
    return fork_rank(list(spec.argv), dict(spec.env), spec.cwd, spec.log)


def wait_and_run(folder: Path, run_group: Callable[[dict[str, Any]], int]) -> int:
    """The warm shim: preload, then wait for ``warm-PID.go`` (the path of the group's plan) and
    run that group with ``run_group`` (the shim's run, with forked ranks); exit quietly when
    nobody claims it."""
    pidfile, go = folder / f"warm-{os.getpid()}.pid", folder / f"warm-{os.getpid()}.go"
    stop = _StopOnTerm()
    signal.signal(signal.SIGTERM, stop)
    for name in PRELOAD:
        if stop.requested:
            break
        try:
            importlib.import_module(name)
        except Exception:  # a missing optional module only makes the start less warm
            continue
    if stop.requested:
        # No user code has run: leave at once, without the interpreter's teardown (a library
        # imported halfway, e.g. if the import raised, can hang it with its threads or hooks).
        _record_stopped(go)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    stop.interrupt = True
    try:
        return _wait(pidfile, go, stop, run_group)
    except _Stopped:
        _record_stopped(go)
        return 0


def _wait(
    pidfile: Path, go: Path, stop: _StopOnTerm, run_group: Callable[[dict[str, Any]], int]
) -> int:
    started = time.monotonic()
    deadline = started + WAIT_S
    while time.monotonic() < deadline:
        stop.check()
        try:
            plan_path = go.read_text().strip()
        except OSError:
            if not pidfile.exists() and time.monotonic() > started + 5.0:
                return 0  # dropped, or its daemon died before recording it: nobody will call
            time.sleep(0.02)
            continue
        if not plan_path:
            time.sleep(0.02)
            continue
        plan = json.loads(Path(plan_path).read_text())
        pidfile.unlink(missing_ok=True)  # from here on this process is the group's shim
        go.unlink(missing_ok=True)
        try:
            return run_group(plan)  # installs the group's own SIGTERM handler first
        except _Stopped:
            _record_stopped(go, plan)
            return 0
    pidfile.unlink(missing_ok=True)
    return 0
