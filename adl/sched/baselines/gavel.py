"""Gavel (OSDI'20, "Heterogeneity-Aware Cluster Scheduling Policies for Deep Learning
Workloads"): its heterogeneity-aware max-min fairness, replayed on a mixed cluster.

Gavel's jobs run at a fixed batch size on a fixed number of GPUs (their *scale factor*, the
workload's ``num_replicas``: ``JobInfo.max_replicas`` of a fixed job). Gavel decides, per job
and GPU type, the fraction of time ``X[j, t]`` the job should run on that type, by the linear
program (HiGHS, ``scipy.optimize.linprog``)

    maximize   z
    subject to z <= sum_t T[j, t] X[j, t] / E[j]          every job j (weight 1)
               sum_t X[j, t] <= 1                          every job j
               sum_j k[j] X[j, t] <= G[t]                  every type t
               0 <= X[j, t] <= 1, and 0 where the job cannot run on t

``T[j, t]`` is the job's throughput on type t at its scale factor (0 where the type has
fewer GPUs than ``k[j]`` or the job may not use it), ``G[t]`` the type's GPUs, and ``E[j]``
the job's throughput on an equal share of the cluster: the same time fraction of every type,
``X_eq[t] = G[t] / max(sum_j k[j], sum_t G[t])``. Throughputs are known up front, as Gavel
assumes (profiled offline): in the simulator Gavel reads each job's true step time per type
through the simulator's oracle; elsewhere it takes ``JobInfo.type_speed``.

Rounding to whole allocations is Gavel's round-based mechanism: every round (6 minutes, as
published: ``GavelSettings.lease_calls`` of adl's 60 s rounds) the pairs (job, type) are
taken in order of priority ``X[j, t] / (share of the job's rounds it ran on t)`` (never run
there: first), and a job is placed on a type with room for all of its GPUs (packed on the
fewest nodes of that type, where it ran before if the type is the same: a lease extended does
not restart it). Between rounds a job keeps its GPUs; a finished job's stay idle until the
next round, as in Gavel.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_array

from adl.sched.placement import Cluster
from adl.sched.types import Allocation, JobInfo, NodeInfo


class TypeStepOracle(Protocol):
    """The trace knowledge Gavel is given (the simulator's ``SimulatorOracle`` has it): a
    Protocol, so that the baseline does not import the simulator."""

    def step_time(self, name: str, replicas: int, gpu_type: str = "") -> float: ...


@dataclass(frozen=True)
class GavelSettings:
    #: calls of :meth:`GavelPolicy.optimize` per Gavel round (6 x 60 s: Gavel's 6 minutes)
    lease_calls: int = 6

    def __post_init__(self) -> None:
        if not 1 <= self.lease_calls <= 1000:
            raise ValueError("lease_calls must be 1..1000")


def max_min_fractions(
    throughput: np.ndarray, scale: np.ndarray, gpus: np.ndarray
) -> tuple[np.ndarray, float]:
    """Gavel's max-min fair time fractions ``X[j, t]`` and the min normalized throughput ``z``.

    ``throughput[j, t]`` (0: the job cannot run on t), ``scale[j]`` GPUs per job, ``gpus[t]``
    GPUs per type. Raises RuntimeError if HiGHS fails (it should not: X = 0 is feasible)."""
    jobs, types = throughput.shape
    if jobs == 0 or types == 0:
        return np.zeros((jobs, types)), 0.0
    share = gpus / max(float(scale.sum()), float(gpus.sum()), 1e-9)
    equal = throughput @ share  # E[j]
    runnable = equal > 0
    if not runnable.any():  # nothing can run anywhere: z would be unbounded
        return np.zeros((jobs, types)), 0.0
    n = jobs * types + 1  # X flattened row-major, then z
    c = np.zeros(n)
    c[-1] = -1.0  # maximize z
    rows, cols, vals = [], [], []
    b: list[float] = []
    r = 0
    for j in range(jobs):  # z - sum_t T X / E <= 0
        if not runnable[j]:
            continue
        for t in range(types):
            if throughput[j, t] > 0:
                rows.append(r)
                cols.append(j * types + t)
                vals.append(-throughput[j, t] / equal[j])
        rows.append(r)
        cols.append(n - 1)
        vals.append(1.0)
        b.append(0.0)
        r += 1
    for j in range(jobs):  # sum_t X <= 1
        for t in range(types):
            rows.append(r)
            cols.append(j * types + t)
            vals.append(1.0)
        b.append(1.0)
        r += 1
    for t in range(types):  # sum_j k X <= G
        for j in range(jobs):
            rows.append(r)
            cols.append(j * types + t)
            vals.append(float(scale[j]))
        b.append(float(gpus[t]))
        r += 1
    a = coo_array((vals, (rows, cols)), shape=(r, n)).tocsr()
    upper = np.where(throughput.ravel() > 0, 1.0, 0.0)
    bounds = [(0.0, float(u)) for u in upper] + [(0.0, None)]
    result = linprog(c, A_ub=a, b_ub=np.array(b), bounds=bounds, method="highs")
    if result.x is None:
        raise RuntimeError(f"Gavel's program found no solution: {result.message}")
    x = np.clip(result.x[:-1].reshape(jobs, types), 0.0, 1.0)
    return x, float(result.x[-1])


class GavelPolicy:
    """Gavel's heterogeneity-aware max-min fairness with its round-based rounding."""

    def __init__(self, seed: int = 0, settings: GavelSettings | None = None) -> None:
        del seed  # deterministic
        self.settings = settings or GavelSettings()
        self._oracle: TypeStepOracle | None = None
        self._calls = 0
        self._active_rounds: dict[str, int] = {}  # Gavel rounds each job has been active
        self._received: dict[str, dict[str, int]] = {}  # job -> type -> rounds run there
        self._speed: dict[tuple[str, str], float] = {}  # (job, type) -> throughput
        self.last_fractions: dict[str, dict[str, float]] = {}
        self._largest = 1 << 30  # GPUs of the largest type (set each round)

    def bind_oracle(self, oracle: TypeStepOracle) -> None:
        """The simulator's true per-type step times (Gavel assumes throughputs are known)."""
        self._oracle = oracle

    def optimize(
        self,
        jobs: Sequence[JobInfo],
        nodes: Sequence[NodeInfo],
        previous: Mapping[str, list[str]],
    ) -> Allocation:
        names = {j.name for j in jobs}
        boundary = self._calls % self.settings.lease_calls == 0
        self._calls += 1
        if not boundary:  # mid-round: leases run on; finished jobs' GPUs wait for the round
            return {k: list(v) for k, v in previous.items() if k in names and v}
        for table in (self._active_rounds, self._received):
            for gone in [k for k in table if k not in names]:
                del table[gone]
        if not jobs or not nodes:
            return {}
        types = sorted({n.gpu_type for n in nodes})
        gpus = np.array([sum(n.gpus for n in nodes if n.gpu_type == t) for t in types], float)
        type_max = {t: max(n.gpus for n in nodes if n.gpu_type == t) for t in types}
        ordered = sorted(jobs, key=lambda j: (j.submit_order, j.name))
        self._largest = int(gpus.max())
        scale = np.array([self._scale(j) for j in ordered], dtype=float)
        throughput = np.array(
            [
                [self._throughput(j, t, gpus[i], type_max[t]) for i, t in enumerate(types)]
                for j in ordered
            ]
        )
        x, _ = max_min_fractions(throughput, scale, gpus)
        self.last_fractions = {
            j.name: {t: float(x[a, b]) for b, t in enumerate(types) if x[a, b] > 1e-9}
            for a, j in enumerate(ordered)
        }
        return self._round(ordered, types, x, nodes, previous)

    # ------------------------------------------------------------------ inputs

    def _scale(self, job: JobInfo) -> int:
        """The job's GPUs: its fixed replica count (at least its minimum, at least 1), at most
        the GPUs of the largest type (a job never spans types; one that asked for more runs
        its fixed batch on all of that type's GPUs)."""
        gpr = max(job.gpus_per_replica, 1)
        replicas = max(job.max_replicas, job.min_replicas, 1)
        return min(replicas, max(self._largest // gpr, 1)) * gpr

    def _throughput(self, job: JobInfo, gpu_type: str, gpus: float, largest: int) -> float:
        """Steps per second of ``job`` at its scale factor on ``gpu_type`` (0: cannot run)."""
        if not job.may_use(gpu_type) or self._scale(job) > gpus:
            return 0.0
        key = (job.name, gpu_type)
        hit = self._speed.get(key)
        if hit is None:
            if self._oracle is not None:
                replicas = self._scale(job) // max(job.gpus_per_replica, 1)
                hit = 1.0 / max(self._oracle.step_time(job.name, replicas, gpu_type), 1e-9)
            else:
                hit = job.speed_on(gpu_type)
            self._speed[key] = hit
        return hit

    # ------------------------------------------------------------------ rounding

    def _round(
        self,
        jobs: list[JobInfo],
        types: list[str],
        x: np.ndarray,
        nodes: Sequence[NodeInfo],
        previous: Mapping[str, list[str]],
    ) -> Allocation:
        cluster = Cluster(nodes)
        pairs = []
        for a, job in enumerate(jobs):
            rounds = self._active_rounds.get(job.name, 0)
            got = self._received.get(job.name, {})
            for b, gpu_type in enumerate(types):
                if x[a, b] <= 1e-6:
                    continue
                share = got.get(gpu_type, 0) / rounds if rounds else 0.0
                priority = math.inf if share == 0 else x[a, b] / share
                pairs.append((-priority, -x[a, b], job.submit_order, job.name, a, gpu_type))
        pairs.sort()
        out: Allocation = {}
        for *_, a, gpu_type in pairs:
            job = jobs[a]
            if job.name in out:
                continue
            gpr = max(job.gpus_per_replica, 1)
            replicas = self._scale(job) // gpr
            held = previous.get(job.name) or []
            prefer = [cluster.index[n] for n in dict.fromkeys(held) if n in cluster.index]
            if held and len(held) == replicas and {cluster.types[i] for i in prefer} == {gpu_type}:
                placement = {i: held.count(cluster.names[i]) for i in prefer}
                if cluster.fits(placement, gpr):  # the lease is extended: no restart
                    cluster.take(job.name, placement, gpr)
                    out[job.name] = list(held)
                    continue
            placed = cluster.place(replicas, gpr, prefer, gpu_type)
            if placed is None:
                continue
            cluster.take(job.name, placed, gpr)
            out[job.name] = [cluster.names[i] for i, k in placed.items() for _ in range(k)]
        for job in jobs:
            self._active_rounds[job.name] = self._active_rounds.get(job.name, 0) + 1
            if job.name in out:
                t = cluster.types[cluster.index[out[job.name][0]]]
                got = self._received.setdefault(job.name, {})
                got[t] = got.get(t, 0) + 1
        return out
