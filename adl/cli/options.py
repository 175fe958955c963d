"""Command-line options shared by several ``adl`` commands."""

from __future__ import annotations

from typing import Annotated

import typer

#: ``--policy-knob NAME=VALUE``: an adl policy constant (:mod:`adl.sched.policy_knobs`)
PolicyKnobOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--policy-knob",
        help="NAME=VALUE, an adl policy constant (repeatable; e.g. srpt_power=0.25)",
    ),
]
