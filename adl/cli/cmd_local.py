"""``adl local up/down/status``: the embedded single-machine backend's daemon."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from adl.cli.options import PolicyKnobOpt

HomeOpt = Annotated[
    Path | None, typer.Option("--home", help="state directory (default $ADL_HOME or ~/.adl/local)")
]


def register(app: typer.Typer) -> None:
    local = typer.Typer(help="The local backend: this machine as a one-node cluster.")
    app.add_typer(local, name="local")

    @local.command()
    def up(
        home: HomeOpt = None,
        slots: Annotated[
            int | None, typer.Option(min=1, help="CPU slots when there is no GPU (default 4)")
        ] = None,
        round_s: Annotated[
            float | None, typer.Option(min=0.1, help="scheduling period, seconds (default 5)")
        ] = None,
        foreground: Annotated[bool, typer.Option(help="run in this terminal")] = False,
        prewarm: Annotated[
            bool, typer.Option(help="keep a warm shim (torch imported) for each resize")
        ] = True,
        policy: Annotated[
            str,
            typer.Option(
                help="the scheduling policy: adl, a baseline (sia, pollux, tiresias, optimus, "
                "fifo, ...: the names `adl simulate --policy` takes) or module:Class"
            ),
        ] = "adl",
        policy_knob: PolicyKnobOpt = None,
    ) -> None:
        """Start the daemon in the background (no-op when one is running)."""
        from adl.cli.console import fail
        from adl.jobs_api import BackendError
        from adl.local.client import daemon_pid, save_settings, start_daemon
        from adl.local.store import default_home
        from adl.sched import registry
        from adl.sched.policy_knobs import parse_knobs

        where = home or default_home()
        try:
            knobs = parse_knobs(policy_knob or [])
            registry.policy_factory(policy, knobs=knobs)  # refused here, not in the daemon's log
        except ValueError as err:
            raise fail(str(err), 2) from None
        flags = ["--slots", str(slots)] if slots else []
        flags += ["--round-s", str(round_s)] if round_s else []
        flags += [] if prewarm else ["--no-prewarm"]
        flags += [] if policy == "adl" else [f"--policy={policy}"]
        flags += [f"--policy-knob={name}={value!r}" for name, value in knobs.items()]
        if foreground:
            from adl.local import daemon_main

            try:
                save_settings(where, flags)
            except BackendError as err:
                raise fail(str(err)) from None
            raise typer.Exit(daemon_main.main(["--home", str(where), *flags]))
        if daemon_pid(where):
            typer.echo(f"adl daemon already running (pid {daemon_pid(where)}) for {where}")
            given = [
                flag
                for flag, value in (
                    ("--slots", slots),
                    ("--round-s", round_s),
                    ("--policy", policy != "adl"),
                    ("--policy-knob", knobs),
                    ("--no-prewarm", not prewarm),
                )
                if value
            ]
            if given:
                typer.echo(f"{', '.join(given)} apply from the next start: adl local down, then up")
            return
        try:
            pid = start_daemon(where, extra_args=flags)
        except BackendError as err:
            raise fail(str(err)) from None
        save_settings(where, flags)  # the daemons started on demand from now on use them too
        typer.echo(f"adl daemon started (pid {pid}), state in {where}")

    @local.command()
    def down(home: HomeOpt = None) -> None:
        """Stop the daemon (running workers keep going and are adopted on the next start)."""
        from adl.local.client import stop_daemon
        from adl.local.store import default_home

        where = home or default_home()
        if stop_daemon(where):
            typer.echo("adl daemon stopped")
        else:
            typer.echo("no adl daemon running")

    @local.command()
    def status(home: HomeOpt = None) -> None:
        """Whether the daemon runs, its API address and slots, and job counts by phase."""
        from adl.cli.console import fail
        from adl.local.client import DB_NAME, daemon_pid, saved_settings
        from adl.local.store import StateUnreadable, Store, default_home

        where = home or default_home()
        pid = daemon_pid(where)
        typer.echo(f"daemon:  {f'running (pid {pid})' if pid else 'stopped'}")
        typer.echo(f"home:    {where}")
        if not (where / DB_NAME).exists():
            return
        try:
            store = Store(where / DB_NAME)
        except StateUnreadable as err:
            raise fail(str(err)) from None
        try:
            typer.echo(f"api:     {store.get_meta('api_url') or '-'}")
            typer.echo(f"slots:   {store.get_meta('slots') or '-'}")
            types = store.get_meta("gpu_types")
            if types:  # GPU slots: each one's type ("unknown" where the driver did not say)
                typer.echo(f"gpus:    {gpu_type_summary(types.split(','))}")
            flags = saved_settings(where)
            typer.echo(f"up with: {shlex.join(flags) if flags else 'defaults'} (also on demand)")
            counts: dict[str, int] = {}
            for rec in store.jobs():
                counts[rec.status.phase.value] = counts.get(rec.status.phase.value, 0) + 1
            summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "none"
            typer.echo(f"jobs:    {summary}")
            unwritable = store.probe_write()
            if unwritable is None:
                typer.echo("state:   writable")
            else:  # a full disk or a read-only file: say so, the phases above may be old
                typer.echo(
                    f"state:   NOT WRITABLE ({unwritable}): the phases shown may be stale; "
                    "the daemon retries until it can write (free disk space, check permissions)"
                )
        finally:
            store.close()


def gpu_type_summary(types: list[str]) -> str:
    """``2 x NVIDIA-A100-SXM4-80GB, 1 x Tesla-T4`` for the daemon's GPU slots, in slot order."""
    counts: dict[str, int] = {}
    for t in types:
        counts[t or "unknown"] = counts.get(t or "unknown", 0) + 1
    return ", ".join(f"{n} x {t}" for t, n in counts.items())
