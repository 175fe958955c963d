"""Command-line options shared by several ``adl`` commands."""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

BackendOpt = Annotated[
    str | None,
    typer.Option(
        "--backend",
        help="local or k8s (default: local unless a kube context is configured; $ADL_BACKEND)",
    ),
]
NamespaceOpt = Annotated[str, typer.Option("--namespace", "-n", help="namespace of the job")]


class Output(StrEnum):
    TABLE = "table"
    JSON = "json"


OutputOpt = Annotated[
    Output, typer.Option("--output", "-o", help="table for people, json for scripts")
]

#: ``--policy-knob NAME=VALUE``: an adl policy constant (:mod:`adl.sched.policy_knobs`)
PolicyKnobOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--policy-knob",
        help="NAME=VALUE, an adl policy constant (repeatable; e.g. srpt_power=0.25)",
    ),
]


def check_output_path(path: Path, option: str) -> None:
    """Raise ``ValueError`` (one line naming ``option``) unless ``path`` can be written as a
    file, creating its missing parent directories: checked before the work, not after it."""
    if path.is_dir():
        raise ValueError(f"{option} {path}: is a directory; give a file name")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise ValueError(f"{option} {path}: a file is in its path") from None
    except OSError as err:
        raise ValueError(f"{option} {path}: cannot create {path.parent}: {err.strerror}") from None
    target = path if path.exists() else path.parent
    if not os.access(target, os.W_OK):
        raise ValueError(f"{option} {path}: {target} is not writable")


def write_output(path: Path, text: str, option: str) -> None:
    """Write ``text`` to ``path``; ``ValueError`` (one line) when that fails after all."""
    try:
        path.write_text(text)
    except OSError as err:
        raise ValueError(f"{option} {path}: cannot write: {err.strerror}") from None
