"""What a job's status shows of its last hints report, on every backend: the batch size it
trains at and its goodput now, evaluated from the throughput and noise model it reported (the
in-job library sends the model, not a goodput figure)."""

from __future__ import annotations

import math
from datetime import datetime

from adl.contract import MAX_GPU_TYPES
from adl.controller.env import node_slots
from adl.models import AdaptiveJobStatus, Hints
from adl.sched.hints import goodput_from_hints


def show_hints(status: AdaptiveJobStatus, hints: Hints | None) -> None:
    """Surface ``hints`` in ``status`` (printer columns, ``adl ls``, metrics); in place."""
    if hints is None:
        return
    status.batch_size = hints.batch_size
    nodes = len(node_slots(status.allocation)) or 1
    status.goodput = current_goodput(hints, status.replicas, nodes) if status.replicas else None
    remember_type_model(status, hints)


def remember_type_model(status: AdaptiveJobStatus, hints: Hints) -> None:
    """Keep the report's throughput model as the last one measured on its GPU type
    (``status.typeModels``), so that the scheduler can compare the types the job has run on
    after it moved (``adl.sched.hints.type_speed_from_models``). At most ``MAX_GPU_TYPES``
    types: the one not measured for longest goes first. In place."""
    if not hints.gpu_type or hints.perf_params is None:
        return
    if status.type_models.get(hints.gpu_type) == hints.perf_params:
        return
    models = {k: v for k, v in status.type_models.items() if k != hints.gpu_type}
    models[hints.gpu_type] = hints.perf_params  # last: the most recently measured
    while len(models) > MAX_GPU_TYPES:
        models.pop(next(iter(models)))
    status.type_models = models


#: the status fields ``reflect_hints`` derives from the last report and nothing else: a
#: backend may refresh them on a report without stepping the job
HINTS_FIELDS = frozenset({"batch_size", "goodput", "finishing_since"})


def reflect_hints(status: AdaptiveJobStatus, now: datetime) -> None:
    """Everything the status derives from its last report, in place: what it shows
    (``show_hints``) and since when the job says all of its work is done (the round leaves a
    finishing job's GPUs alone for a while: ``adl.controller.rounds.finishing``)."""
    show_hints(status, status.hints)
    done = status.hints is not None and status.hints.work_done and not status.phase.finished
    status.finishing_since = (status.finishing_since or now) if done else None


def current_goodput(hints: Hints | None, replicas: int, num_nodes: int = 1) -> float | None:
    """Goodput (scale-invariant steps per second) of the job as it runs now, for ``top`` and
    the metrics: the job's own figure when it sent one, else its reported throughput and noise
    model evaluated at its current replicas and batch; None before it reported a model."""
    if hints is None:
        return None
    if hints.goodput is not None:
        return hints.goodput
    try:
        fn = goodput_from_hints(hints)
        if fn is None or replicas < 1:
            return None
        accum = hints.accum_steps or 0
        local = hints.local_bsz or (
            hints.batch_size // (replicas * (accum + 1)) if hints.batch_size else None
        )
        if not local:
            return None
        value = float(fn.evaluate(max(num_nodes, 1), replicas, local, accum))
    except Exception:  # a model nothing can evaluate: no figure, and ls/metrics still work
        return None
    return value if 0 <= value < math.inf else None  # drop NaN and infinity
