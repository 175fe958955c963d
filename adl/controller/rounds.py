"""The scheduling round, backend-agnostic: job state in, the policy's allocation out.

``job_info`` turns one job's spec and status (its hints included, via ``adl.sched.hints``) into
the ``JobInfo`` the policy reads; ``plan_round`` calls any object with the ``Policy`` protocol
and reports which jobs' desired allocations changed. Both are pure; ``timed_plan_round`` is the tiny
driver that also measures how long the policy took (for the round-latency histogram).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

import numpy as np

from adl.controller.history import CompletedWork, job_kind
from adl.controller.job_record import JobRecord
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, Hints, Phase
from adl.sched import registry
from adl.sched.decisions import Decision, Hold, explain
from adl.sched.gpu_types import one_type_per_job
from adl.sched.hints import (
    min_replicas_from_hints,
    remaining_seconds,
    speedup_from_hints,
    type_speed_from_models,
)
from adl.sched.type_explore import explore_types, free_by_type
from adl.sched.type_history import TypeSpeedHistory, with_type_estimates
from adl.sched.types import (
    Allocation,
    JobInfo,
    NodeInfo,
    Policy,
    SpeedupFn,
)

#: Restart cost assumed before a job has measured its own (seconds).
DEFAULT_RESTART_COST_S = 30.0


@dataclass(frozen=True)
class RoundResult:
    allocation: Allocation  # every participating job -> nodes (possibly [])
    changed: dict[str, list[str]]  # only the jobs whose desired allocation differs
    jobs: int = 0
    duration_s: float = 0.0  # policy time (set by timed_plan_round)
    #: why each changed job's answer changed (jobs that finished or were suspended have none)
    decisions: dict[str, Decision] = field(default_factory=dict)
    #: jobs left out of this round because their own data broke it -> why (they keep what
    #: they hold; everyone else was scheduled)
    faults: dict[str, str] = field(default_factory=dict)
    #: jobs kept at their size, below their maximum, with GPUs free that could grow them ->
    #: why the policy did not (policies with :class:`ExplainsHolds` only)
    holds: dict[str, Hold] = field(default_factory=dict)
    #: what the policy was told about each job it scheduled (capacity asks read their models)
    infos: tuple[JobInfo, ...] = ()


#: The hints fields a speedup function depends on (progress and the like do not change it).
_MODEL_FIELDS = {
    "init_batch_size",
    "max_batch_size",
    "local_bsz_bounds",
    "gradient_accumulation",
    "perf_params",
    "grad_params",
}


class SpeedupCache:
    """Speedup functions kept across rounds while a job's model is unchanged.

    Building one is cheap, but the policy memoizes work per function object, so handing it the
    same object round after round keeps its tables warm. Entries of jobs absent from a round
    are dropped at the next ``sweep``."""

    def __init__(self) -> None:
        self._fns: dict[str, tuple[str, SpeedupFn]] = {}
        self._seen: set[str] = set()
        #: job -> the max replicas its kept function was probed at (``plan_round``): a kept
        #: function needs no second probe, which would cost every job calls on every round
        self._probed: dict[str, int] = {}

    def get(self, job: str, hints: Hints | None) -> SpeedupFn:
        key = "" if hints is None else hints.model_dump_json(include=_MODEL_FIELDS)
        self._seen.add(job)
        hit = self._fns.get(job)
        if hit is not None and hit[0] == key:
            return hit[1]
        fn = speedup_from_hints(hints)
        self._fns[job] = (key, fn)
        self._probed.pop(job, None)
        return fn

    def probed(self, job: str, max_replicas: int) -> bool:
        return self._probed.get(job) == max_replicas

    def mark_probed(self, job: str, max_replicas: int) -> None:
        self._probed[job] = max_replicas

    def sweep(self) -> None:
        self._fns = {k: v for k, v in self._fns.items() if k in self._seen}
        self._probed = {k: v for k, v in self._probed.items() if k in self._seen}
        self._seen = set()

    def __len__(self) -> int:
        return len(self._fns)


def participates(spec: AdaptiveJobSpec, status: AdaptiveJobStatus) -> bool:
    """Finished and suspended jobs hold no GPUs and are not offered any. A job resumed but
    still marked Suspended takes part: its next group starts on this round's answer."""
    return not (spec.suspend or status.phase.finished)


def resuming(spec: AdaptiveJobSpec, status: AdaptiveJobStatus) -> bool:
    """spec.suspend was cleared and the job has not started again yet."""
    return not spec.suspend and status.phase == Phase.SUSPENDED


def job_info(
    record: JobRecord,
    now: datetime,
    order: int = 0,
    speedups: SpeedupCache | None = None,
    completed: CompletedWork | None = None,
) -> JobInfo:
    """The policy's view of one job: only what the job itself reported and, when it declared
    no length, its remaining work as predicted from ``completed`` jobs of its kind."""
    spec, status = record.spec, record.status
    hints = status.hints
    speedup = speedups.get(record.key, hints) if speedups is not None else speedup_from_hints(hints)
    cost = hints.restart_cost_s if hints is not None and hints.restart_cost_s else None
    predicted = completed.predict(record, speedup) if completed is not None else None
    expected, basis = predicted if predicted is not None else (None, 0)
    top = spec.max_replicas if record.ceiling is None else min(spec.max_replicas, record.ceiling)
    return JobInfo(
        name=record.key,
        speedup=speedup,
        # an outside quota's ceiling bounds both (Kueue admits at least minCount replicas)
        min_replicas=min(min_replicas_from_hints(spec.min_replicas, hints), top),
        max_replicas=top,
        weight=spec.weight,
        age_s=max((now - record.created).total_seconds(), 0.0),
        restarts=status.restart_count(),
        restart_cost_s=cost if cost is not None else DEFAULT_RESTART_COST_S,
        attained_service_s=status.attained_service_s,
        remaining_s=remaining_seconds(hints, speedup),
        expected_remaining_s=expected,
        predicted_from=basis,
        kind=completed.kind(spec) if completed is not None else job_kind(spec),
        max_profiled_replicas=hints.max_profiled_replicas if hints is not None else 0,
        preemptible=spec.preemptible,
        gpus_per_replica=spec.gpus_per_replica,
        submit_order=order,
        priority=spec.priority,
        nodes=record.nodes,
        gpu_types=tuple(spec.gpu_types),
        type_speed=type_speed_from_models(hints, status.type_models),
    )


#: how long a job that reported all of its work done keeps its GPUs whatever the policy says
FINISHING_PIN_S = 600.0


def finishing(status: AdaptiveJobStatus, now: datetime) -> bool:
    """The job reported all of its declared work done: it is saving and exiting. Moving it now
    would only kill a finished run in its exit path and restart it from an older checkpoint.
    Only for ``FINISHING_PIN_S``: a job that says so and keeps running (a long evaluation, or
    a report of ``totalProgress: 0``) must not hold its GPUs against every other job."""
    h, since = status.hints, status.finishing_since
    if h is None or not h.work_done:
        return False
    return since is None or (now - since).total_seconds() < FINISHING_PIN_S


def _without(nodes: Sequence[NodeInfo], held: Sequence[tuple[str, int]]) -> list[NodeInfo]:
    """``nodes`` with the GPUs in ``held`` taken out: (node, GPUs) per held replica (a replica
    holds its job's ``gpusPerReplica``)."""
    out = []
    for n in nodes:
        free = max(n.gpus - sum(g for h, g in held if h == n.name), 0)
        out.append(replace(n, gpus=free))
    return out


def _current(record: JobRecord) -> list[str]:
    """What the job holds now: the desired allocation if one was set, else the running one;
    nothing while it is resuming (the answer it had before its suspension is not a placement:
    others may hold those GPUs now)."""
    if resuming(record.spec, record.status):
        return []
    return list(record.desired if record.desired is not None else record.status.allocation)


class JobFault(Exception):
    """One job's data (its report, its speedup function) broke the round."""

    def __init__(self, job: str, why: str) -> None:
        super().__init__(f"{job}: {why}")
        self.job, self.why = job, why


def _describe(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:300]}" if text else type(err).__name__


def _probe(info: JobInfo) -> None:
    """Ask the job's speedup function what every policy asks first (one replica, its maximum
    on one node and on two) so that a model that raises or answers no number is caught here,
    against this job, rather than inside the policy against the whole round. One vectorised
    call (the speedup contract): on a cold round of 1000 jobs, three calls a job cost ~0.3 s."""
    top = max(info.max_replicas, 1)
    sizes = sorted({(1, 1), (1, top), *([(2, top)] if top > 1 else [])})
    nodes = np.array([n for n, _ in sizes], dtype=np.float64)
    replicas = np.array([k for _, k in sizes], dtype=np.float64)
    values = np.broadcast_to(
        np.asarray(info.speedup(nodes, replicas), dtype=np.float64), (len(sizes),)
    )
    for (n, k), value in zip(sizes, values.tolist(), strict=True):
        if not np.isfinite(value) or value < 0:
            raise ValueError(f"its speedup at {k} replicas on {n} node(s) is {value}")


def _usable_infos(
    movable: Sequence[JobRecord],
    now: datetime,
    speedups: SpeedupCache | None,
    completed: CompletedWork | None,
) -> tuple[list[JobInfo], dict[str, str]]:
    """The policy's view of each job, and the jobs whose view cannot be built or probed."""
    infos, faults = [], {}
    for order, r in enumerate(movable):
        try:
            info = job_info(r, now, order, speedups, completed)
            if speedups is None or not speedups.probed(r.key, info.max_replicas):
                _probe(info)
                if speedups is not None:
                    speedups.mark_probed(r.key, info.max_replicas)
        except Exception as err:
            faults[r.key] = f"its hints give no usable model ({_describe(err)})"
            continue
        infos.append(info)
    return infos, faults


def _culprits(
    policy: Policy,
    infos: Sequence[JobInfo],
    nodes: Sequence[NodeInfo],
    previous: Mapping[str, list[str]],
) -> dict[str, str]:
    """After the policy raised: the jobs with which it raises even alone (-> why). Costs one
    small policy call per job, only on this failure path."""
    out = {}
    for info in infos:
        try:
            policy.optimize([info], nodes, {info.name: previous.get(info.name, [])})
        except Exception as err:
            out[info.name] = f"the scheduling policy fails on its model ({_describe(err)})"
    return out


def plan_round(
    policy: Policy,
    jobs: Sequence[JobRecord],
    nodes: Sequence[NodeInfo],
    now: datetime,
    speedups: SpeedupCache | None = None,
    completed: CompletedWork | None = None,
    unit: str = "GPU",
    type_history: TypeSpeedHistory | None = None,
) -> RoundResult:
    """Ask the policy for a new allocation of all participating jobs (oldest first). Pass the
    same ``speedups`` cache every round to keep the policy's per-job work warm, and the
    driver's ``completed`` work to predict the remaining work of jobs of undeclared length.
    ``unit`` names what the nodes hand out in the decisions' text (``slot`` for CPU slots).
    The driver's ``type_history`` estimates a job's speed on GPU types it never ran on from
    jobs of its kind that ran on both.

    One job cannot fail the round for the others: a job whose view cannot be built, whose
    speedup function raises or answers no number, or with which the policy raises even on its
    own while others do not, is left out (``RoundResult.faults``) and keeps what it holds, as a
    finishing job does. A policy failure that no single job explains (or that every job
    triggers alone) still raises: that is a bug of the policy, not a job's doing."""
    ordered = _off_spot(sorted(jobs, key=lambda r: (r.created, r.key)), nodes)
    live = [r for r in ordered if participates(r.spec, r.status) and r.ceiling != 0]
    # finishing jobs keep what they hold; the policy shares out the rest
    pinned = {r.key for r in live if finishing(r.status, now) and _current(r)}
    movable = [r for r in live if r.key not in pinned]
    infos, faults = _usable_infos(movable, now, speedups, completed)
    if speedups is not None:
        speedups.sweep()
    previous = {r.key: _current(r) for r in live}
    if type_history is not None:  # types a job never ran on, from jobs of its kind
        infos = with_type_estimates(type_history, infos, [n.gpu_type for n in nodes])
    # on a cluster of several types, a running job may try a free type nothing is known of
    infos = explore_types(infos, nodes, previous)
    while True:
        kept = pinned | set(faults)
        per_replica = {r.key: max(r.spec.gpus_per_replica, 1) for r in live if r.key in kept}
        held = [(n, per_replica[k]) for k in kept for n in previous[k]]
        free_nodes = _without(nodes, held) if held else list(nodes)
        moving_prev = {i.name: previous[i.name] for i in infos}
        try:
            raw = policy.optimize(infos, free_nodes, moving_prev) if infos else {}
            # every policy's answer puts each job on one GPU type it may use (a no-op on a
            # uniform cluster, and for adl's own policy, which places so by construction)
            raw = one_type_per_job(raw, infos, free_nodes)
            break
        except Exception:
            blamed = _culprits(policy, infos, free_nodes, moving_prev)
            if not blamed or len(blamed) == len(infos):  # nobody, or everybody: the policy's
                raise
            faults.update(blamed)
            infos = [i for i in infos if i.name not in blamed]
    allocation = {
        r.key: previous[r.key] if r.key in kept else _confined(r, raw.get(r.key) or [])
        for r in live
    }
    # against what is recorded: a job no round has answered yet (None) gets its answer recorded
    # even when it is nothing (the operator runs a round at once for a job without one, and
    # should do so only once), and a resuming job's old answer is replaced
    recorded = {r.key: r.desired for r in live}
    changed = {k: v for k, v in allocation.items() if v != recorded[k]}
    # finished / suspended jobs that still have a desired allocation give it back
    for r in ordered:
        if r.key not in allocation and r.desired:
            changed[r.key] = []
    gpus_of = {r.key: max(r.spec.gpus_per_replica, 1) for r in live}
    held_before = sum(len(v) * gpus_of[k] for k, v in previous.items())
    held_after = sum(len(v) * gpus_of[k] for k, v in allocation.items())
    total = sum(n.gpus for n in nodes)
    ranker = registry.prediction_ranker(policy)  # the registry says whether it can
    decisions = explain(
        {k: v for k, v in changed.items() if k not in kept},
        previous,
        {i.name: i for i in infos},
        max(total - held_before, 0),
        {r.key: _reported(r.status.hints) for r in movable},
        free_after=max(total - held_after, 0),
        predictions_used=ranker is not None and ranker.ranks_by_predicted_remaining(),
        unit=unit,
        node_types={n.name: n.gpu_type for n in nodes},
        free_by_type=free_by_type(nodes, allocation, gpus_of),
    )
    holds = _holds(policy, infos, free_nodes, moving_prev, raw, unit)
    return RoundResult(
        allocation,
        changed,
        len(infos),
        decisions=decisions,
        faults=faults,
        holds=holds,
        infos=tuple(infos),
    )


def _off_spot(records: list[JobRecord], nodes: Sequence[NodeInfo]) -> list[JobRecord]:
    """A job that must not be preempted (``preemptible: false``) runs on on-demand nodes only:
    the cloud takes spot capacity (``NodeInfo.preemptible``, from the well-known spot labels)
    back at short notice. Within a node pool it already has, its on-demand nodes; on a cluster
    without spot nodes, nothing changes."""
    spot = [n for n in nodes if n.preemptible]
    if not spot or all(r.spec.preemptible for r in records):
        return records
    on_demand = frozenset(n.name for n in nodes if not n.preemptible)
    return [
        r
        if r.spec.preemptible
        else replace(r, nodes=on_demand if r.nodes is None else r.nodes & on_demand)
        for r in records
    ]


def _confined(record: JobRecord, answer: Sequence[str]) -> list[str]:
    """The policy's answer for a job confined to ``record.nodes``, without the replicas placed
    outside them: a policy that reads ``JobInfo.nodes`` places none there, and any other
    policy (the baselines) is kept to it here. Fewer than the job's minimum is none at all."""
    if record.nodes is None:
        return list(answer)
    kept = [n for n in answer if n in record.nodes]
    return kept if len(kept) >= max(record.spec.min_replicas, 1) else []


def _holds(
    policy: Policy,
    infos: Sequence[JobInfo],
    nodes: Sequence[NodeInfo],
    previous: Mapping[str, list[str]],
    answer: Mapping[str, list[str]],
    unit: str,
) -> dict[str, Hold]:
    """Why the policy left jobs at their size beside free GPUs, when it can say."""
    explainer = registry.holds_explainer(policy)  # the registry says whether it can
    if explainer is None or not infos:
        return {}
    try:
        holds = explainer.explain_holds(infos, nodes, previous, answer)
    except Exception:  # the explanation of an answer must never cost the answer itself
        return {}
    return {k: replace(h, unit=unit) for k, h in holds.items()}


def _reported(hints: Hints | None) -> bool:
    """Whether the job has sent a throughput model (before it, speedups are the prior)."""
    return hints is not None and hints.perf_params is not None


def timed_plan_round(
    policy: Policy,
    jobs: Sequence[JobRecord],
    nodes: Sequence[NodeInfo],
    now: datetime,
    speedups: SpeedupCache | None = None,
    completed: CompletedWork | None = None,
    unit: str = "GPU",
    type_history: TypeSpeedHistory | None = None,
) -> RoundResult:
    """``plan_round`` timed with a monotonic clock (the only impure part of the round)."""
    t0 = time.perf_counter()
    result = plan_round(policy, jobs, nodes, now, speedups, completed, unit, type_history)
    return replace(result, duration_s=time.perf_counter() - t0)


def accrue_service(
    status: AdaptiveJobStatus, gpus_per_replica: int, elapsed_s: float
) -> AdaptiveJobStatus:
    """Status with ``elapsed_s`` of GPU-time added for the replicas it ran (fair-share input)."""
    if status.phase not in (Phase.RUNNING, Phase.STARTING) or elapsed_s <= 0:
        return status
    gained = status.replicas * max(gpus_per_replica, 1) * elapsed_s
    return status.model_copy(update={"attained_service_s": status.attained_service_s + gained})


@dataclass
class RoundLog:
    """Round latencies a driver keeps (for benchmarks and the metrics histogram)."""

    durations_s: list[float] = field(default_factory=list)

    def add(self, result: RoundResult) -> None:
        self.durations_s.append(result.duration_s)

    def summary(self) -> Mapping[str, float]:
        if not self.durations_s:
            return {"rounds": 0.0}
        xs = sorted(self.durations_s)
        return {
            "rounds": float(len(xs)),
            "median_s": xs[len(xs) // 2],
            "p95_s": xs[min(len(xs) - 1, int(0.95 * len(xs)))],
            "max_s": xs[-1],
        }
