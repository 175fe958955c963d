"""One worker supervisor: start the ranks of a group, stop them together, report their exits.

Used by ``adl launch`` (:mod:`adl.client_lib.launch`, also what a multi-replica Kubernetes pod
runs) and by the local daemon's per-group shim (:mod:`adl.local.shim`), so a group behaves the
same wherever it runs. Standard library only, importing nothing of adl but the contract: the
shim must start in milliseconds.

The rules:

1. Ranks start in rank order. A rank whose command cannot start (not found, not executable)
   exits with the shell's code (127, 126); it is not started again, the ranks after it are not
   started (they are recorded with the same code) and the started ones are stopped as in 3.
2. A rank exiting 0 finished training; its peers go on (they finish on their own).
3. Any other exit of a rank on its own stops the group: a failure (any code but 0 and 143,
   death by a signal included) since its peers would block in the next collective, and a
   clean stop (143: it checkpointed on a stop request, or its checkpoint watchdog expired)
   since a group cannot train with a rank missing. Every live rank gets SIGTERM once.
4. SIGTERM or SIGINT to the supervisor is a stop request: every live rank gets SIGTERM, the
   contract's "checkpoint and exit 143" (not SIGINT, which a Python script turns into a
   KeyboardInterrupt traceback instead of a checkpoint). A rank started after the request
   gets it too.
5. ``grace_s`` after the first stop (3 or 4), every rank still alive gets SIGKILL, once: a rank
   blocked in a collective with a dead peer never exits on its own.
6. The result holds every rank's raw return code (negative: killed by that signal) and the
   group's exit code: the code of the first rank that failed (the cause, not the peers killed
   because of it), else 143 if any rank stopped, else 0.

Output: each rank's stdout and stderr go to its own log file (appended, without a pipe, so the
ranks outlive the supervisor: the shim relies on that), or to the supervisor's own stdout and
stderr, or both (``tee``). On the supervisor's streams every line is prefixed ``[rankN]: ``
when ``prefix`` is set, by default when stdout is a terminal: a program reading the output
through a pipe gets the workers' lines as they wrote them. Prefixed or teed output passes
through a pipe, line by line, and the ranks get ``PYTHONUNBUFFERED=1`` (unless set) so their
lines show as printed; otherwise the ranks write to the streams directly.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import FrameType
from typing import IO, Any, Protocol

from adl.contract import (
    CLEAN_EXITS,
    EXIT_NOT_EXECUTABLE,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_STOPPED,
    exit_code,
)

DEFAULT_GRACE_S = 30.0
_POLL_S = 0.05
#: How long the output copiers may run after their rank exited (a grandchild holding the pipe).
_DRAIN_S = 5.0


class RankProcess(Protocol):
    """What the supervisor needs of a rank's process (``subprocess.Popen`` has it)."""

    pid: int

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def send_signal(self, sig: int) -> None: ...


@dataclass(frozen=True)
class RankSpec:
    """How to start one rank."""

    rank: int
    argv: Sequence[str]
    env: Mapping[str, str]
    cwd: str | None = None
    #: append the rank's stdout and stderr to this file
    log: str | None = None


#: Starts a rank its own way (a fork from a warm shim) or returns None to leave it to Popen.
Spawner = Callable[[RankSpec], RankProcess | None]


@dataclass
class Outcome:
    """How a group ended."""

    #: per rank, the raw return code (negative: killed by that signal)
    returncodes: list[int]
    #: the first failure, in words ("" when none)
    failure: str = ""
    #: some rank had to be SIGKILLed after the grace period
    killed: bool = False
    #: why a rank could not start (the OS's words), "" when all started
    start_error: str = ""
    #: the rank whose failure came first, None when no rank failed
    first_failed: int | None = None

    @property
    def codes(self) -> list[int]:
        """Shell-style exit codes (death by signal N is 128 + N)."""
        return [exit_code(c) for c in self.returncodes]

    @property
    def exit_code(self) -> int:
        """The group's exit code: the cause of a failure, else 143 if stopped, else 0."""
        codes = self.codes
        if self.first_failed is not None:
            return codes[self.first_failed]
        failed = [c for c in codes if c not in CLEAN_EXITS]
        if failed:
            return failed[0]
        return EXIT_STOPPED if EXIT_STOPPED in codes else EXIT_OK


@dataclass
class Supervisor:
    """Runs one group of ranks to its end under the rules of the module docstring."""

    ranks: Sequence[RankSpec]
    grace_s: float = DEFAULT_GRACE_S
    #: copy output to the supervisor's stdout/stderr (besides any log file)
    to_terminal: bool = True
    #: prefix those lines with ``[rankN]: ``; None: when stdout is a terminal
    prefix: bool | None = None
    spawn: Spawner | None = None
    #: where the prefixed output goes (default: sys.stdout / sys.stderr at the time of writing)
    out: IO[str] | None = None
    err: IO[str] | None = None
    procs: list[RankProcess] = field(default_factory=list, init=False)
    _stop_at: float | None = field(default=None, init=False)
    #: set by the signal handler, acted on by the main loop (no process calls in a handler)
    _stop_requested: bool = field(default=False, init=False)
    _kill_sent: bool = field(default=False, init=False)
    _killed: bool = field(default=False, init=False)
    _copiers: list[threading.Thread] = field(default_factory=list, init=False)
    _logs: list[IO[bytes]] = field(default_factory=list, init=False)
    _write_lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    # ------------------------------------------------------------------------- running

    def run(self, handle_signals: bool = True) -> Outcome:
        """Start every rank, supervise them to their end, return how they ended.

        ``handle_signals``: forward SIGTERM/SIGINT to the ranks while running (only possible
        from the main thread; the previous handlers are restored after)."""
        previous = self.install_signal_handlers() if handle_signals else {}
        try:
            outcome = self._start_all()
            if outcome is None:
                outcome = self._supervise()
            self._join_copiers()
            return outcome
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._signal_live(signal.SIGKILL)  # only an exception leaves ranks behind here

    def install_signal_handlers(self) -> dict[int, Any]:
        """Make SIGTERM and SIGINT stop requests (rule 4); the previous handlers, to restore.
        A caller with work before :meth:`run` installs them first, then runs without."""
        if threading.current_thread() is not threading.main_thread():
            return {}
        return {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}

    def stop(self) -> None:
        """Ask every live rank to stop (SIGTERM); the grace period starts at the first stop."""
        if self._stop_at is None:
            self._stop_at = time.monotonic() + self.grace_s
        self._signal_live(signal.SIGTERM)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        del signum, frame
        self._stop_requested = True

    def _check(self) -> None:
        """One supervision step of the main thread: act on a stop request, escalate."""
        if self._stop_requested:
            self._stop_requested = False
            self.stop()
        if self._stop_at is None or self._kill_sent or time.monotonic() < self._stop_at:
            return
        self._kill_sent = True  # once: SIGKILL cannot be caught
        self._killed = any(p.poll() is None for p in self.procs)
        self._signal_live(signal.SIGKILL)

    def _signal_live(self, sig: int) -> None:
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(sig)

    def _start_all(self) -> Outcome | None:
        """Start the ranks in order; an Outcome when one could not start (rule 1)."""
        for spec in self.ranks:
            try:
                proc = self._start(spec)
            except (OSError, ValueError) as err:
                code = EXIT_NOT_EXECUTABLE if isinstance(err, PermissionError) else EXIT_NOT_FOUND
                reason = (err.strerror if isinstance(err, OSError) else None) or str(err)
                argv0 = (list(spec.argv) or [""])[0]
                if spec.log is not None:
                    with open(spec.log, "ab") as log:
                        log.write(f"cannot start {argv0!r}: {reason}\n".encode())
                self.stop()
                while any(p.poll() is None for p in self.procs):
                    self._check()
                    time.sleep(_POLL_S)
                returncodes = [int(p.returncode or 0) for p in self.procs]
                returncodes += [code] * (len(self.ranks) - len(returncodes))
                return Outcome(
                    returncodes,
                    failure=f"rank {spec.rank} could not start {argv0!r}: {reason}",
                    killed=self._killed,
                    start_error=reason,
                    first_failed=len(self.procs),
                )
            self.procs.append(proc)
            self._check()
            if self._stop_at is not None:  # a stop came while starting: this rank gets it too
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        return None

    def _start(self, spec: RankSpec) -> RankProcess:
        if self.spawn is not None:
            forked = self.spawn(spec)
            if forked is not None:
                return forked
        env = dict(spec.env)
        piped = self.to_terminal and (self._prefixing() or spec.log is not None)
        if piped:
            # through a pipe Python would buffer a rank's output in blocks: show lines as printed
            env.setdefault("PYTHONUNBUFFERED", "1")
        log = open(spec.log, "ab") if spec.log is not None else None  # noqa: SIM115
        try:
            target: int | IO[bytes] | None = subprocess.PIPE if piped else log
            if not self.to_terminal and log is None:
                target = subprocess.DEVNULL
            proc = subprocess.Popen(
                list(spec.argv),
                env=env,
                cwd=spec.cwd or None,
                stdin=subprocess.DEVNULL,
                stdout=target,
                stderr=target,
            )
        except BaseException:
            if log is not None:
                log.close()
            raise
        if log is not None:
            if piped:
                self._logs.append(log)  # the copiers write to it
            else:
                log.close()  # the child has its own descriptor
        if piped:
            assert proc.stdout is not None and proc.stderr is not None
            for pipe, is_err in ((proc.stdout, False), (proc.stderr, True)):
                copier = threading.Thread(
                    target=self._copy, args=(spec.rank, pipe, is_err, log), daemon=True
                )
                copier.start()
                self._copiers.append(copier)
        return proc

    def _supervise(self) -> Outcome:
        failure, first_failed = "", None
        while True:
            codes = [p.poll() for p in self.procs]
            if all(c is not None for c in codes):
                break
            ended = [(i, c) for i, c in enumerate(codes) if c not in (None, EXIT_OK)]
            if first_failed is None:
                for i, c in ended:
                    if c is not None and exit_code(c) not in CLEAN_EXITS:
                        first_failed = i
                        failure = f"rank {self.ranks[i].rank} exited with code {c}"
                        break
            if ended and self._stop_at is None:
                self.stop()  # rule 3: the group cannot go on with a rank missing
            self._check()
            time.sleep(_POLL_S)
        returncodes = [int(c) for c in codes if c is not None]
        if first_failed is None:  # a failure seen only in the last sweep
            for i, c in enumerate(returncodes):
                if exit_code(c) not in CLEAN_EXITS:
                    first_failed = i
                    failure = f"rank {self.ranks[i].rank} exited with code {c}"
                    break
        return Outcome(returncodes, failure, self._killed, "", first_failed)

    # ------------------------------------------------------------------------- output

    def _prefixing(self) -> bool:
        if self.prefix is not None:
            return self.prefix
        try:
            return (self.out or sys.stdout).isatty()
        except (AttributeError, ValueError):  # a closed or odd stream: no terminal
            return False

    def _copy(self, rank: int, pipe: IO[bytes], is_err: bool, log: IO[bytes] | None) -> None:
        """Copy a rank's stream line by line: to its log as it is, to our stream prefixed."""
        prefix = f"[rank{rank}]: " if self._prefixing() else ""
        try:
            for raw in pipe:
                if log is not None:
                    log.write(raw)
                    log.flush()
                text = raw.decode(errors="replace")
                if not text.endswith("\n"):
                    text += "\n"  # the last line of a rank that did not end it
                stream = (self.err or sys.stderr) if is_err else (self.out or sys.stdout)
                with self._write_lock:
                    stream.write(prefix + text)
                    stream.flush()
        except (OSError, ValueError):
            pass  # our own stream closed (the terminal went away): the rank runs on
        finally:
            pipe.close()

    def _join_copiers(self) -> None:
        deadline = time.monotonic() + _DRAIN_S
        for copier in self._copiers:
            copier.join(max(deadline - time.monotonic(), 0.0))
        for log in self._logs:
            log.close()  # a copier still running past the deadline stops on the closed file
