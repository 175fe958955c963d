"""Job commands over any backend: submit, ls, describe, logs, delete, top.

Bad input ends in one clear line on stderr and exit code 1 or 2, never a traceback."""

from __future__ import annotations

import json
import shlex
import sys
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from adl.cli.backend import Backend, BackendError, JobView
from adl.models import AdaptiveJobSpec, Phase, RestartCause, parse_spec
from adl.operator.crd import API_VERSION

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

_err = Console(stderr=True)


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print one error line and return the exit to raise."""
    _err.print(f"[red]error:[/red] {escape(message)}", highlight=False, markup=True)
    return typer.Exit(code)


def _backend(name: str | None) -> Backend:
    from adl.cli.backends import get_backend, resolve_kind

    try:
        resolve_kind(name)
    except BackendError as err:  # a typo in --backend / $ADL_BACKEND is a usage error
        raise fail(str(err), 2) from None
    try:
        return get_backend(name)
    except BackendError as err:
        raise fail(str(err)) from None


def spec_from_command(
    command: list[str],
    *,
    min_replicas: int,
    max_replicas: int,
    env: list[str],
    workdir: str | None,
    max_restarts: int | None,
    image: str | None = None,
    gpus_per_replica: int | None = None,
    storage_class: str | None = None,
    claim: str | None = None,
    checkpoint_size: str | None = None,
    priority: int | None = None,
    weight: float | None = None,
) -> AdaptiveJobSpec:
    """An AdaptiveJob spec running ``command``: on this machine, or in ``image`` on a cluster."""
    env_list = []
    for item in env:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise ValueError(f"--env expects NAME=VALUE, got {item!r}")
        env_list.append({"name": k, "value": v})
    container: dict[str, Any] = {"name": "trainer", "command": list(command)}
    if image:
        container["image"] = image
    if env_list:
        container["env"] = env_list
    if workdir:
        container["workingDir"] = workdir
    body: dict[str, Any] = {
        "template": {"spec": {"containers": [container]}},
        "minReplicas": min_replicas,
        "maxReplicas": max_replicas,
    }
    if max_restarts is not None:
        body["maxRestarts"] = max_restarts
    if gpus_per_replica is not None:
        body["gpusPerReplica"] = gpus_per_replica
    if priority is not None:
        body["priority"] = priority
    if weight is not None:
        body["weight"] = weight
    checkpoint = {
        k: v
        for k, v in (
            ("storageClass", storage_class),
            ("claimName", claim),
            ("size", checkpoint_size),
        )
        if v
    }
    if checkpoint:
        body["checkpoint"] = checkpoint
    return parse_spec(body)


def manifest(path: Path) -> tuple[str | None, str | None, AdaptiveJobSpec]:
    """(name, namespace, spec) from an AdaptiveJob YAML file."""
    import yaml

    try:
        with open(path, encoding="utf-8") as fh:  # a file object: errors name the file
            doc = yaml.safe_load(fh)
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise ValueError(f"{path} is not valid YAML: {err}") from None
    if not isinstance(doc, dict) or "spec" not in doc:
        raise ValueError(f"{path}: expected an AdaptiveJob manifest with a 'spec'")
    if doc.get("kind", "AdaptiveJob") != "AdaptiveJob":
        raise ValueError(f"{path}: kind must be AdaptiveJob, got {doc.get('kind')!r}")
    if doc.get("apiVersion", API_VERSION) != API_VERSION:
        raise ValueError(f"{path}: apiVersion must be {API_VERSION}, got {doc.get('apiVersion')!r}")
    meta = doc.get("metadata") or {}
    return meta.get("name"), meta.get("namespace"), parse_spec(doc["spec"])


# ---------------------------------------------------------------------- rendering (pure)


def age(created: datetime | None, now: datetime | None = None) -> str:
    if created is None:
        return "-"
    s = int(((now or datetime.now(UTC)) - created).total_seconds())
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    return f"{s // 3600}h"


def _restarts(v: JobView) -> str:
    st = v.status
    total = st.restart_count()
    if not total:
        return "0"
    parts = [f"{c.value}:{st.restart_count(c)}" for c in RestartCause if st.restart_count(c)]
    return f"{total} ({', '.join(parts)})"


_PHASE_STYLE = {
    Phase.RUNNING: "green",
    Phase.SUCCEEDED: "bold green",
    Phase.FAILED: "bold red",
    Phase.RESTARTING: "yellow",
    Phase.STARTING: "cyan",
    Phase.PENDING: "dim",
    Phase.SUSPENDED: "magenta",
}


def jobs_table(views: list[JobView], now: datetime | None = None) -> Table:
    """The table of ``ls`` and ``top``: job, phase, replicas, batch size, goodput, restarts."""
    table = Table(box=None, header_style="bold")
    for col in ("JOB", "PHASE", "REPLICAS", "BATCH", "GOODPUT", "RESTARTS", "AGE"):
        table.add_column(col, justify="right" if col in ("BATCH", "GOODPUT") else "left")
    for v in views:
        st = v.status
        name = v.name if v.namespace == "default" else f"{v.namespace}/{v.name}"
        table.add_row(
            name,
            f"[{_PHASE_STYLE.get(st.phase, '')}]{st.phase.value}[/]",
            f"{st.replicas} ({v.spec.min_replicas}-{v.spec.max_replicas})",
            str(st.batch_size) if st.batch_size else "-",
            f"{st.goodput:.1f}" if st.goodput is not None else "-",
            _restarts(v),
            age(v.created, now),
        )
    return table


def job_object(v: JobView) -> dict[str, Any]:
    """A job as Kubernetes would show it (``kubectl get aj -o json``), on either backend."""
    meta: dict[str, Any] = {"name": v.name, "namespace": v.namespace}
    if v.created is not None:
        meta["creationTimestamp"] = v.created.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return {
        "apiVersion": API_VERSION,
        "kind": "AdaptiveJob",
        "metadata": meta,
        "spec": v.spec.model_dump(mode="json", by_alias=True, exclude_none=True),
        "status": v.status.model_dump(mode="json", by_alias=True, exclude_none=True),
    }


def describe_text(v: JobView) -> str:
    """``adl describe``: spec essentials, status with the reason, conditions, events."""
    st, spec = v.status, v.spec
    cmd = spec.trainer.get("command") or []
    args = spec.trainer.get("args") or []
    lines = [
        f"Name:         {v.name}",
        f"Namespace:    {v.namespace}",
        f"Command:      {shlex.join([*cmd, *args]) if cmd else spec.trainer.get('image', '-')}",
        f"Replicas:     min {spec.min_replicas}, max {spec.max_replicas}",
        f"MaxRestarts:  {spec.max_restarts}",
        f"Phase:        {st.phase.value}",
    ]
    if st.reason or st.message:
        lines.append(f"Reason:       {st.reason}: {st.message}".rstrip(": "))
    lines += [
        f"Group:        {st.group}",
        f"Allocation:   {', '.join(st.allocation) or '-'} ({st.replicas} replicas)",
        f"Restarts:     {_restarts(v)}",
        f"Batch size:   {st.batch_size or '-'}",
        f"Goodput:      {f'{st.goodput:.2f}' if st.goodput is not None else '-'}",
    ]
    if st.hints is not None:
        h = st.hints
        total = f"/{h.total_progress:.0f}" if h.total_progress else ""
        lines.append(f"Progress:     {h.progress:.0f}{total} scale-invariant steps")
    if st.start_time:
        lines.append(f"Started:      {st.start_time.isoformat(timespec='seconds')}")
    if st.completion_time:
        lines.append(f"Completed:    {st.completion_time.isoformat(timespec='seconds')}")
    if st.conditions:
        lines.append("Conditions:")
        for c in st.conditions:
            said = " ".join(part for part in (c.reason, c.message) if part)
            lines.append(f"  {c.type:<10} {c.status:<6} {said}".rstrip())
    if v.events:
        lines.append("Events:")
        lines += [f"  {e}" for e in v.events]
    return "\n".join(lines)


# ---------------------------------------------------------------------- commands


def register(app: typer.Typer) -> None:
    @app.command()
    def submit(
        name: Annotated[
            str | None, typer.Argument(help="job name (or metadata.name of -f)")
        ] = None,
        command: Annotated[
            list[str] | None, typer.Argument(help="the trainer command, after --")
        ] = None,
        file: Annotated[Path | None, typer.Option("--file", "-f", help="AdaptiveJob YAML")] = None,
        namespace: Annotated[
            str | None,
            typer.Option(
                "--namespace",
                "-n",
                help="namespace of the job (default: the manifest's, else default)",
            ),
        ] = None,
        min_replicas: Annotated[
            int | None, typer.Option("--min", help="fewest replicas (default 1)")
        ] = None,
        max_replicas: Annotated[
            int | None, typer.Option("--max", help="most replicas (default 4)")
        ] = None,
        env: Annotated[list[str] | None, typer.Option("--env", "-e", help="NAME=VALUE")] = None,
        workdir: Annotated[str | None, typer.Option("--workdir", help="working directory")] = None,
        max_restarts: Annotated[
            int | None, typer.Option("--max-restarts", help="failures retried (default 3)")
        ] = None,
        image: Annotated[
            str | None, typer.Option("--image", help="container image (Kubernetes)")
        ] = None,
        gpus_per_replica: Annotated[
            int | None, typer.Option("--gpus-per-replica", help="GPUs per replica")
        ] = None,
        storage_class: Annotated[
            str | None,
            typer.Option("--storage-class", help="make the checkpoint claim from this class"),
        ] = None,
        claim: Annotated[
            str | None, typer.Option("--claim", help="existing checkpoint claim")
        ] = None,
        checkpoint_size: Annotated[
            str | None, typer.Option("--checkpoint-size", help="size of a made claim (10Gi)")
        ] = None,
        priority: Annotated[
            int | None,
            typer.Option("--priority", help="higher tiers get GPUs first (-1000..1000, default 0)"),
        ] = None,
        weight: Annotated[
            float | None,
            typer.Option("--weight", help="importance within a tier (default 1)"),
        ] = None,
        backend: BackendOpt = None,
    ) -> None:
        """Submit a job: adl submit NAME -- python train.py, or adl submit -f job.yaml."""
        # the flags that describe the job (a manifest carries them instead), as given
        flags = {
            "--min": min_replicas,
            "--max": max_replicas,
            "--env": env,
            "--workdir": workdir,
            "--max-restarts": max_restarts,
            "--image": image,
            "--gpus-per-replica": gpus_per_replica,
            "--storage-class": storage_class,
            "--claim": claim,
            "--checkpoint-size": checkpoint_size,
            "--priority": priority,
            "--weight": weight,
        }
        given = [flag for flag, value in flags.items() if value is not None]
        try:
            if file is not None:
                if command:
                    raise ValueError("give either -f FILE or a command, not both")
                if given:
                    raise ValueError(
                        f"{', '.join(given)}: set these in the manifest; with -f only the name "
                        "and --namespace may be given"
                    )
                file_name, file_ns, spec = manifest(file)
                name = name or file_name
                if file_ns and namespace and file_ns != namespace:
                    raise ValueError(  # as kubectl says it
                        f"the namespace from the provided object {file_ns!r} does not match "
                        f"the namespace {namespace!r} given with -n: drop one of them"
                    )
                namespace = namespace or file_ns
            else:
                if not command:
                    raise ValueError("nothing to run: give a command after -- or -f FILE")
                spec = spec_from_command(
                    command,
                    min_replicas=1 if min_replicas is None else min_replicas,
                    max_replicas=4 if max_replicas is None else max_replicas,
                    env=env or [],
                    # A container has its own file system: only a local job defaults to here.
                    workdir=workdir if image else str(Path(workdir or ".").resolve()),
                    max_restarts=max_restarts,
                    image=image,
                    gpus_per_replica=gpus_per_replica,
                    storage_class=storage_class,
                    claim=claim,
                    checkpoint_size=checkpoint_size,
                    priority=priority,
                    weight=weight,
                )
            if not name:
                raise ValueError("the job needs a name")
            namespace = namespace or "default"
            _check_name(name)
            _check_name(namespace, "namespace")
        except ValueError as err:  # InvalidSpec too: one readable line per problem
            raise fail(str(err), 2) from None
        b = _backend(backend)
        from adl.cli.backends import BackendKind, resolve_kind

        cluster_only = ("--image", "--storage-class", "--claim", "--checkpoint-size")
        unused = [flag for flag in given if flag in cluster_only]
        if unused and resolve_kind(backend) is BackendKind.LOCAL:
            _err.print(f"note: the local backend does not use {', '.join(unused)}", highlight=False)
        try:
            v = b.submit(name, namespace, spec)
        except BackendError as err:
            raise fail(str(err)) from None
        typer.echo(f"job {v.namespace}/{v.name} submitted")

    @app.command("ls")
    def ls(
        namespace: Annotated[str | None, typer.Option("--namespace", "-n")] = None,
        output: OutputOpt = Output.TABLE,
        backend: BackendOpt = None,
    ) -> None:
        """List jobs."""
        b = _backend(backend)
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
        _note(_stale_note(b, views))

    @app.command()
    def describe(
        name: str,
        namespace: NamespaceOpt = "default",
        output: OutputOpt = Output.TABLE,
        backend: BackendOpt = None,
    ) -> None:
        """Show a job's spec, status (with the reason of a failure), conditions and events."""
        b = _backend(backend)
        try:
            v = b.get(name, namespace)
        except BackendError as err:
            raise fail(str(err)) from None
        if output is Output.JSON:
            typer.echo(json.dumps(job_object(v), indent=2))
        else:
            typer.echo(describe_text(v))
        _note(_stale_note(b, [v]))

    @app.command()
    def logs(
        name: str,
        namespace: NamespaceOpt = "default",
        follow: Annotated[bool, typer.Option("--follow", "-f")] = False,
        replica: Annotated[int, typer.Option("--replica", "-r", min=0, help="rank to show")] = 0,
        backend: BackendOpt = None,
    ) -> None:
        """Print a job's worker log (rank 0 unless --replica); -f follows until it finishes."""
        b = _backend(backend)
        try:
            lines = b.logs(name, namespace, follow=follow, replica=replica)
            if follow and _unwatched(b, name, namespace):
                _note("the local daemon is not running: following until the job's workers exit")
            for line in lines:
                sys.stdout.write(line + "\n")
                sys.stdout.flush()
            if follow and _unwatched(b, name, namespace):
                _note(
                    "the job's workers are gone but the local daemon is not running, so how "
                    "the job ended is not recorded yet (start it: adl local up)"
                )
        except BackendError as err:
            raise fail(str(err)) from None
        except KeyboardInterrupt:
            pass

    def _set_suspend(name: str, namespace: str, backend: str | None, suspend: bool) -> None:
        b = _backend(backend)
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

    @app.command()
    def suspend(name: str, namespace: NamespaceOpt = "default", backend: BackendOpt = None) -> None:
        """Stop a job's workers (they checkpoint) and give its GPUs back until `adl resume`."""
        _set_suspend(name, namespace, backend, True)

    @app.command()
    def resume(name: str, namespace: NamespaceOpt = "default", backend: BackendOpt = None) -> None:
        """Let a suspended job be scheduled again; it goes on from its checkpoint."""
        _set_suspend(name, namespace, backend, False)

    @app.command()
    def delete(name: str, namespace: NamespaceOpt = "default", backend: BackendOpt = None) -> None:
        """Delete a job (its workers are stopped)."""
        b = _backend(backend)
        try:
            b.delete(name, namespace)
        except BackendError as err:
            raise fail(str(err)) from None
        typer.echo(f"job {namespace}/{name} deleted")

    @app.command()
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

        b = _backend(backend)
        # Ctrl-C sets a flag instead of raising: a KeyboardInterrupt landing inside rich's
        # refresh machinery could leave its thread un-joinable and the command hanging.
        stop = threading.Event()
        main = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, lambda *_: stop.set()) if main else None
        try:
            if once:
                views = b.list(namespace)
                Console().print(jobs_table(views))
                _note(_stale_note(b, views))
                return

            def table() -> Table:
                views = b.list(namespace)
                shown = jobs_table(views)
                if note := _stale_note(b, views):
                    shown.caption = f"[yellow]{escape(note)}[/]"
                return shown

            with Live(table(), refresh_per_second=4) as live:
                while not stop.wait(interval):
                    live.update(table())
        except BackendError as err:
            raise fail(str(err)) from None
        finally:
            if main:
                signal.signal(signal.SIGINT, previous)


def _stale_note(b: Backend, views: list[JobView]) -> str | None:
    """The local backend's warning that no daemon runs (phases may be stale), else None."""
    from adl.local.client import LocalBackend

    return b.stale_note(views) if isinstance(b, LocalBackend) else None


def _unwatched(b: Backend, name: str, namespace: str) -> bool:
    """The job is unfinished on a local backend whose daemon is not running."""
    from adl.local.client import LocalBackend

    if not isinstance(b, LocalBackend) or b.daemon_running():
        return False
    try:
        return not b.get(name, namespace).status.phase.finished
    except BackendError:
        return False


def _note(text: str | None) -> None:
    if text:
        _err.print(f"note: {escape(text)}", highlight=False)


def _check_name(name: str, what: str = "job name") -> None:
    import re

    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", name):
        raise ValueError(
            f"invalid {what} {name!r}: use lowercase letters, digits and '-', at most 63"
        )
