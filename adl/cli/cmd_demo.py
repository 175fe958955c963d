"""``adl demo``: the whole loop on this machine in a few minutes.

A local daemon with 4 CPU slots, three example jobs with different scaling behaviour submitted a
few seconds apart, a live table while the scheduler moves slots between them, and a summary
showing which jobs grew and shrank, that all finished and that their losses fell.

The demo exists to show elasticity both ways, so its daemon starts each new job on one slot
(``bootstrap_replicas=1``) rather than on a whole node: a job grows once it has measured
itself, and shrinks when the next one arrives. Each job has a kind of its own: they run the same
script, and a long job's remaining work predicted from the short ones that finished first would
make it look nearly done, not worth growing.
"""

from __future__ import annotations

import itertools
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from adl.local.client import LocalBackend

#: (name, --kind of examples/demo_train.py, scale-invariant steps, min, max, delay before submit)
DEMO_JOBS: tuple[tuple[str, str, int, int, int, float], ...] = (
    ("wide-mlp", "compute", 3000, 1, 4, 0.0),
    ("big-linear", "sync", 1000, 1, 2, 15.0),
    ("tiny-logreg", "small", 1500, 1, 2, 30.0),
)
#: the demo daemon's policy knobs: new jobs start on one slot and grow from their own reports
DEMO_KNOBS: tuple[str, ...] = ("bootstrap_replicas=1",)


@dataclass
class JobSummary:
    """One line of the demo's summary (and of ``--json``)."""

    name: str
    phase: str
    min_replicas_seen: int
    max_replicas_seen: int
    restarts: int
    first_loss: float | None
    last_loss: float | None
    grew: bool = False
    shrank: bool = False


def example_script() -> Path:
    """examples/demo_train.py of this checkout (the demo's workers run it)."""
    return Path(__file__).resolve().parents[2] / "examples" / "demo_train.py"


def demo_records(log_text: str) -> list[dict[str, Any]]:
    """The ``{"demo": {...}}`` lines a worker printed (other lines are ignored)."""
    out = []
    for line in log_text.splitlines():
        if not line.startswith('{"demo"'):
            continue
        try:
            out.append(json.loads(line)["demo"])
        except (ValueError, KeyError):
            continue
    return out


def sizes_in_order(group_sizes: list[tuple[int, int]]) -> list[int]:
    """Replica counts of the groups that ran, in group order."""
    return [n for _, n in sorted(group_sizes)]


def summarize(
    name: str, phase: str, restarts: int, group_sizes: list[tuple[int, int]], log_text: str
) -> JobSummary:
    """Pure: what happened to one job, from its groups and its rank-0 log."""
    sizes = sizes_in_order(group_sizes)
    losses = [float(r["loss"]) for r in demo_records(log_text) if "loss" in r]
    return JobSummary(
        name=name,
        phase=phase,
        min_replicas_seen=min(sizes) if sizes else 0,
        max_replicas_seen=max(sizes) if sizes else 0,
        restarts=restarts,
        first_loss=losses[0] if losses else None,
        last_loss=losses[-1] if losses else None,
        grew=any(b > a for a, b in itertools.pairwise(sizes)),
        shrank=any(b < a for a, b in itertools.pairwise(sizes)),
    )


def summary_table(rows: list[JobSummary]) -> Any:
    from rich.table import Table

    table = Table(title="adl demo: summary", header_style="bold")
    for col in ("JOB", "PHASE", "REPLICAS SEEN", "RESIZED", "RESTARTS", "LOSS first -> last"):
        table.add_column(col)
    for r in rows:
        moves = [w for w, flag in (("grew", r.grew), ("shrank", r.shrank)) if flag]
        loss = (
            f"{r.first_loss:.4f} -> {r.last_loss:.4f}"
            if r.first_loss is not None and r.last_loss is not None
            else "-"
        )
        table.add_row(
            r.name,
            r.phase,
            f"{r.min_replicas_seen}-{r.max_replicas_seen}",
            ", ".join(moves) or "-",
            str(r.restarts),
            loss,
        )
    return table


def run_demo(
    home: Path,
    *,
    slots: int = 4,
    round_s: float = 2.0,
    timeout_s: float = 900.0,
    jobs: tuple[tuple[str, str, int, int, int, float], ...] = DEMO_JOBS,
    live: bool = True,
    keep_daemon: bool = False,
    worker_args: tuple[str, ...] = (),
    policy_knobs: tuple[str, ...] = DEMO_KNOBS,
) -> list[JobSummary]:
    """Start a daemon on ``home`` (with ``policy_knobs``, unless one already serves it), run
    the demo jobs to completion, return the summary.

    ``worker_args`` are appended to every job's command (tests slow the steps down with
    ``--step-sleep`` so a job cannot finish before the scheduler had a chance to resize it).
    """
    from rich.console import Console
    from rich.live import Live

    from adl.cli.render import jobs_table
    from adl.cli.submit import spec_from_command
    from adl.jobs_api import BackendError
    from adl.local.client import LocalBackend, kill_workers, start_daemon, stop_daemon

    console = Console()
    knobs = [f"--policy-knob={knob}" for knob in policy_knobs]
    start_daemon(home, slots=slots, round_s=round_s, extra_args=knobs)
    backend = LocalBackend(home, autostart=False)
    script = example_script()
    t0 = time.monotonic()
    pending = list(jobs)
    try:
        with Live(console=console, refresh_per_second=2, transient=False) as view:
            while True:
                now = time.monotonic() - t0
                while pending and pending[0][5] <= now:
                    name, kind, steps, lo, hi, _ = pending.pop(0)
                    argv = [sys.executable, str(script), "--kind", kind, "--steps", str(steps)]
                    argv += worker_args
                    spec = spec_from_command(
                        argv,
                        min_replicas=lo,
                        max_replicas=hi,
                        # the demo lasts minutes: after the early reports, report every 3 s
                        # rather than every 30 (the public setting any job may use)
                        env=["ADL_REPORT_INTERVAL=3"],
                        workdir=str(script.parent),
                        max_restarts=3,
                        # one kind each: same script, different lengths (see the module doc)
                        job_kind=f"adl-demo-{name}",
                    )
                    try:
                        backend.submit(name, "default", spec)
                    except BackendError as err:
                        raise SystemExit(f"demo: {err}") from None
                views = backend.list("default")
                if live:
                    view.update(jobs_table(views))
                if not pending and views and all(v.status.phase.finished for v in views):
                    break
                if now > timeout_s:
                    console.print(f"[red]demo: timed out after {timeout_s:.0f}s[/red]")
                    break
                time.sleep(1.0)
        if live and not console.is_terminal:
            console.line()  # to a file or pipe the live view's last frame ends without one
        rows = []
        store = backend.store
        for v in backend.list("default"):
            rec_key = f"{v.namespace}/{v.name}"
            groups = [(g.group, g.replicas) for g in store.groups(rec_key)]
            log_path = home / "jobs" / v.namespace / v.name / "logs" / "r0.log"
            text = log_path.read_text(errors="replace") if log_path.exists() else ""
            rows.append(
                summarize(v.name, v.status.phase.value, v.status.restart_count(), groups, text)
            )
        return rows
    finally:
        if not keep_daemon:
            stop_demo_jobs(backend, console)
        backend.close()
        if not keep_daemon:
            stop_daemon(home)
            kill_workers(home)  # any straggler: nobody will come back to this home


def stop_demo_jobs(backend: LocalBackend, console: Any, wait_s: float = 15.0) -> None:
    """Delete the demo's unfinished jobs (timed out, interrupted, failed to submit) and wait
    until the daemon has stopped their workers, at most ``wait_s`` (what is left then is
    killed after the daemon stopped). Workers outlive the daemon by design, so stopping only
    the daemon would leave them running in a home nobody comes back to."""
    from adl.jobs_api import BackendError
    from adl.local.client import daemon_pid

    try:
        doomed = [v for v in backend.list() if not v.status.phase.finished]
        if not doomed:
            return
        console.print(f"demo: stopping {len(doomed)} unfinished job(s)")
        for v in doomed:
            backend.delete(v.name, v.namespace)
        keys = {f"{v.namespace}/{v.name}" for v in doomed}
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and daemon_pid(backend.home) is not None:
            # a deleted job is purged once its workers are gone
            if not keys & {r.key for r in backend.store.jobs(include_deleted=True)}:
                return
            time.sleep(0.2)
    except (KeyboardInterrupt, BackendError):
        return  # a second Ctrl-C: the caller kills what is left


def register(app: typer.Typer) -> None:
    @app.command()
    def demo(
        json_path: Annotated[
            Path | None, typer.Option("--json", help="write the summary here")
        ] = None,
        home: Annotated[
            Path | None, typer.Option(help="state directory (default: a fresh temporary one)")
        ] = None,
        slots: Annotated[int, typer.Option(min=1, help="CPU slots of the local node")] = 4,
        timeout: Annotated[
            float, typer.Option(min=0, help="give up after this many seconds")
        ] = 900.0,
        keep: Annotated[bool, typer.Option(help="leave the daemon running afterwards")] = False,
    ) -> None:
        """Run three elastic jobs on a local 4-slot daemon and show how they were resized."""
        from rich.console import Console

        from adl.cli.console import fail
        from adl.cli.options import check_output_path, write_output
        from adl.jobs_api import BackendError

        if json_path is not None:
            try:
                check_output_path(json_path, "--json")
            except ValueError as err:
                raise fail(str(err), 2) from None
        where = home or Path(tempfile.mkdtemp(prefix="adl-demo-"))
        console = Console()
        console.print(f"adl demo: local daemon with {slots} CPU slots, state in {where}")
        console.print("three jobs arrive a few seconds apart; the scheduler resizes them")
        t0 = time.monotonic()
        try:
            rows = run_demo(where, slots=slots, timeout_s=timeout, keep_daemon=keep)
        except BackendError as err:
            raise fail(str(err)) from None
        console.print(summary_table(rows))
        grew = [r.name for r in rows if r.grew]
        shrank = [r.name for r in rows if r.shrank]
        done = all(r.phase == "Succeeded" for r in rows)
        fell = all(
            r.first_loss is not None and r.last_loss is not None and r.last_loss < r.first_loss
            for r in rows
        )
        console.print(
            f"grew: {', '.join(grew) or 'none'}; shrank: {', '.join(shrank) or 'none'}; "
            f"all succeeded: {done}; losses fell: {fell}; "
            f"{time.monotonic() - t0:.0f}s"
        )
        if json_path is not None:
            payload = {
                "jobs": [
                    {k: v for k, v in asdict(r).items() if k not in ("grew", "shrank")}
                    for r in rows
                ],
                "grew": grew,
                "shrank": shrank,
                "all_succeeded": done,
                "losses_fell": fell,
                "elapsed_s": round(time.monotonic() - t0, 1),
                "home": str(where),
            }
            try:
                write_output(json_path, json.dumps(payload, indent=2), "--json")
            except ValueError as err:
                raise fail(str(err)) from None
        if not done:
            raise typer.Exit(1)
