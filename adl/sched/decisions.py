"""Why a job's allocation changed: the decision log of a scheduling round.

The policy answers with an allocation only; the round compares it with what each job held and,
for every job whose answer changed, writes down what a user needs to understand the move: the
sizes before and after, the job's own speedup at both (from its reported model), how many GPUs
were free, and which jobs the GPUs came from or went to. Backends show the message as an Event
(``adl describe``, ``kubectl describe aj``) and a log line; the simulator can print them too.
Pure: numbers in, text out. The simulator explains its rounds with the same code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from adl.sched.types import JobInfo, NodeInfo

#: the Event reason of an allocation change
REASON = "Rescheduled"


@dataclass(frozen=True)
class Decision:
    """One job's allocation change in one round, with the facts that explain it."""

    job: str
    before: tuple[str, ...]
    after: tuple[str, ...]
    speedup_before: float | None  # the job's speedup at its old size (None: held nothing)
    speedup_after: float | None
    free_gpus: int  # GPUs no job held before the round
    priority: int = 0
    reported: bool = True  # False: no throughput model yet (speedups are the linear prior)
    took_from: tuple[str, ...] = ()  # jobs that shrank while this one grew
    gave_to: tuple[str, ...] = ()  # jobs that grew while this one shrank
    #: the job did not declare its length: its remaining work was predicted from this many
    #: completed jobs of kind ``predicted_kind`` (0: not predicted)
    predicted_from: int = 0
    predicted_kind: str = ""
    #: GPUs no job holds after the round, and the fewest this job can start on (what a job
    #: left waiting is told: GPUs counted before the round may be gone by its end)
    free_after: int | None = None
    min_gpus: int = 1
    #: what the cluster hands out: ``GPU``, or ``slot`` on the local backend's CPU slots
    unit: str = "GPU"
    #: on a cluster of several GPU types: the type it holds after the round ("" on a uniform
    #: cluster), and the best other type it may use with its speedup there at the same size
    #: (why this type: ``speedup 3.10 there vs 1.90 on Tesla-T4``)
    gpu_type: str = ""
    other_type: str = ""
    speedup_other: float | None = None
    #: the type it held before the round ("" if none, or on a uniform cluster): a job that
    #: changed type and size is compared with what it left, not with the old type at the new
    #: size, which it may not have had room for
    type_before: str = ""
    #: GPUs of ``other_type`` free after the round (None: not known): when that type would
    #: have been faster at the same size, the decision says it had too few free
    free_other: int | None = None
    #: its speed on ``gpu_type`` and ``other_type`` was measured (else estimated alike, 1.0)
    types_measured: bool = True
    #: the job moved to ``gpu_type`` to try it: its speed there is an optimistic estimate
    #: until it has run there (``adl.sched.type_explore``)
    exploring: bool = False
    #: its speed on ``gpu_type`` or ``other_type`` was estimated from other jobs of its kind
    types_estimated: bool = False
    #: on a cluster of several types, for a job left waiting: the most GPUs free after the
    #: round on one type it may use (its replicas never span types), and the types it allows
    #: (empty: any); None on a uniform cluster
    free_one_type: int | None = None
    allowed_types: tuple[str, ...] = ()

    def _count(self, n: int) -> str:
        """``1 GPU``, ``3 GPUs`` (``3 slots`` on CPU slots)."""
        return f"{n} {self.unit}{'' if n == 1 else 's'}"

    @property
    def kind(self) -> str:
        a, b = len(self.before), len(self.after)
        if not a and b:
            return "started"
        if a and not b:
            return "stopped"
        if b > a:
            return "grew"
        if b < a:
            return "shrank"
        return "moved" if a else "queued"

    @property
    def message(self) -> str:
        """One line for ``adl describe``: ``grew 2 -> 4: speedup 1.80 -> 3.10, 2 GPUs free``."""
        a, b = len(self.before), len(self.after)
        kind = self.kind
        if kind == "queued":
            free = self.free_gpus if self.free_after is None else self.free_after
            if not free:
                return f"waiting: no {self.unit}s free"
            one = self.free_one_type
            if one is not None and one < self.min_gpus:
                if self.allowed_types and not one:
                    return (
                        f"waiting: {self._count(free)} free, none of the types it may use"
                        f" ({', '.join(self.allowed_types)})"
                    )
                return (
                    f"waiting: {self._count(free)} free, at most {one} of one type it may use,"
                    f" too few for its minimum of {self.min_gpus} (a job's {self.unit}s are all"
                    " of one type)"
                )
            if free < self.min_gpus:
                return (
                    f"waiting: {self._count(free)} free, too few for its minimum of {self.min_gpus}"
                )
            return f"waiting: {self._count(free)} free, none given to it this round"
        sizes = f"{kind} {a} -> {b}"
        if kind == "started":
            sizes = f"started with {b} replica{'s' if b != 1 else ''}"
            if len(set(self.after)) > 1:
                sizes += f" on {len(set(self.after))} nodes"
        elif kind == "moved":
            sizes = f"moved {a} replicas to other nodes"
        if self.gpu_type and kind != "stopped":
            where = f"{b} x {self.gpu_type}"
            sizes = f"moved to {where}" if kind == "moved" else f"{sizes} ({where})"
        parts = [sizes]
        if kind != "stopped" and self.speedup_after is not None and self.other_type:
            other = self.speedup_other if self.speedup_other is not None else float("nan")
            if self.exploring:
                note = f" (trying {self.gpu_type}: not measured there yet, valued optimistically)"
            elif self.types_estimated:
                note = " (not measured on both: estimated from jobs of its kind)"
            elif not self.types_measured:
                note = " (not measured on both: estimated alike)"
            else:
                note = ""
            left = self.type_before and self.type_before != self.gpu_type and 0 < a != b
            if left and self.speedup_before is not None:
                versus = f"{self.speedup_before:.2f} on {a} x {self.type_before} before"
            else:
                versus = f"{other:.2f} on {self.other_type}"
            if other > self.speedup_after and self.free_other is not None and self.free_other < b:
                # the other type was faster at this size: say why the job is not there
                note = (
                    f" ({b} x {self.other_type} would be {other:.2f}, but {self.free_other} free)"
                    + note
                )
            parts.append(f"speedup {self.speedup_after:.2f} there vs {versus}" + note)
        elif kind != "stopped" and self.speedup_after is not None:
            if self.speedup_before is not None and kind != "moved":
                parts.append(f"speedup {self.speedup_before:.2f} -> {self.speedup_after:.2f}")
            else:
                parts.append(f"speedup {self.speedup_after:.2f}")
        if not self.reported and kind in ("started", "grew"):
            parts.append("waiting for its first report (linear scaling assumed)")
        if self.took_from:
            parts.append(f"{self.unit}s from " + ", ".join(self.took_from))
        elif kind in ("started", "grew") and self.free_gpus:
            parts.append(f"{self._count(self.free_gpus)} free")
        if self.gave_to:
            parts.append(f"{self.unit}s to " + ", ".join(self.gave_to))
        if self.priority:
            parts.append(f"priority {self.priority}")
        if self.predicted_from and kind != "stopped":
            n = self.predicted_from
            parts.append(
                f"remaining work predicted from {n} completed job{'s' if n != 1 else ''}"
                f" of kind {self.predicted_kind}"
            )
        head, *rest = parts
        return head + (": " + ", ".join(rest) if rest else "")


def _speedup(
    info: JobInfo | None, nodes: Sequence[str], gpu_type: str | None = None
) -> float | None:
    """The job's speedup on ``nodes``, on GPUs of ``gpu_type`` (None: its measured model's)."""
    if info is None or not nodes:
        return None
    try:
        value = float(info.speedup(len(set(nodes)), len(nodes)))
    except Exception:  # the explanation of an answer must never cost the answer itself
        return None
    if gpu_type is not None:
        value *= info.speed_on(gpu_type)
    return value if value == value else None  # NaN: no figure rather than a wrong one


def _one_type(nodes: Sequence[str], types: Mapping[str, str]) -> str | None:
    """The GPU type of ``nodes`` (None: no nodes, or several types)."""
    seen = {types.get(n, "") for n in nodes}
    return seen.pop() if len(seen) == 1 else None


def _other_type(
    info: JobInfo, before: str | None, after: str | None, present: Sequence[str]
) -> str:
    """The type to compare ``after`` with: the one it left, else the best other it may use."""
    if not after:
        return ""
    if before and before != after:
        return before
    others = [t for t in present if t != after and t and info.may_use(t)]
    return min(others, key=lambda t: (-info.speed_on(t), t), default="")


def _predicted_from(info: JobInfo) -> int:
    """The completed jobs behind the job's predicted remaining work, when the policy used a
    prediction (the job declared no length of its own)."""
    if info.remaining_s is not None or info.expected_remaining_s is None:
        return 0
    return max(info.predicted_from, 0)


def explain(
    changed: Mapping[str, list[str]],
    previous: Mapping[str, list[str]],
    infos: Mapping[str, JobInfo],
    free_gpus: int,
    reported: Mapping[str, bool],
    *,
    limit: int = 3,
    free_after: int | None = None,
    predictions_used: bool = True,
    unit: str = "GPU",
    node_types: Mapping[str, str] | None = None,
    free_by_type: Mapping[str, int] | None = None,
) -> dict[str, Decision]:
    """A ``Decision`` for every job in ``changed`` (its new answer) against ``previous`` (what
    it held). Jobs that gave GPUs back because they finished or were suspended (absent from
    ``infos``) are left out: their own phase says why. ``free_gpus`` are the GPUs free before
    the round, ``free_after`` those left free by its answer; ``predictions_used`` says whether
    the policy ranked jobs by predicted remaining work (else no decision names a prediction);
    ``unit`` is what the nodes hand out (``GPU``, or ``slot`` for CPU slots); ``node_types``
    the GPU type of each node (on a cluster of several types, a decision names the job's type
    and its speedup there against the best other type); ``free_by_type`` the GPUs each type
    has free after the round (a waiting job is told when no one type it may use has enough)."""
    types = node_types or {}
    present = sorted(set(types.values()))
    mixed = len(present) > 1
    grew = [k for k, v in changed.items() if len(v) > len(previous.get(k, []))]
    shrank = [k for k, v in changed.items() if len(v) < len(previous.get(k, []))]
    out: dict[str, Decision] = {}
    for key, after in changed.items():
        info = infos.get(key)
        if info is None:
            continue
        before = previous.get(key, [])
        if before and sorted(before) == sorted(after):
            continue  # the same placement, only recorded now (e.g. the first round it sees)
        bigger = len(after) > len(before)
        smaller = len(after) < len(before)
        t_before, t_after = _one_type(before, types), _one_type(after, types)
        other = _other_type(info, t_before, t_after, present) if mixed else ""
        compared = [t for t in (t_after, other) if t]
        unmeasured = (*info.exploring, *info.estimated_types)
        measured = all(t in info.type_speed and t not in unmeasured for t in compared)
        out[key] = Decision(
            job=key,
            before=tuple(before),
            after=tuple(after),
            speedup_before=_speedup(info, before, t_before),
            speedup_after=_speedup(info, after, t_after),
            free_gpus=free_gpus,
            priority=info.priority,
            reported=reported.get(key, True),
            # only when the free GPUs were not enough: else nobody gave anything up for it
            took_from=tuple(k for k in shrank if k != key)[:limit]
            if bigger and len(after) - len(before) > free_gpus
            else (),
            gave_to=tuple(k for k in grew if k != key)[:limit] if smaller else (),
            predicted_from=_predicted_from(info) if predictions_used else 0,
            predicted_kind=info.kind if predictions_used and _predicted_from(info) else "",
            free_after=free_after,
            min_gpus=max(info.min_replicas, 1) * max(info.gpus_per_replica, 1),
            unit=unit,
            gpu_type=(t_after or "") if mixed else "",
            other_type=other,
            speedup_other=_speedup(info, after, other) if other else None,
            type_before=(t_before or "") if mixed else "",
            free_other=(free_by_type or {}).get(other) if other and free_by_type else None,
            types_measured=measured,
            exploring=bool(mixed and t_after and t_after in info.exploring),
            types_estimated=any(t in info.estimated_types for t in compared),
            free_one_type=max(
                (n for t, n in (free_by_type or {}).items() if info.may_use(t)), default=0
            )
            if mixed and free_by_type is not None
            else None,
            allowed_types=tuple(info.gpu_types),
        )
    return out


#: why a job was held at its size with GPUs free beside it (``Hold.cause``)
HELD_AT_CAP = "AtRampCap"
HELD_NO_FASTER = "NoFaster"
HELD_RESTART = "RestartNotRepaid"
HELD_MARGIN = "WithinMargin"


@dataclass(frozen=True)
class Hold:
    """Why a job that the round left as it was, with GPUs free beside it, was not grown: the
    policy's own figures for its best growth (``target`` replicas) against staying."""

    job: str
    replicas: int  # what it holds, and keeps
    target: int  # the size the policy weighed growing it to
    cause: str  # one of the HELD_* values
    speedup_now: float
    speedup_target: float
    #: its remaining work at its current speed, seconds
    remaining_s: float
    restart_cost_s: float  # the restart cost it measured (or the default, before it did)
    #: what the policy charged for the growth: the cost x the restarts a growth pays for
    #: (growing now, giving the GPUs back later), x its churn when it restarted often
    counted_s: float
    margin: float  # the change margin (hysteresis) a move must beat staying by
    cap: int = 0  # the most replicas the policy lets it reach now
    profiled: int = 0  # the most replicas it has measured
    restarts: int = 0
    predicted_from: int = 0  # its remaining work was predicted from this many jobs (0: not)
    predicted_kind: str = ""
    unit: str = "GPU"

    @property
    def message(self) -> str:
        """One line for ``adl describe``: ``not grown: the remaining 80 s do not repay a 20 s
        restart (...)``."""
        if self.cause == HELD_AT_CAP:
            return (
                f"not grown: it may use {self.cap} replica{'s' if self.cap != 1 else ''} until "
                f"it has measured more (it has measured up to {self.profiled})"
            )
        if self.cause == HELD_NO_FASTER:
            return (
                f"not grown: its speedup at {self.target} replicas ({self.speedup_target:.2f}) "
                f"is no better than at {self.replicas} ({self.speedup_now:.2f})"
            )
        if self.cause == HELD_MARGIN:
            return (
                f"not grown: speedup {self.speedup_now:.2f} -> {self.speedup_target:.2f} at "
                f"{self.target} replicas, less its restart, is within the "
                f"{self.margin:.0%} change margin"
            )
        text = (
            f"not grown: the remaining {self.remaining_s:.0f} s do not repay a "
            f"{self.restart_cost_s:.0f} s restart"
        )
        why = [
            f"speedup {self.speedup_now:.2f} -> {self.speedup_target:.2f} at {self.target} replicas"
        ]
        if self.counted_s > self.restart_cost_s * 1.01:
            why.append(
                f"counted as {self.counted_s:.0f} s: growing now and giving the "
                f"{self.unit}s back later"
                + (f", after {self.restarts} restarts" if self.restarts else "")
            )
        if self.predicted_from:
            n = self.predicted_from
            why.append(
                f"remaining work predicted from {n} completed job{'s' if n != 1 else ''} of "
                f"kind {self.predicted_kind}"
            )
        return f"{text} ({'; '.join(why)})"


class ExplainsHolds(Protocol):
    """The method of the capability ``PolicyEntry.explains_holds`` (asked only of a policy
    whose registry entry declares it: ``registry.holds_explainer``): the policy can say why it
    left a job at its size while GPUs stayed free beside it (``adl describe``: ``not grown:
    ...``). ``allocation`` is its answer for these ``jobs``, ``nodes`` and ``previous``; the
    answer holds a ``Hold`` for each job it kept as it was, below its maximum, with enough GPUs
    left free to grow it."""

    def explain_holds(
        self,
        jobs: Sequence[JobInfo],
        nodes: Sequence[NodeInfo],
        previous: Mapping[str, list[str]],
        allocation: Mapping[str, list[str]],
    ) -> dict[str, Hold]: ...
