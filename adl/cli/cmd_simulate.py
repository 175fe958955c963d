"""``adl simulate``: replay workloads on the trace-driven simulator under one policy.

Bad input (missing workload or traces, unknown policy) ends in one clear line on stderr and
exit code 2, never a traceback. The progress bar goes to stderr so stdout stays a clean table.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from adl.cli.options import PolicyKnobOpt, check_output_path, write_output

if TYPE_CHECKING:
    from adl.sched.sim.simulator import SimConfig, SimResult
    from adl.sched.sim.traces import AppTrace

_err = Console(stderr=True)


def _fail(message: str) -> typer.Exit:
    _err.print(f"[red]error:[/red] {escape(message)}", highlight=False, markup=True)
    return typer.Exit(2)


def _seconds_and_hours(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:,.0f} s ({seconds / 3600:.2f} h)"


def workload_table(
    name: str, policy: str, result: SimResult, summary: dict[str, Any], events: bool = False
) -> Table:
    """Per-application breakdown of one replay, with the published figure when there is one;
    ``events``: rounds also ran at submissions and finishes (said in the caption)."""
    import numpy as np

    from adl.sched.sim.published import PUBLISHED_LABEL, published_avg_jct

    table = Table(title=f"{name} under {policy}", title_justify="left")
    for col in ("application", "jobs", "avg JCT s", "p99 JCT s", "restarts/job", "GPU-h"):
        table.add_column(col, justify="left" if col == "application" else "right")
    apps = sorted({j.application for j in result.jobs})
    groups = [(app, [j for j in result.jobs if j.application == app]) for app in apps]
    groups.append(("all", list(result.jobs)))
    for app, jobs in groups:
        jcts = np.array([j.jct_s for j in jobs if j.jct_s is not None], dtype=np.float64)
        table.add_row(
            app,
            str(len(jobs)),
            f"{jcts.mean():,.0f}" if len(jcts) else "-",
            f"{np.percentile(jcts, 99):,.0f}" if len(jcts) else "-",
            f"{np.mean([j.restarts for j in jobs]):.2f}",
            f"{sum(j.gpu_seconds for j in jobs) / 3600:,.1f}",
            style="bold" if app == "all" else None,
        )
    published = published_avg_jct(name, policy)
    rounds = "every 60 s and at each submission and finish" if events else "every 60 s"
    caption = (
        f"rounds {rounds}; makespan {_seconds_and_hours(summary['makespan_s'])}; round latency p50 "
        f"{summary['round_ms_p50']:.2f} ms, p95 {summary['round_ms_p95']:.2f} ms"
    )
    if published is not None and summary["avg_jct_s"] is not None:
        diff = 100.0 * (summary["avg_jct_s"] / published - 1.0)
        caption += f"; published {PUBLISHED_LABEL[policy]} {published:,.0f} s ({diff:+.1f}%)"
    table.caption = caption
    table.caption_justify = "left"
    return table


def replay(
    path: Path,
    policy_name: str,
    seed: int,
    apps: dict[str, AppTrace],
    config: SimConfig,
    console: Console,
    knobs: dict[str, float] | None = None,
) -> SimResult:
    """One workload with a progress bar (simulated time and jobs done)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from adl.sched.sim.policies import make_policy
    from adl.sched.sim.simulator import Simulator
    from adl.sched.sim.workload import load_workload

    jobs = load_workload(path)
    sim = Simulator(jobs, make_policy(policy_name, seed, knobs), apps, config)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("jobs done, sim time {task.fields[sim]}"),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task(path.stem, total=len(jobs), sim="0.0 h")

        def progress(now: int, finished: int, total: int) -> None:
            bar.update(task, completed=finished, sim=f"{now / 3600:.1f} h")

        return sim.run(progress)


def single_threaded_blas() -> None:
    """The simulator only solves tiny (3x3) systems; BLAS worker threads just spin and, on a
    busy machine, made a cold replay 5-30x slower. Effective only before numpy is loaded."""
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")


def register(app: typer.Typer) -> None:
    @app.command()
    def simulate(
        target: Annotated[
            Path,
            typer.Argument(
                help="a workload CSV, a directory of workload-*.csv files, or the name of a "
                "published workload packaged with adl (workload-1 .. workload-4, or "
                "'workloads' for all four)"
            ),
        ],
        policy: Annotated[
            str,
            typer.Option(
                "--policy",
                "-p",
                help="adl, sia, pollux, pollux-objective, tiresias, optimus, fifo, gavel or "
                "pollux-agnostic; several, comma-separated (adl,sia,pollux), replay each "
                "workload under each",
            ),
        ] = "adl",
        traces: Annotated[
            Path | None,
            typer.Option(
                "--traces",
                help="pollux-traces directory (default: $ADL_TRACES, else the traces "
                "packaged with adl)",
            ),
        ] = None,
        seed: Annotated[int, typer.Option("--seed", help="policy seed")] = 0,
        json_path: Annotated[
            Path | None,
            typer.Option(
                "--json",
                help="write per-workload figures as JSON (with several policies, "
                '{"policies": [one such document per policy]})',
            ),
        ] = None,
        plot: Annotated[
            Path | None,
            typer.Option(
                "--plot", help="write GPUs per job over time as a PNG (a panel per replay)"
            ),
        ] = None,
        plot_jct: Annotated[
            Path | None,
            typer.Option(
                "--plot-jct",
                help="write the distribution of job completion times as a PNG: a panel per "
                "workload, a line per policy (the fraction of jobs finished within x seconds)",
            ),
        ] = None,
        hide_remaining: Annotated[
            bool,
            typer.Option(
                "--hide-remaining",
                help="jobs do not report their remaining work (length-agnostic scheduling)",
            ),
        ] = False,
        policy_knob: PolicyKnobOpt = None,
        decisions_path: Annotated[
            Path | None,
            typer.Option(
                "--decisions",
                help="write every allocation change with its reason (workload, time, job, why) "
                "as tab-separated lines",
            ),
        ] = None,
        fixed_rounds: Annotated[
            bool,
            typer.Option(
                "--fixed-rounds",
                help="adl too reschedules only every 60 s, not also when a job arrives or "
                "finishes (how the published baselines were replayed)",
            ),
        ] = False,
        peer_conditions: Annotated[
            bool,
            typer.Option(
                "--peer-conditions",
                help="the peer-conditions mode (issue 34): rounds every 60 s only for every "
                "policy, per-model restart delays (cifar10 50 s, deepspeech2 25, yolov3 80, "
                "bert 120, imagenet 250, ncf 30), models fitted online from what each job ran",
            ),
        ] = False,
    ) -> None:
        """Replay workloads on the trace-driven simulator and report JCT figures."""
        single_threaded_blas()
        from adl.sched.policy_knobs import parse_knobs
        from adl.sched.sim.metrics import summarize
        from adl.sched.sim.policies import POLICY_NAMES, rounds_on_events, uses_oracle
        from adl.sched.sim.simulator import SimConfig
        from adl.sched.sim.simulator import peer_conditions as peer_mode
        from adl.sched.sim.traces import default_traces_dir, load_traces
        from adl.sched.sim.workload import workload_paths

        policies = [p.strip() for p in policy.split(",") if p.strip()]
        for name in policies or [policy]:
            if name not in POLICY_NAMES:
                raise _fail(f"unknown policy {name!r}; choose one of {', '.join(POLICY_NAMES)}")
        if len(set(policies)) < len(policies):
            raise _fail(f"--policy {policy}: a policy is named twice")
        try:
            knobs = parse_knobs(policy_knob or [])
        except ValueError as err:
            raise _fail(str(err)) from None
        if knobs and "adl" not in policies:
            raise _fail(f"--policy-knob applies to the adl policy only, not {policy!r}")
        if decisions_path is not None and len(policies) > 1:
            raise _fail("--decisions takes one policy")
        try:
            paths = workload_paths(target)
        except FileNotFoundError as err:
            raise _fail(str(err)) from None
        traces_dir = traces if traces is not None else default_traces_dir()
        try:
            apps = load_traces(traces_dir)
        except (FileNotFoundError, ValueError) as err:
            raise _fail(str(err)) from None
        try:
            for option, plot_path in (("--plot", plot), ("--plot-jct", plot_jct)):
                if plot_path is not None:
                    from adl.sched.sim.plot import check_plot_path

                    check_plot_path(plot_path, option)
                    check_output_path(plot_path, option)
            if json_path is not None:
                check_output_path(json_path, "--json")
            if decisions_path is not None:
                check_output_path(decisions_path, "--decisions")
        except ValueError as err:
            raise _fail(str(err)) from None
        for name in policies:
            if hide_remaining and uses_oracle(name):
                _err.print(f"note: {name} is an oracle baseline; --hide-remaining does not apply")

        out = Console()
        decision_lines: list[str] = []
        reports: dict[str, dict[str, Any]] = {name: {} for name in policies}
        plotted: list[tuple[str, SimResult]] = []
        by_workload: dict[str, list[tuple[str, SimResult]]] = {}
        several = len(policies) > 1
        for path in paths:
            for name in policies:
                events = rounds_on_events(name) and not (fixed_rounds or peer_conditions)
                config = SimConfig(
                    hide_remaining=hide_remaining,
                    rounds_on_events=events,
                    explain=decisions_path is not None,
                )
                if peer_conditions:
                    config = peer_mode(
                        hide_remaining=hide_remaining, explain=decisions_path is not None
                    )
                t0 = time.perf_counter()
                try:
                    result = replay(
                        path, name, seed, apps, config, _err, knobs if name == "adl" else None
                    )
                except (KeyError, ValueError) as err:
                    text = str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)
                    raise _fail(text if text.startswith(str(path)) else f"{path}: {text}") from None
                wall = time.perf_counter() - t0
                summary = summarize(result)
                summary["wall_s"] = round(wall, 3)
                reports[name][path.stem] = summary
                out.print(workload_table(path.stem, name, result, summary, events))
                out.print(f"simulated in {wall:.1f} s\n")
                if plot is not None:
                    plotted.append((f"{path.stem} under {name}" if several else path.stem, result))
                if plot_jct is not None:
                    by_workload.setdefault(path.stem, []).append((name, result))
                decision_lines += [
                    f"{path.stem}\t{t}\t{d.job}\t{d.message}" for t, d in result.decisions
                ]
        if decisions_path is not None:
            try:
                write_output(
                    decisions_path, "".join(f"{x}\n" for x in decision_lines), "--decisions"
                )
            except ValueError as err:
                raise _fail(str(err)) from None
            out.print(f"wrote {len(decision_lines)} decisions to {decisions_path}")
        if json_path is not None:
            docs = [
                {
                    "policy": name,
                    "policy_knobs": knobs if name == "adl" else {},
                    "seed": seed,
                    "hide_remaining": hide_remaining,
                    "rounds_on_events": rounds_on_events(name)
                    and not (fixed_rounds or peer_conditions),
                    "peer_conditions": peer_conditions,
                    "traces": str(traces_dir),
                    "workloads": reports[name],
                }
                for name in policies
            ]
            doc = {"policies": docs} if several else docs[0]
            try:
                write_output(json_path, json.dumps(doc, indent=2) + "\n", "--json")
            except ValueError as err:
                raise _fail(str(err)) from None
            out.print(f"wrote {json_path}")
        if plot is not None:
            from adl.sched.sim.plot import plot_schedules

            plot_schedules(plotted, plot, title=f"GPUs per job under {', '.join(policies)}")
            out.print(f"wrote {plot}")
        if plot_jct is not None:
            from adl.sched.sim.plot import plot_jct_cdf

            plot_jct_cdf(
                list(by_workload.items()), plot_jct, title="Job completion times, per policy"
            )
            out.print(f"wrote {plot_jct}")
