"""The start of each round: every job's :class:`RoundJob` (its terms, last round's placement
where it still holds, its GPU types and cap, its speedup table), with the opt-in terms of
:mod:`adl.sched.policy_floors` laid over it; and what the policy remembers from round to round
for the guards against flapping (how long each job has held its GPUs, its recent resumes).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from adl.sched.placement import Cluster
from adl.sched.policy_floors import (
    apply_alternative_weights,
    apply_efficiency_cap,
    apply_end_phase,
    apply_long_floor,
    apply_starvation_floor,
    quiet_time_s,
)
from adl.sched.policy_job import RoundJob, packed_speedup, placement_key, placement_speed
from adl.sched.policy_terms import PolicyTerms
from adl.sched.policy_type_floor import fast_enough
from adl.sched.policy_type_frame import frame_scale
from adl.sched.speedup_table import fill_first
from adl.sched.types import Allocation, JobInfo

#: the window of ``resumes_per_hour``
_HOUR_S = 3600.0


class PolicyPreparation(PolicyTerms):
    """The round's jobs prepared from the policy's terms, and the tenure kept across rounds."""

    def __init__(self, seed: int = 0, **knobs: float | bool) -> None:
        super().__init__(seed, **knobs)
        # job -> (its nodes, sorted; its age when this policy gave it them, None: unknown):
        # how long each job has held its allocation, for the minimum tenure
        self._since: dict[str, tuple[tuple[str, ...], float | None]] = {}
        # job -> its ages at its resumes within the last hour, and the age until which a job
        # that reached ``resumes_per_hour`` keeps its GPUs
        self._resumes: dict[str, list[float]] = {}
        self._hold_until: dict[str, float] = {}
        # this tier's quiet time (``quiet_growth``), set by ``_prepare``: 0 = not quiet
        self._quiet_s = 0.0

    def _prepare(
        self,
        jobs: Sequence[JobInfo],
        cluster: Cluster,
        previous: Mapping[str, Sequence[str]],
    ) -> list[RoundJob]:
        """The round's jobs, in submission order (then name), each with its terms, last
        round's placement where it may keep it, the GPU types it may use (fastest first) and
        its cap; then the opt-in terms of :mod:`adl.sched.policy_floors` and the tenure."""
        total = sum(cluster.capacity)
        share = max(total // max(len(jobs), 1), 1)  # GPUs of an equal share
        out = []
        for info in sorted(jobs, key=lambda j: (j.submit_order, j.name)):
            prev_names = previous.get(info.name) or []
            prev = cluster.from_names(prev_names) if prev_names else None
            allowed, pool = None, total
            if info.nodes is not None:
                # confined to a node pool: its GPUs bound the job, and a placement outside it
                # (the pool changed) is no placement to keep
                allowed = frozenset(cluster.index[n] for n in info.nodes if n in cluster.index)
                pool = sum(cluster.capacity[i] for i in allowed)
                if prev is not None and not set(prev) <= allowed:
                    prev = None
            speeds = {t: info.speed_on(t) for t in cluster.type_names if info.may_use(t)}
            # the job's work and speeds on its fastest type, wherever it runs now (so that
            # moving it does not change its weight); exactly 1.0 on a cluster of one type
            scale = frame_scale(speeds, info.exploring)
            if scale != 1.0:
                speeds = {t: s / scale for t, s in speeds.items()}
            if self.knobs.min_type_speed > 0.0:
                speeds = fast_enough(speeds, self.knobs.min_type_speed)
            types = tuple(sorted(speeds, key=lambda t: (-speeds[t], t)))
            mixed = len(cluster.type_names) > 1
            if prev is not None and (
                not speeds
                or (mixed and (not cluster.one_type(prev) or cluster.type_of(prev) not in speeds))
            ):
                # mixed types (placed before types were known) or a type it may no longer
                # use: not a placement to keep, the job moves
                prev = None
            if not mixed:
                cap = self.replica_cap(info, pool, cluster.max_gpus)
            else:  # all of its replicas on the largest type it may use (within its pool)
                room = max((_type_room(cluster, t, allowed) for t in types), default=0)
                widest = max((cluster.type_max[t] for t in types), default=0)
                cap = self.replica_cap(info, room, widest)
            if prev is not None and sum(prev.values()) > max(cap, 0):
                cap = max(cap, min(sum(prev.values()), info.max_replicas))
            out.append(
                RoundJob(
                    info=info,
                    weight=self.priority(info, scale),
                    cap=cap,
                    restart_s=self._restart_s(info),
                    remaining=self._remaining(info, scale),
                    prev=prev,
                    prev_key=placement_key(prev) if prev else None,
                    prev_replicas=sum(prev.values()) if prev else 0,
                    table=self._table(info, cluster.max_gpus, cap),
                    placement={},
                    allowed=allowed,
                    types=types,
                    speeds=speeds,
                    node_types=cluster.types,
                    one_speed=speeds[types[0]] if len(types) == 1 else 0.0,
                    frame=scale,
                )
            )
        fill_first([job.table for job in out])
        if self.knobs.speedup_power != 1.0:
            for job in out:
                fair = max(min(share // job.gpr, job.cap), 1)
                per_node = max(cluster.max_gpus // job.gpr, 1)
                job.fair = max(packed_speedup(job, per_node, fair), 1e-9)
        k = self.knobs
        apply_alternative_weights(k, out, cluster.max_gpus)
        self._quiet_s = quiet_time_s(k, out)
        if k.starve_bound_s > 0:
            apply_starvation_floor(k, out, share, cluster.max_gpus)
        if k.long_job_mult > 0:
            apply_long_floor(k, out, total, cluster.max_gpus)
        self._tenure(out, previous)
        if k.efficiency_floor > 0:
            for job in out:
                apply_efficiency_cap(k, job, cluster.max_gpus)
        if k.end_phase_mult > 0:
            apply_end_phase(k, out, total, cluster.max_gpus)
        return out

    def _held_s(self, info: JobInfo, nodes: Sequence[str]) -> float | None:
        """Seconds ``info`` has held ``nodes`` under this policy (None: not known, as after a
        restart of the scheduler or when the driver did not apply this policy's answer)."""
        rec = self._since.get(info.name)
        if rec is None or rec[1] is None or rec[0] != tuple(sorted(nodes)):
            return None
        return max(info.age_s - rec[1], 0.0)

    def _tenure(self, jobs: list[RoundJob], previous: Mapping[str, Sequence[str]]) -> None:
        """Issue 34's guards against flapping, on running preemptible jobs: a job (re)started
        or resized less than ``min_tenure_s`` ago keeps its GPUs (a leftover GPU given for
        one round and taken back the next is a restart for nothing); and taking all of a
        running job's GPUs costs its restart (``victim_charge`` x its restart penalty at its
        current speed)."""
        k = self.knobs
        for job in jobs:
            if job.prev is None or not job.info.preemptible:
                continue
            held = self._held_s(job.info, previous.get(job.info.name) or [])
            job.protected = held is not None and held < k.min_tenure_s
            if job.info.age_s < self._hold_until.get(job.info.name, -math.inf):
                job.protected = True  # its resume budget for the hour is spent
            if k.victim_charge > 0:
                now = job.table.get(len(job.prev), job.prev_replicas, job.cap)
                now *= placement_speed(job, job.prev)
                lost = float(self._penalty(job.restart_s, job.remaining, now))
                job.charge = k.victim_charge * job.weight * now * lost

    def _remember(
        self, jobs: Sequence[JobInfo], previous: Mapping[str, list[str]], answer: Allocation
    ) -> None:
        """Record since when each job holds its answer (the clock is the jobs' own age)."""
        since: dict[str, tuple[tuple[str, ...], float | None]] = {}
        resumes: dict[str, list[float]] = {}
        hold_until: dict[str, float] = {}
        for info in jobs:
            recent = [a for a in self._resumes.get(info.name, ()) if info.age_s - a < _HOUR_S]
            if recent:
                resumes[info.name] = recent
            nodes = tuple(sorted(answer.get(info.name) or []))
            if not nodes:
                continue
            if info.name in self._hold_until:
                hold_until[info.name] = self._hold_until[info.name]
            before = previous.get(info.name) or []
            if nodes != tuple(sorted(before)):
                # only a resume (GPUs again after a preemption) starts a protected tenure,
                # unless ``tenure_all`` also protects first starts and resizes
                resumed = not before and (info.restarts > 0 or info.attained_service_s > 0)
                protect = resumed or self.knobs.tenure_all
                since[info.name] = (nodes, info.age_s if protect else None)
                if resumed:
                    resumes[info.name] = recent = [*recent, info.age_s]
                    budget = int(self.knobs.resumes_per_hour)
                    if budget and len(recent) >= budget:
                        # the budget is spent: held until the oldest resume that counts
                        # is an hour old, so no hour ever holds more than ``budget``
                        hold_until[info.name] = recent[-budget] + _HOUR_S
            else:
                rec = self._since.get(info.name)
                since[info.name] = rec if rec is not None and rec[0] == nodes else (nodes, None)
        self._since = since
        self._resumes, self._hold_until = resumes, hold_until


def _type_room(cluster: Cluster, gpu_type: str, allowed: frozenset[int] | None) -> int:
    """GPUs of ``gpu_type`` in the cluster, or on the ``allowed`` nodes only."""
    if allowed is None:
        return cluster.type_capacity[gpu_type]
    return sum(cluster.capacity[i] for i in allowed if cluster.types[i] == gpu_type)
