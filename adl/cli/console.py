"""Messages to the user on stderr: one ``error:`` line for a failure (never a traceback) and
``note:`` lines for advice that must not mix into the stdout a script may parse."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape

err = Console(stderr=True)


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print one error line and return the exit to raise."""
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False, markup=True)
    return typer.Exit(code)


def note(text: str | None) -> None:
    """Print ``note: text`` when there is a text (callers pass optional notes straight in)."""
    if text:
        err.print(f"note: {escape(text)}", highlight=False)
