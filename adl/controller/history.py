"""Remaining work of jobs that did not declare their length, in the production round.

The driver keeps one :class:`CompletedWork`: each round it records, once, the total work of
every job the backend lists as Succeeded, by the job's *kind* within its namespace; the round
then gives each job that declared no length the expected remaining work of its kind
(:class:`adl.sched.work_history.WorkHistory`), which the policy reads instead of
least-attained-service. Both backends list finished jobs until they are deleted (the
AdaptiveJob objects, the local SQLite rows), so after a restart of the operator or the daemon
the first round rebuilds the history from them: there is nothing extra to persist.

A job's kind is ``spec.jobKind`` when the user set it, else what the trainer runs (the image,
on Kubernetes, and the script or program of its command: :func:`job_kind`). Kinds are kept per
namespace: one tenant's jobs must not shape the predictions, and so the priorities, of
another's.
"""

from __future__ import annotations

import hashlib
import logging
import posixpath
import re
from collections.abc import Sequence
from typing import Any

from adl.controller.job_record import JobRecord
from adl.models import MAX_JOB_KIND, AdaptiveJobSpec, Phase
from adl.sched.hints import done_seconds
from adl.sched.types import SpeedupFn
from adl.sched.work_history import WorkHistory

log = logging.getLogger("adl.controller")

#: programs whose first argument, not themselves, says what the job runs
_INTERPRETER = re.compile(r"(python|pypy)[0-9.]*")
#: python options that take the next argument as their value
_OPTION_WITH_VALUE = {"-W", "-X", "-Q"}


def job_kind(spec: AdaptiveJobSpec, *, images: bool = True) -> str:
    """The kind similar jobs share: ``spec.jobKind``, else what the trainer runs: the script
    of its command (``python train.py`` -> ``train.py``, under its working directory when
    relative; ``python -m pkg.train`` -> ``pkg.train``) or the program itself, after the image
    on a backend that runs ``images`` (``ghcr.io/t/bert:1 /work/train.py``: one base image runs
    many different jobs); the image alone when there is no command (its entrypoint runs)."""
    if spec.job_kind:
        return spec.job_kind
    trainer = spec.trainer
    program = _program(trainer)
    image = trainer.get("image") if images else None
    if isinstance(image, str) and image.strip():
        return _bounded(f"{image.strip()} {program}" if program else image.strip())
    return _bounded(program)


def _program(trainer: dict[str, Any]) -> str:
    argv: list[str] = []
    for part in (trainer.get("command"), trainer.get("args")):
        if isinstance(part, list):  # a job stored by an older version may hold anything
            argv += [a for a in part if isinstance(a, str)]
    if not argv:
        return ""
    program, is_path = argv[0], "/" in argv[0]  # a bare program name is looked up in PATH
    if _INTERPRETER.fullmatch(posixpath.basename(program)):
        module, script = _python_target(argv[1:])
        if module:
            return module
        if script:
            program, is_path = script, True  # a script is a file, relative to the directory
    workdir = trainer.get("workingDir")
    if is_path and not posixpath.isabs(program) and isinstance(workdir, str) and workdir:
        # train.py of two projects are two kinds
        program = posixpath.normpath(posixpath.join(workdir, program))
    return program


def _python_target(args: Sequence[str]) -> tuple[str, str]:
    """(module, script) python runs with ``args``; ("", "") for ``-c`` code or nothing."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-m":
            return (args[i + 1] if i + 1 < len(args) else ""), ""
        if arg.startswith("-m"):
            return arg[2:], ""
        if arg == "-c" or arg.startswith("-c"):
            return "", ""
        if arg == "--":
            return "", (args[i + 1] if i + 1 < len(args) else "")
        if not arg.startswith("-") or arg == "-":
            return "", arg
        i += 2 if arg in _OPTION_WITH_VALUE else 1
    return "", ""


def _bounded(kind: str) -> str:
    """``kind`` fit for events and log lines: printable, at most ``MAX_JOB_KIND`` characters
    (a longer one keeps its start and a digest of the whole, so distinct kinds stay apart)."""
    kind = "".join(c if c.isprintable() else "?" for c in kind)
    if len(kind) <= MAX_JOB_KIND:
        return kind
    digest = hashlib.sha256(kind.encode()).hexdigest()[:16]
    return f"{kind[: MAX_JOB_KIND - len(digest) - 1]}#{digest}"


def declared(record: JobRecord) -> bool:
    """The job reported the length of its whole run (then nothing is predicted for it)."""
    hints = record.status.hints
    return hints is not None and hints.total_progress is not None


class CompletedWork:
    """The total work of succeeded jobs by kind, fed from the jobs a backend lists."""

    def __init__(self, history: WorkHistory | None = None, *, images: bool = True) -> None:
        self.history = history or WorkHistory()
        #: whether the backend runs the trainer's image (the local daemon does not: it runs
        #: the command on this machine, so the image says nothing about what runs)
        self.images = images
        #: (key, creation time) of the listed succeeded jobs already looked at: a job is
        #: recorded once, and a new job reusing a deleted one's name is a new job
        self._seen: set[tuple[str, float]] = set()

    def record(self, jobs: Sequence[JobRecord]) -> int:
        """Record the succeeded jobs in ``jobs`` not recorded before; returns how many were.
        Jobs no longer listed are forgotten (memory stays bounded by what the backend holds;
        a deleted job is not listed again)."""
        listed: dict[tuple[str, float], JobRecord] = {}
        for job in jobs:
            if job.status.phase == Phase.SUCCEEDED:
                listed[(job.key, job.created.timestamp())] = job
        self._seen &= set(listed)
        new = [job for ident, job in listed.items() if ident not in self._seen]
        self._seen |= set(listed)
        # in completion order: the history keeps the most recent jobs of each kind, also when
        # it is rebuilt from a listing after a restart
        new.sort(key=lambda j: ((j.status.completion_time or j.created).timestamp(), j.key))
        recorded = 0
        for job in new:
            try:
                key, total = self._history_key(job), done_seconds(job.status.hints)
            except Exception as err:  # one finished job's model must not stop every round
                log.warning("%s: its work is left out of the history: %s", job.key, err)
                continue
            # no progress reported (0) or no model to convert it: nothing to learn from
            if key and total and self.history.record(key, total):
                recorded += 1
        return recorded

    def predict(self, record: JobRecord, speedup: SpeedupFn | None) -> tuple[float, int] | None:
        """(expected remaining seconds on one GPU, completed jobs it averages) for a job that
        declared no length, from the completed jobs of its kind that needed more than it has
        done; None for a declared job, or without such jobs."""
        if declared(record):
            return None
        done = done_seconds(record.status.hints, speedup)
        key = self._history_key(record)
        if done is None or not key:
            return None
        return self.history.predict(key, done)

    def kind(self, spec: AdaptiveJobSpec) -> str:
        """The job's kind on this backend (:func:`job_kind`)."""
        return job_kind(spec, images=self.images)

    def _history_key(self, record: JobRecord) -> str:
        """The job's kind within its namespace (a namespace holds no '/': unambiguous)."""
        kind = self.kind(record.spec)
        return f"{record.key.partition('/')[0]}/{kind}" if kind else ""
