"""Trying a GPU type a running job has not measured, so that it can end up on its fastest.

A job's speed on a type is known only once it has run there (``JobInfo.type_speed``); a type it
never ran on counts as 1.0, as fast as its own. Alone, that estimate keeps a job where it
started: a move costs a restart, and an equal speed never pays it back. On a cluster of several
types, the type a job starts on is an accident of what was free, so without a try a job that
started on T4s would stay there beside idle A100s that run it twice as fast.

Sia answers this by profiling every job on one GPU of each type as it arrives. A worker here
cannot be profiled apart from its job, so adl tries instead, optimistically and at most once per
type: a running job with a measured model, beside a type it may use and has never measured that
has enough GPUs free *before* the round for its current size, values that type at
``EXPLORE_SPEED`` times its own (an upper estimate of what a faster generation gives; the
uncertainty is priced in as optimism). The policy then weighs the move like any other: it must
pay its restart and must not be worth more to another job. Once the job has run there, the type
is measured (``status.typeModels`` keeps every type's model) and never explored again: a faster
type keeps the job, a slower one loses it back to the type it came from by an ordinary
measured move, whose decision names both speeds.

Only free GPUs are explored, so a try never takes GPUs from another job by itself being
optimistic. Pure; the round (``adl.controller.rounds.plan_round``) applies it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from adl.sched.types import JobInfo, NodeInfo

#: the speed, relative to its own type, at which a job values a type it has not measured when
#: it may try it: high enough that a job with work left moves to try it, and no higher than the
#: common gain of a GPU generation (T4 -> A100 is several times that; V100 -> A100 about 2x)
EXPLORE_SPEED = 1.5


def free_by_type(
    nodes: Sequence[NodeInfo], allocation: Mapping[str, Sequence[str]], gpus_of: Mapping[str, int]
) -> dict[str, int]:
    """GPUs free on each GPU type under ``allocation`` (job -> its replicas' nodes; a replica
    holds ``gpus_of[job]`` GPUs, 1 when absent); a node counts no lower than empty."""
    used: dict[str, int] = {}
    for job, held in allocation.items():
        for node in held:
            used[node] = used.get(node, 0) + gpus_of.get(job, 1)
    free: dict[str, int] = {}
    for n in nodes:
        free[n.gpu_type] = free.get(n.gpu_type, 0) + max(n.gpus - used.get(n.name, 0), 0)
    return free


def explore_types(
    infos: Sequence[JobInfo],
    nodes: Sequence[NodeInfo],
    previous: Mapping[str, Sequence[str]],
) -> list[JobInfo]:
    """``infos`` with, for each running job that may try a type it has not measured (see the
    module), that type valued at ``EXPLORE_SPEED`` and named in ``JobInfo.exploring``. At most
    one type per job and round: the one with the most GPUs free (then by name). A uniform
    cluster, or a job without a measured model of its own type, is left as it is."""
    type_of = {n.name: n.gpu_type for n in nodes}
    present = sorted({t for t in type_of.values() if t})
    if len(present) < 2:
        return list(infos)
    gpus_of = {i.name: max(i.gpus_per_replica, 1) for i in infos}
    free = free_by_type(nodes, previous, gpus_of)
    out = []
    for info in infos:
        held = previous.get(info.name) or []
        types_held = {type_of.get(n, "") for n in held}
        current = types_held.pop() if len(types_held) == 1 else ""
        # its own type measured: the model it reports is of the type it runs on
        if not current or info.type_speed.get(current) != 1.0:
            out.append(info)
            continue
        need = len(held) * gpus_of[info.name]
        options = [
            t
            for t in present
            if t != current
            and t not in info.type_speed
            and info.may_use(t)
            and free.get(t, 0) >= need
        ]
        if not options:
            out.append(info)
            continue
        pick = min(options, key=lambda t: (-free.get(t, 0), t))
        out.append(
            replace(
                info,
                type_speed={**info.type_speed, pick: EXPLORE_SPEED},
                exploring=(pick,),
            )
        )
    return out
