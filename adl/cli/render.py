"""How jobs look to people and scripts: the ``ls``/``top`` table, ``describe`` text and the
Kubernetes-shaped JSON object. Pure functions of :class:`~adl.jobs_api.JobView`."""

from __future__ import annotations

import shlex
from datetime import UTC, datetime
from typing import Any

from rich.table import Table

from adl.contract import QUEUE_LABEL
from adl.jobs_api import JobView
from adl.models import AdaptiveJobStatus, Phase, RestartCause
from adl.operator.crd import API_VERSION
from adl.sched.hints import type_speed_from_models


def age(created: datetime | None, now: datetime | None = None) -> str:
    if created is None:
        return "-"
    s = int(((now or datetime.now(UTC)) - created).total_seconds())
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    return f"{s // 3600}h"


def restarts(v: JobView) -> str:
    """The restart count, split by cause when there were any: ``3 (failure:1, resize:2)``."""
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


def queue_cell(v: JobView) -> str:
    """``ls``'s QUEUE: the job's Kueue queue and, in brackets, the replicas Kueue admits it
    (``-``: in no queue; no bracket before the operator has read the admission)."""
    if not v.queue:
        return "-"
    admitted = v.status.admitted
    return v.queue if admitted is None else f"{v.queue} ({admitted})"


def admitted_text(admitted: int | None) -> str:
    if admitted is None:
        return "admission not read yet"
    if admitted == 0:
        return "no replica admitted"
    return f"{admitted} replica{'s' if admitted != 1 else ''} admitted"


def jobs_table(views: list[JobView], now: datetime | None = None) -> Table:
    """The table of ``ls`` and ``top``: job, its Kueue queue (``-``: none) with the replicas
    Kueue admits, phase, replicas, batch size, goodput, restarts."""
    table = Table(box=None, header_style="bold")
    for col in ("JOB", "QUEUE", "PHASE", "REPLICAS", "BATCH", "GOODPUT", "RESTARTS", "AGE"):
        table.add_column(col, justify="right" if col in ("BATCH", "GOODPUT") else "left")
    for v in views:
        st = v.status
        name = v.name if v.namespace == "default" else f"{v.namespace}/{v.name}"
        table.add_row(
            name,
            queue_cell(v),
            f"[{_PHASE_STYLE.get(st.phase, '')}]{st.phase.value}[/]",
            f"{st.replicas} ({v.spec.min_replicas}-{v.spec.max_replicas})",
            str(st.batch_size) if st.batch_size else "-",
            f"{st.goodput:.1f}" if st.goodput is not None else "-",
            restarts(v),
            age(v.created, now),
        )
    return table


def job_object(v: JobView) -> dict[str, Any]:
    """A job as Kubernetes would show it (``kubectl get aj -o json``), on either backend."""
    meta: dict[str, Any] = {"name": v.name, "namespace": v.namespace}
    if v.queue:
        meta["labels"] = {QUEUE_LABEL: v.queue}
    if v.created is not None:
        meta["creationTimestamp"] = v.created.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return {
        "apiVersion": API_VERSION,
        "kind": "AdaptiveJob",
        "metadata": meta,
        "spec": v.spec.model_dump(mode="json", by_alias=True, exclude_none=True),
        "status": v.status.model_dump(mode="json", by_alias=True, exclude_none=True),
    }


def _command(trainer: dict[str, Any]) -> str:
    """The trainer's command line; a spec stored by an earlier version may hold a command that
    is not a list of strings: shown as it is rather than fail ``describe``."""
    cmd, args = trainer.get("command") or [], trainer.get("args") or []
    if not cmd:
        return str(trainer.get("image", "-"))
    parts = [*cmd, *args] if isinstance(cmd, list) and isinstance(args, list) else None
    if parts is not None and all(isinstance(p, str) for p in parts):
        return shlex.join(parts)
    return " ".join(str(p) for p in (cmd, args) if p)


def type_speeds_text(st: AdaptiveJobStatus) -> str | None:
    """The job's measured speed on each GPU type, relative to the type of its current model
    (``NVIDIA-A100-SXM4-80GB 1.00 (current), Tesla-T4 0.39``), and what the round assumes
    on the types it has not run on; None before it reported a type (CPU or unknown GPUs)."""
    speeds = type_speed_from_models(st.hints, st.type_models)
    if not speeds or st.hints is None:
        return None
    current = st.hints.gpu_type
    ranked = sorted(speeds.items(), key=lambda kv: (-kv[1], kv[0]))
    measured = ", ".join(f"{t} {s:.2f}{' (current)' if t == current else ''}" for t, s in ranked)
    return (
        f"{measured}; other types not measured yet (estimated from jobs of its kind where "
        "they ran there, else as fast as the current type)"
    )


def describe_text(v: JobView) -> str:
    """``adl describe``: spec essentials, status with the reason, conditions, events."""
    st, spec = v.status, v.spec
    lines = [
        f"Name:         {v.name}",
        f"Namespace:    {v.namespace}",
        *(
            [f"Queue:        {v.queue} (Kueue), {admitted_text(v.status.admitted)}"]
            if v.queue
            else []
        ),
        f"Command:      {_command(spec.trainer)}",
        f"Replicas:     min {spec.min_replicas}, max {spec.max_replicas}",
        f"MaxRestarts:  {spec.max_restarts}",
        f"Phase:        {st.phase.value}",
    ]
    if st.reason or st.message:
        lines.append(f"Reason:       {st.reason}: {st.message}".rstrip(": "))
    lines += [
        f"Group:        {st.group}",
        f"Allocation:   {', '.join(st.allocation) or '-'} ({st.replicas} replicas)",
        f"Restarts:     {restarts(v)}",
        f"Batch size:   {st.batch_size or '-'}",
        f"Goodput:      {f'{st.goodput:.2f}' if st.goodput is not None else '-'}",
    ]
    if st.hints is not None:
        h = st.hints
        total = f"/{h.total_progress:.0f}" if h.total_progress else ""
        lines.append(f"Progress:     {h.progress:.0f}{total} scale-invariant steps")
    by_type = type_speeds_text(st)
    if by_type:
        lines.append(f"GPU types:    {by_type}")
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
