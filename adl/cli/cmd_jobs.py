"""Job commands over any backend: submit (in :mod:`adl.cli.submit`), then ls, describe, logs,
suspend, resume, delete, top on submitted jobs (the rendering is in :mod:`adl.cli.render`).

What only some backends can tell (that their state may be stale, that their controller is
down) is asked through the capability protocols of :mod:`adl.jobs_api`, never by backend class.
Bad input ends in one clear line on stderr and exit code 1 or 2, never a traceback."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from adl.cli.backends import open_backend
from adl.cli.console import fail, note
from adl.cli.options import BackendOpt, NamespaceOpt, Output, OutputOpt
from adl.cli.render import describe_text, job_object, jobs_table
from adl.cli.submit import submit
from adl.jobs_api import Backend, BackendError, JobView, ReportsStaleness, RunsOwnController


def stale_note(b: Backend, views: list[JobView]) -> str | None:
    """The backend's warning that ``views`` may be out of date; None when it cannot tell."""
    return b.stale_note(views) if isinstance(b, ReportsStaleness) else None


def unwatched(b: Backend, name: str, namespace: str) -> bool:
    """The job is unfinished on a backend whose own controller is not running."""
    if not isinstance(b, RunsOwnController) or b.daemon_running():
        return False
    try:
        return not b.get(name, namespace).status.phase.finished
    except BackendError:
        return False


def ls(
    namespace: Annotated[str | None, typer.Option("--namespace", "-n")] = None,
    output: OutputOpt = Output.TABLE,
    backend: BackendOpt = None,
) -> None:
    """List jobs."""
    b = open_backend(backend)
    try:
        views = b.list(namespace)
    except BackendError as err:
        raise fail(str(err)) from None
    if output is Output.JSON:
        items = [job_object(v) for v in views]
        typer.echo(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=2))
    elif not views:
        typer.echo("no jobs")
    else:  # in a pipe, as wide as the rows (rich would cut names at 80 columns)
        Console(width=None if sys.stdout.isatty() else 1000).print(jobs_table(views))
    note(stale_note(b, views))


def describe(
    name: str,
    namespace: NamespaceOpt = "default",
    output: OutputOpt = Output.TABLE,
    backend: BackendOpt = None,
) -> None:
    """Show a job's spec, status (with the reason of a failure), conditions and events."""
    b = open_backend(backend)
    try:
        v = b.get(name, namespace)
    except BackendError as err:
        raise fail(str(err)) from None
    if output is Output.JSON:
        typer.echo(json.dumps(job_object(v), indent=2))
    else:
        typer.echo(describe_text(v))
    note(stale_note(b, [v]))


def logs(
    name: str,
    namespace: NamespaceOpt = "default",
    follow: Annotated[bool, typer.Option("--follow", "-f")] = False,
    replica: Annotated[int, typer.Option("--replica", "-r", min=0, help="rank to show")] = 0,
    backend: BackendOpt = None,
) -> None:
    """Print a job's worker log (rank 0 unless --replica); -f follows until it finishes."""
    b = open_backend(backend)
    try:
        lines = b.logs(name, namespace, follow=follow, replica=replica)
        if follow and unwatched(b, name, namespace):
            note("the local daemon is not running: following until the job's workers exit")
        for line in lines:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        if follow and unwatched(b, name, namespace):
            note(
                "the job's workers are gone but the local daemon is not running, so how "
                "the job ended is not recorded yet (start it: adl local up)"
            )
    except BackendError as err:
        raise fail(str(err)) from None
    except KeyboardInterrupt:
        pass


def _set_suspend(name: str, namespace: str, backend: str | None, suspend: bool) -> None:
    b = open_backend(backend)
    try:
        changed = b.set_suspend(name, namespace, suspend)
    except BackendError as err:
        raise fail(str(err)) from None
    key = f"{namespace}/{name}"
    if not changed:
        typer.echo(f"job {key} was already {'suspended' if suspend else 'not suspended'}")
    elif suspend:
        typer.echo(f"job {key} suspended: its workers checkpoint and stop (no restart counted)")
    else:
        typer.echo(f"job {key} resumed: it starts again from its checkpoint when it gets GPUs")


def suspend(name: str, namespace: NamespaceOpt = "default", backend: BackendOpt = None) -> None:
    """Stop a job's workers (they checkpoint) and give its GPUs back until `adl resume`."""
    _set_suspend(name, namespace, backend, True)


def resume(name: str, namespace: NamespaceOpt = "default", backend: BackendOpt = None) -> None:
    """Let a suspended job be scheduled again; it goes on from its checkpoint."""
    _set_suspend(name, namespace, backend, False)


def delete(name: str, namespace: NamespaceOpt = "default", backend: BackendOpt = None) -> None:
    """Delete a job (its workers are stopped)."""
    b = open_backend(backend)
    try:
        b.delete(name, namespace)
    except BackendError as err:
        raise fail(str(err)) from None
    typer.echo(f"job {namespace}/{name} deleted")


def top(
    namespace: Annotated[str | None, typer.Option("--namespace", "-n")] = None,
    interval: Annotated[float, typer.Option(min=0.1, help="refresh period, seconds")] = 1.0,
    once: Annotated[bool, typer.Option("--once", help="print one table and exit")] = False,
    backend: BackendOpt = None,
) -> None:
    """A live table of jobs (Ctrl-C to leave)."""
    import signal
    import threading

    from rich.live import Live

    b = open_backend(backend)
    # Ctrl-C sets a flag instead of raising: a KeyboardInterrupt landing inside rich's
    # refresh machinery could leave its thread un-joinable and the command hanging.
    stop = threading.Event()
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, lambda *_: stop.set()) if main else None
    try:
        if once:
            views = b.list(namespace)
            Console().print(jobs_table(views))
            note(stale_note(b, views))
            return

        def table() -> Table:
            views = b.list(namespace)
            shown = jobs_table(views)
            if said := stale_note(b, views):
                shown.caption = f"[yellow]{escape(said)}[/]"
            return shown

        with Live(table(), refresh_per_second=4) as live:
            while not stop.wait(interval):
                live.update(table())
    except BackendError as err:
        raise fail(str(err)) from None
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)


def register(app: typer.Typer) -> None:
    # in the order `adl --help` lists them
    for command in (submit, ls, describe, logs, suspend, resume, delete, top):
        app.command(command.__name__)(command)
