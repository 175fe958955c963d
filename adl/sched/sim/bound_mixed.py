"""A provable lower bound on the average JCT of any schedule the simulator can run on a cluster
of several GPU types (:mod:`adl.sched.sim.gpu_mix`), the typed form of :mod:`adl.sched.sim.bound`.

The simulator's per-type physics: on GPUs of type ``tau`` a job of application ``a`` runs every
configuration with its compute ``1 / v_a(tau)`` of the traces' time and its gradient sync the
same (:meth:`AppTrace.step_sync_on`); a job whose GPUs span types runs at the pace of the one
that comes first in the order ``(v_a(tau), name)`` (``Simulator._pacing``). For each job, number
its types in that order, slowest first, ``i = 0 .. T-1``. While type ``i`` paces it, the job's
GPUs are all of types ``i ..`` (they are as fast or faster), so it has at most
``G_{>=i}`` GPUs on at most ``N_{>=i}`` nodes; :func:`rate_envelope` at speed ``v_a(i)`` over
those GPUs and nodes gives ``r^i_e(k)``, a rate no configuration paced by ``i`` beats.

Per job ``j``, slot ``t`` and type ``i`` the LP picks ``s_jti`` (average GPUs of type ``i`` held
after ``rho_j``), ``w_jti`` (average GPUs held while ``i`` paces the job), ``l_jti`` (seconds
paced by ``i``) and, per currency ``c``, ``z^c_jti`` (units earned while ``i`` paces). A
currency weighs epoch ``e`` by ``1 / ref_e`` (``ref_e``: the epoch's best rate over every type
and GPU count, or its best rate on ``k0`` GPUs of any type), so the job needs
``U_c = sum_e work_e / ref_e`` units and earns at most ``sigma^i_c(k) = max_e r^i_e(k) / ref_e``
per second on ``k`` GPUs paced by ``i``; ``hull^i_c`` is its concave majorant (from the origin,
flat beyond its maximum), ``top_c = max_{i,k} sigma^i_c(k)`` and ``T_c = U_c / top_c``.

Why each constraint holds for **every** schedule ``S`` (in a slot, after ``rho_j``, let ``p(tau)``
be the pacing type at time ``tau`` while the job holds GPUs, ``k(tau)`` its GPUs and ``k_i(tau)``
those of type ``i``; set ``Delta s_jti = int k_i``, ``Delta w_jti = int_{p = i} k``,
``l_jti = |{p = i}|`` and ``z^c_jti`` the units earned while ``p = i``):

1. *Time*: the sets ``{p = i}`` are disjoint within the slot's ``L_jt`` seconds after
   ``rho_j``, so ``sum_i l_jti <= L_jt``.
2. *Pacing*: ``sum_i w_jti = sum_i s_jti`` (both count every GPU-second), and for every
   ``q < T - 1``, ``sum_{i<=q} s_jti <= sum_{i<=q} w_jti``: a GPU of type ``i <= q`` in use makes
   the pacing type ``<= q``, so those GPU-seconds are among the ones ``w_{<=q}`` counts. (Only
   ``sum w <= sum s`` of the equality is kept; dropping a true constraint only lowers the LP.)
3. *Hull*: ``z^c_jti = int_{p=i} sigma^{p}_c(k) <= l_jti hull^i_c(Delta w_jti / l_jti)`` by Jensen
   (``hull^i_c`` concave), and each segment ``hull <= a_l y + b_l`` gives
   ``z^c_jti <= a_l Delta w_jti + b_l l_jti``; the slot's units are ``sum_i z^c_jti``.
4. *Capacity*: per slot and type, ``sum_j s_jti`` is at most the type's GPUs (the usage before
   ``rho_j`` that ``s`` leaves out only makes the left side smaller).
5. *Rounding*, *completion* and *horizon* exactly as in :mod:`adl.sched.sim.bound` (items 3-5
   there): their proofs use only that the job's rate never exceeds ``top_c`` units per second,
   true here since every rate is some ``sigma^i_c(k)``. The alone bound is
   ``rho_j + (1 - beta_c) T_c``: the job alone on the whole cluster, every epoch at its best
   configuration on its best type (or a spanning allocation paced by a slower type, if one were
   faster: the envelopes of the slower types cover every GPU they can be paced over).

Every schedule thus gives a feasible LP point whose objective is at most its average JCT, so
the LP optimum is a lower bound. The relaxation also lets a job run on several types at once
with each part at its own type's pace (``sum_i z``, no single pacing type per slot), which the
simulator does not: another dropped constraint, so the bound stays valid and is looser for it.
On a cluster of one type of speed 1.0 every row reduces to its uniform form
(``w = s``, ``l = L`` at the optimum since every ``b_l >= 0``) and the bound is
:func:`adl.sched.sim.bound.lower_bound`'s.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.optimize
from numpy.typing import NDArray

from adl.sched.sim.bound import (
    REFERENCE_GPUS,
    BoundResult,
    FloatArray,
    JobBound,
    LPFailed,
    _Program,
    job_max_replicas,
)
from adl.sched.sim.bound_rates import RateEnvelope, concave_hull, rate_envelope
from adl.sched.sim.job import RESTART_DELAY_S
from adl.sched.sim.traces import AppTrace, load_traces
from adl.sched.sim.workload import WorkloadJob


@dataclass(frozen=True)
class TypedCluster:
    """GPU types in node order (a type may appear twice), ``gpus_per_node`` each, and each
    application's compute speed per type relative to the traces' (1.0 where absent, as
    :meth:`SimConfig.speed_of`)."""

    node_types: tuple[tuple[str, int], ...]
    gpus_per_node: int = 4
    restart_delay_s: int = RESTART_DELAY_S
    speeds: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.node_types or any(n < 1 or not t for t, n in self.node_types):
            raise ValueError("node_types needs a type name and at least one node per type")
        if self.gpus_per_node < 1:
            raise ValueError("gpus_per_node must be at least 1")

    @property
    def types(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(t for t, _ in self.node_types))

    def nodes_of(self, gpu_type: str) -> int:
        return sum(n for t, n in self.node_types if t == gpu_type)

    @property
    def gpus(self) -> int:
        return sum(n for _, n in self.node_types) * self.gpus_per_node

    def speed_of(self, application: str, gpu_type: str) -> float:
        return float(self.speeds.get(application, {}).get(gpu_type, 1.0))

    def pacing_order(self, application: str) -> tuple[str, ...]:
        """The types slowest first, ties by name: the order in which the simulator picks the
        type that paces a job spanning several."""
        return tuple(sorted(self.types, key=lambda t: (self.speed_of(application, t), t)))


@dataclass(frozen=True)
class TypedCurrency:
    """One weighting of a job's epochs, with the hull of every pacing type (job's order)."""

    units: float  # U_c
    slopes: tuple[FloatArray, ...]
    intercepts: tuple[FloatArray, ...]
    fastest_s: float  # T_c
    rounding: float  # beta_c


@dataclass(frozen=True)
class TypedJob:
    name: str
    application: str
    submit_s: int
    release_s: float  # rho_j
    alone_s: float
    #: index into the cluster's types of each pacing position (slowest first)
    type_index: tuple[int, ...]
    currencies: tuple[TypedCurrency, ...]

    @property
    def earliest_s(self) -> float:
        """``rho_j + max_c (1 - beta_c) T_c``: the job alone on the whole cluster."""
        return self.release_s + max((1 - c.rounding) * c.fastest_s for c in self.currencies)


def typed_currencies(
    envs: Sequence[RateEnvelope], reference_gpus: Sequence[int] = REFERENCE_GPUS
) -> list[TypedCurrency]:
    """The job's currencies over its pacing envelopes (one per type, slowest first)."""
    best = np.max([e.best_rates for e in envs], axis=0)
    refs = [best]
    kmax = max(e.kmax for e in envs)
    for k in reference_gpus:
        if 1 <= k < kmax:
            refs.append(np.max([e.epoch_rates[:, k] for e in envs if e.kmax >= k], axis=0))
    work, epochs = envs[0].epoch_work, envs[0].epochs
    out = []
    for ref in refs:
        if not np.all(ref > 0):
            continue  # a reference no configuration reaches weighs nothing usefully
        sigmas = [np.asarray((e.epoch_rates / ref[:, None]).max(axis=0)) for e in envs]
        hulls = [concave_hull(s) for s in sigmas]
        units = float(np.sum(work / ref))
        top = float(max(s.max() for s in sigmas))
        out.append(
            TypedCurrency(
                units=units,
                slopes=tuple(h[0] for h in hulls),
                intercepts=tuple(h[1] for h in hulls),
                fastest_s=units / top,
                rounding=min(0.5 * epochs * top / units, 1.0),
            )
        )
    return out


def prepare_typed_jobs(
    workload: Sequence[WorkloadJob],
    cluster: TypedCluster,
    traces: Mapping[str, AppTrace] | None = None,
    slot_s: int = 1200,
    reference_gpus: Sequence[int] = REFERENCE_GPUS,
    cache: dict[tuple[object, ...], RateEnvelope] | None = None,
) -> list[TypedJob]:
    """The LP's view of each job: release, alone time, pacing order and currencies.
    ``cache`` keeps the rate envelopes (seconds each) for later calls, e.g. other workloads."""
    if not 1 <= slot_s <= 86400:
        raise ValueError("slot_s must be between 1 s and a day")
    if not workload:
        raise ValueError("empty workload")
    apps = traces if traces is not None else load_traces()
    batches: dict[str, set[int]] = {}
    for w in workload:
        batches.setdefault(w.application, set()).add(w.batch_size)
    types = cluster.types
    cache = {} if cache is None else cache
    jobs = []
    for w in workload:
        app = apps[w.application]
        cap = job_max_replicas(w, app, cluster.gpus)
        order = cluster.pacing_order(w.application)
        envs = []
        for i, gpu_type in enumerate(order):
            # paced by this type: every GPU is of it or of a type after it in the order
            nodes = sum(cluster.nodes_of(t) for t in order[i:])
            kmax = max(1, min(cap, nodes * cluster.gpus_per_node))
            speed = cluster.speed_of(w.application, gpu_type)
            fixed = tuple(sorted(batches[w.application]))
            key = (w.application, kmax, nodes, speed, cluster.gpus_per_node, fixed)
            if key not in cache:
                cache[key] = rate_envelope(
                    app,
                    kmax=kmax,
                    gpus_per_node=cluster.gpus_per_node,
                    num_nodes=nodes,
                    fixed_batches=fixed,
                    speed=speed,
                )
            envs.append(cache[key])
        curs = typed_currencies(envs, reference_gpus)
        jobs.append(
            TypedJob(
                name=w.name,
                application=w.application,
                submit_s=w.submit_time,
                release_s=float(w.submit_time + cluster.restart_delay_s),
                alone_s=curs[0].fastest_s,  # the first currency's reference is each epoch's best
                type_index=tuple(types.index(t) for t in order),
                currencies=tuple(curs),
            )
        )
    return jobs


def _slot_rows(
    lp: _Program, cols: Sequence[NDArray[np.int64]], coef: Sequence[float], rhs: FloatArray
) -> None:
    """One row per slot: ``sum_m coef[m] * cols[m][t] <= rhs[t]`` (``cols`` of equal length)."""
    n = len(rhs)
    row = np.arange(n)
    lp.add(
        np.tile(row, len(cols)),
        np.concatenate(cols),
        np.repeat(np.asarray(coef, dtype=np.float64), n),
        rhs,
    )


def solve_typed_relaxation(
    jobs: Sequence[TypedJob],
    slot: int,
    horizons: FloatArray,
    type_gpus: Sequence[int],
    *,
    time_limit_s: float | None = None,
) -> tuple[FloatArray, FloatArray, int, int]:
    """Solve the LP for these per-job horizons: (C_j, work left to each job's last slot,
    variables, constraints). Raises :class:`LPFailed` when HiGHS settles nothing."""
    lp = _Program()
    completion = lp.columns(len(jobs))
    gpu_cols: dict[tuple[int, int], list[int]] = {}
    overflow_cols: list[list[int]] = []
    delta = float(slot)
    for j, job in enumerate(jobs):
        rho = job.release_s
        slots = np.arange(int(rho // slot), int(horizons[j] // slot), dtype=np.int64)
        n, ntypes = len(slots), len(job.type_index)
        start = np.maximum(slots * delta, rho)
        length = (slots + 1) * delta - start
        share = [lp.columns(n) for _ in range(ntypes)]
        paced = [lp.columns(n) for _ in range(ntypes)]
        seconds = [lp.columns(n) for _ in range(ntypes)]
        for i, ti in enumerate(job.type_index):
            for t, col in zip(slots.tolist(), share[i].tolist(), strict=True):
                gpu_cols.setdefault((t, ti), []).append(col)
        zeros = np.zeros(n)
        _slot_rows(lp, seconds, [1.0] * ntypes, length)  # 1. time
        _slot_rows(lp, paced + share, [1.0] * ntypes + [-1.0] * ntypes, zeros)  # 2. total
        for q in range(ntypes - 1):  # 2. the slow types' GPU-seconds are paced by slow types
            k = q + 1
            _slot_rows(lp, share[:k] + paced[:k], [1.0] * k + [-1.0] * k, zeros)
        mine = []
        for cur in job.currencies:
            earned = [lp.columns(n) for _ in range(ntypes)]
            last = int(lp.columns(1)[0])
            mine.append(last)
            for i in range(ntypes):  # 3. hull, one row per (segment, slot)
                for a, b in zip(cur.slopes[i], cur.intercepts[i], strict=True):
                    _slot_rows(lp, [earned[i], paced[i], seconds[i]], [1.0, -a * delta, -b], zeros)
            every = np.concatenate([*earned, [last]])
            share_of_job = np.concatenate([np.full(n * ntypes, 1.0 / cur.units), [1.0]])
            lp.add(
                np.zeros(len(every), dtype=np.int64),
                every,
                -share_of_job,
                np.array([-(1.0 - cur.rounding)]),
            )
            weights = np.concatenate([np.tile(start - rho, ntypes), [horizons[j] - rho]])
            lp.add(
                np.zeros(len(every) + 1, dtype=np.int64),
                np.concatenate([every, [completion[j]]]),
                np.concatenate([weights * share_of_job, [-1.0]]),
                np.array([-rho - (1.0 - cur.rounding) ** 2 * cur.fastest_s / 2.0]),
            )
        overflow_cols.append(mine)
    for (_, ti), cols in gpu_cols.items():  # 4. capacity per slot and type
        idx = np.asarray(cols, dtype=np.int64)
        lp.add(
            np.zeros(len(idx), dtype=np.int64),
            idx,
            np.ones(len(idx)),
            np.array([float(type_gpus[ti])]),
        )
    cost = np.zeros(lp.ncols)
    cost[completion] = 1.0 / len(jobs)
    lower = np.zeros(lp.ncols)
    lower[completion] = [j.earliest_s for j in jobs]
    res = scipy.optimize.linprog(
        cost,
        A_ub=lp.matrix(),
        b_ub=np.concatenate(lp.rhs),
        bounds=np.column_stack([lower, np.full(lp.ncols, np.inf)]),
        method="highs",
        options={} if time_limit_s is None else {"time_limit": float(time_limit_s)},
    )
    if res.status != 0:
        raise LPFailed(f"typed lower-bound LP failed: {res.message}")
    left = np.array([max(res.x[c] for c in cols) for cols in overflow_cols])
    return np.asarray(res.x[completion], dtype=np.float64), left, lp.ncols, lp.nrows


def typed_lower_bound(
    workload: Sequence[WorkloadJob],
    cluster: TypedCluster,
    slot_s: int = 1200,
    *,
    traces: Mapping[str, AppTrace] | None = None,
    max_rounds: int = 6,
    reference_gpus: Sequence[int] = REFERENCE_GPUS,
    cache: dict[tuple[object, ...], RateEnvelope] | None = None,
) -> BoundResult:
    """The LP lower bound on the average JCT of ``workload`` on a typed cluster (see the
    module docstring); ``alone_avg_jct_s`` is the typed alone bound."""
    jobs = prepare_typed_jobs(workload, cluster, traces, slot_s, reference_gpus, cache)
    type_gpus = [cluster.nodes_of(t) * cluster.gpus_per_node for t in cluster.types]
    span = np.array([max(8.0 * j.alone_s, 3600.0) for j in jobs])
    release = np.array([j.release_s for j in jobs])
    submit = np.array([j.submit_s for j in jobs], dtype=np.float64)
    t0 = time.perf_counter()
    rounds, best = 0, 0.0
    while True:
        rounds += 1
        horizons = np.ceil((release + span) / slot_s) * slot_s
        ends, left, nvar, ncon = solve_typed_relaxation(jobs, slot_s, horizons, type_gpus)
        full = left > 1e-7
        avg = float(np.mean(ends - submit))
        gain, best = avg - best, avg
        # every round is a valid bound; stop once longer horizons stop paying
        if not full.any() or rounds >= max_rounds or (rounds > 1 and gain < 1e-3 * best):
            break
        span = np.where(full, span * 2.0, span)
    return BoundResult(
        avg_jct_s=avg,
        alone_avg_jct_s=float(np.mean([j.earliest_s - j.submit_s for j in jobs])),
        jobs=tuple(
            JobBound(j.name, j.application, j.submit_s, j.alone_s, float(c - j.submit_s))
            for j, c in zip(jobs, ends, strict=True)
        ),
        slot_s=slot_s,
        solve_s=time.perf_counter() - t0,
        rounds=rounds,
        variables=nvar,
        constraints=ncon,
    )
