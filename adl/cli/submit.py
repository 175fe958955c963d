"""``adl submit``: a job from a command line (``adl submit NAME -- python train.py``) or from an
AdaptiveJob manifest (``-f job.yaml``), on any backend. Registered by :mod:`adl.cli.cmd_jobs`,
first, so that ``adl --help`` lists it before the commands on submitted jobs.

Bad input ends in one clear line on stderr and exit code 2, never a traceback."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path
from typing import Annotated, Any

import typer

from adl.cli.backends import open_backend, resolve_kind
from adl.cli.console import fail, note
from adl.cli.options import BackendOpt
from adl.jobs_api import BackendError, IgnoresSettings
from adl.models import MAX_OBJECT_BYTES, AdaptiveJobSpec, limit_text, oversized, parse_spec
from adl.operator.crd import API_VERSION

#: the spec setting each cluster-oriented flag fills in (see IgnoresSettings)
_SETTING_OF_FLAG = {
    "--image": "image",
    "--storage-class": "checkpoint",
    "--claim": "checkpoint",
    "--checkpoint-size": "checkpoint",
    "--queue": "queue",
}


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
    job_kind: str | None = None,
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
    if job_kind is not None:
        body["jobKind"] = job_kind
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


class _Named(io.StringIO):
    name = ""


def manifest(path: Path) -> tuple[str | None, str | None, AdaptiveJobSpec]:
    """(name, namespace, spec) from an AdaptiveJob YAML file."""
    import yaml

    limit = f"a manifest may be at most {limit_text()} (the limit of a Kubernetes object)"
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            data = fh.read(MAX_OBJECT_BYTES + 1)  # never more than the cap, whatever stat said
        if len(data) > MAX_OBJECT_BYTES:
            raise ValueError(f"{path} is {max(size, len(data))} bytes; {limit}")
        text = _Named(data.decode("utf-8"))
        text.name = str(path)  # YAML errors name the file
        doc = yaml.safe_load(text)
    except OSError as err:
        raise ValueError(f"cannot read {path}: {err.strerror}") from None
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not UTF-8 text: {err.reason}") from None
    except yaml.YAMLError as err:
        raise ValueError(f"{path} is not valid YAML: {err}") from None
    # aliases are shared references after parsing: small in memory, but every later copy or
    # serialization expands them (the spec, the store, every ``adl ls``)
    if oversized(doc):
        raise ValueError(
            f"{path} is larger than {limit_text()} once its YAML aliases are expanded; {limit}"
        )
    if not isinstance(doc, dict) or "spec" not in doc:
        raise ValueError(f"{path}: expected an AdaptiveJob manifest with a 'spec'")
    if doc.get("kind", "AdaptiveJob") != "AdaptiveJob":
        raise ValueError(f"{path}: kind must be AdaptiveJob, got {doc.get('kind')!r}")
    if doc.get("apiVersion", API_VERSION) != API_VERSION:
        raise ValueError(f"{path}: apiVersion must be {API_VERSION}, got {doc.get('apiVersion')!r}")
    meta = doc.get("metadata") or {}
    return meta.get("name"), meta.get("namespace"), parse_spec(doc["spec"])


def check_name(name: str, what: str = "job name") -> None:
    """``ValueError`` unless ``name`` is a Kubernetes DNS label (what both backends accept)."""
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", name):
        raise ValueError(
            f"invalid {what} {name!r}: use lowercase letters, digits and '-', at most 63"
        )


def submit(
    name: Annotated[str | None, typer.Argument(help="job name (or metadata.name of -f)")] = None,
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
    claim: Annotated[str | None, typer.Option("--claim", help="existing checkpoint claim")] = None,
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
    job_kind: Annotated[
        str | None,
        typer.Option(
            "--job-kind",
            help="groups similar jobs: an undeclared length is predicted from completed jobs"
            " of this kind (default: the image, else the script)",
        ),
    ] = None,
    queue: Annotated[
        str | None,
        typer.Option(
            "--queue",
            help="the Kueue LocalQueue to run in (Kubernetes with the chart's kueue.enabled;"
            " the label kueue.x-k8s.io/queue-name)",
        ),
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
        "--job-kind": job_kind,
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
                job_kind=job_kind,
            )
        if not name:
            raise ValueError("the job needs a name")
        namespace = namespace or "default"
        check_name(name)
        check_name(namespace, "namespace")
        if queue is not None:
            check_name(queue, "queue")
    except ValueError as err:  # InvalidSpec too: one readable line per problem
        raise fail(str(err), 2) from None
    b = open_backend(backend)
    ignored = b.ignored_settings() if isinstance(b, IgnoresSettings) else frozenset()
    used = [*given, *(["--queue"] if queue is not None else [])]
    if unused := [flag for flag in used if _SETTING_OF_FLAG.get(flag) in ignored]:
        note(f"the {resolve_kind(backend)} backend does not use {', '.join(unused)}")
    try:
        v = b.submit(name, namespace, spec, queue=queue)
    except BackendError as err:
        raise fail(str(err)) from None
    typer.echo(f"job {v.namespace}/{v.name} submitted")
