"""A provable lower bound on the average JCT of any schedule the simulator can run.

The relaxation knows every job's true rates (:mod:`adl.sched.sim.bound_rates`) and length and
lets jobs be preempted and resized for free, every second. Time is cut into slots of
``slot_s`` seconds; per job ``j`` and slot ``t`` the LP picks ``s_jt``, the job's average GPUs
over the slot, and ``x^c_jt``, the share of the job's work done in the slot, measured in one of
several *currencies* ``c``. A currency weighs epoch ``e``'s progress by ``1 / ref_e`` (``ref_e``
the epoch's best rate over all GPU counts, or its rate on ``k0`` GPUs), so the job needs
``U_c = sum_e work_e / ref_e`` units and earns at most ``sigma_c(k) = max_e r_e(k) / ref_e``
units per second on ``k`` GPUs, whatever epoch it is in. ``T_c = U_c / max_k sigma_c(k)`` is
the fastest the job can finish in that currency (alone on the cluster it is ``T*``).

Why each constraint holds for **every** schedule ``S`` the simulator can run (take ``F_c(tau)``,
the share of the job's units done by time ``tau`` in ``S``; ``rho_j`` = submission + the restart
delay, since a job is first started at or after its submission and every start makes no
progress for ``restart_delay_s``; ``C_j`` its completion):

1. *Hull*: in a slot the job runs ``L_jt`` seconds after ``rho_j``; its units there are
   ``int sigma_c(k(tau)) dtau <= L * hull_c(mean k) = L * hull_c(Delta * s_jt / L)``
   (Jensen: ``hull_c`` is a concave majorant of ``sigma_c``), and for each hull segment
   ``hull_c(y) <= a_l y + b_l``, so ``U_c x^c_jt <= a_l Delta s_jt + b_l L_jt``.
2. *Capacity*: the slot averages of integer allocations sum to at most the cluster's GPUs.
3. *Rounding*: the simulator ends an epoch after ``round(x)`` whole seconds, not ``x``; each of
   the job's ``E`` epoch ends can thus add at most 0.5 s of progress at its current rate, at
   most ``beta_c = 0.5 * E * max sigma_c / U_c`` of the job in all. So
   ``sum_t x^c_jt >= 1 - beta_c``, the rest counted as done at ``rho_j`` (as early as it can).
4. *Completion*: ``C_j >= M_c + (1 - beta_c)^2 T_c / 2`` with ``M_c = int tau dF_c`` the mean
   time of the job's units: ``C - M_c = int_rho^C F_c dtau``, and since at most
   ``(C - tau) / T_c + beta_c`` of the job can be done in ``[tau, C]``,
   ``F_c(tau) >= 1 - beta_c - (C - tau) / T_c``; integrating over the last
   ``(1 - beta_c) T_c`` seconds gives the term. ``M_c`` is at least each unit's slot start
   (or ``rho_j``, whichever is later): the sum in the completion row. Also
   ``C_j >= rho_j + (1 - beta_c) T_c``, the job alone on the cluster.
5. *Horizon*: slots of job ``j`` stop at ``H_j``; one last slot with no capacity limit and
   start ``H_j`` takes any work left, so a short horizon loosens the bound but never breaks it
   (it is lengthened and the LP solved again while a job uses that slot).

Every schedule thus gives a feasible LP point whose objective is at most its average JCT, so the
LP optimum is a lower bound. Halving the slot only tightens it: the coarse LP is feasible at the
sums of the two halves, with earlier slot starts.

It relies on the simulator's rules: GPUs per node and nodes (placements), each job's
``max_replicas`` in every job mode (policies respect it; the simulator does not check it),
integer micro-batches up to ``max_local_bsz`` and global batches up to ``max_batch_size`` (or a
fixed batch's split), progress only after the restart delay.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import scipy.optimize
import scipy.sparse
from numpy.typing import NDArray

from adl.sched.sim.bound_rates import RateEnvelope, concave_hull, rate_envelope
from adl.sched.sim.job import RESTART_DELAY_S, JobMode, SimJob
from adl.sched.sim.traces import AppTrace, load_traces
from adl.sched.sim.workload import WorkloadJob

FloatArray = NDArray[np.float64]

#: GPU counts whose rates also normalise a currency (besides each epoch's best rate)
REFERENCE_GPUS: tuple[int, ...] = (1, 2, 4, 8, 16, 32)


class LPFailed(RuntimeError):
    """HiGHS neither solved the LP nor proved it infeasible (numerical trouble)."""


@dataclass(frozen=True)
class ClusterShape:
    num_nodes: int = 16
    gpus_per_node: int = 4
    restart_delay_s: int = RESTART_DELAY_S

    @property
    def gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node


@dataclass(frozen=True)
class Currency:
    """One weighting of a job's epochs (see the module docstring)."""

    units: float  # U_c
    slopes: FloatArray  # hull segments of sigma_c
    intercepts: FloatArray
    fastest_s: float  # T_c
    rounding: float  # beta_c


@dataclass(frozen=True)
class JobBound:
    name: str
    application: str
    submit_s: int
    alone_s: float  # T*: best training time alone on the cluster
    jct_bound_s: float  # this job's C_j - submit in the LP optimum


@dataclass(frozen=True)
class BoundResult:
    avg_jct_s: float
    #: the simpler bound: each job alone on the cluster from submission (with the restart delay)
    alone_avg_jct_s: float
    jobs: tuple[JobBound, ...]
    slot_s: int
    solve_s: float
    rounds: int  # LP solves (horizons lengthened in between)
    variables: int
    constraints: int


def currencies(env: RateEnvelope, reference_gpus: Sequence[int] = REFERENCE_GPUS) -> list[Currency]:
    """The job's currencies: each epoch's best rate, then its rate on each reference GPU count."""
    refs = [env.best_rates]
    refs += [env.epoch_rates[:, k] for k in reference_gpus if 1 <= k < env.kmax]
    out = []
    for ref in refs:
        units = float(np.sum(env.epoch_work / ref))
        sigma = np.asarray((env.epoch_rates / ref[:, None]).max(axis=0), dtype=np.float64)
        slopes, intercepts = concave_hull(sigma)
        top = float(sigma.max())
        out.append(
            Currency(
                units=units,
                slopes=slopes,
                intercepts=intercepts,
                fastest_s=units / top,
                rounding=min(0.5 * env.epochs * top / units, 1.0),
            )
        )
    return out


def job_max_replicas(job: WorkloadJob, app: AppTrace, gpus: int) -> int:
    """The most GPUs any policy may give this job: its cap in every job mode, and the cluster."""
    caps = [SimJob(spec=job, app=app, mode=m, order=0).max_replicas for m in JobMode]
    return max(1, min(max(caps), gpus))


def envelopes(
    workload: Sequence[WorkloadJob], traces: Mapping[str, AppTrace], cluster: ClusterShape
) -> dict[str, RateEnvelope]:
    """One envelope per job name (shared by jobs of one application and GPU cap)."""
    batches: dict[str, set[int]] = {}
    for job in workload:
        batches.setdefault(job.application, set()).add(job.batch_size)
    cache: dict[tuple[str, int], RateEnvelope] = {}
    out = {}
    for job in workload:
        app = traces[job.application]
        key = (job.application, job_max_replicas(job, app, cluster.gpus))
        if key not in cache:
            cache[key] = rate_envelope(
                app,
                kmax=key[1],
                gpus_per_node=cluster.gpus_per_node,
                num_nodes=cluster.num_nodes,
                fixed_batches=sorted(batches[job.application]),
            )
        out[job.name] = cache[key]
    return out


@dataclass(frozen=True)
class RelaxedJob:
    name: str
    application: str
    submit_s: int
    release_s: float  # rho_j
    alone_s: float
    currencies: tuple[Currency, ...]

    @property
    def earliest_s(self) -> float:
        """``rho_j + max_c (1 - beta_c) T_c``: the job alone on the cluster."""
        return self.release_s + max((1 - c.rounding) * c.fastest_s for c in self.currencies)


class _Program:
    """Sparse rows ``A x <= b`` built job by job."""

    def __init__(self) -> None:
        self.rows: list[FloatArray] = []
        self.cols: list[FloatArray] = []
        self.vals: list[FloatArray] = []
        self.rhs: list[FloatArray] = []
        self.nrows = 0
        self.ncols = 0

    def columns(self, count: int) -> NDArray[np.int64]:
        first = self.ncols
        self.ncols += count
        return np.arange(first, first + count, dtype=np.int64)

    def add(
        self, row_of: NDArray[np.int64], cols: NDArray[np.int64], vals: FloatArray, rhs: FloatArray
    ) -> None:
        """Rows ``nrows + row_of`` (``row_of`` indexes ``rhs``) with these entries."""
        self.rows.append(self.nrows + row_of.astype(np.float64))
        self.cols.append(cols.astype(np.float64))
        self.vals.append(np.asarray(vals, dtype=np.float64))
        self.rhs.append(np.asarray(rhs, dtype=np.float64))
        self.nrows += len(rhs)

    def matrix(self) -> scipy.sparse.csr_array:
        return scipy.sparse.csr_array(
            (
                np.concatenate(self.vals),
                (
                    np.concatenate(self.rows).astype(np.int64),
                    np.concatenate(self.cols).astype(np.int64),
                ),
            ),
            shape=(self.nrows, self.ncols),
        )


def solve_relaxation(
    jobs: Sequence[RelaxedJob],
    slot: int,
    horizons: FloatArray,
    gpus: int,
    deadline: bool = False,
    *,
    feasibility: bool = False,
    time_limit_s: float | None = None,
) -> tuple[FloatArray, FloatArray, int, int] | None:
    """Solve the LP for these per-job horizons: (C_j, work left to each job's last slot,
    variables, constraints). With ``deadline`` every job must be done by its horizon (no work
    left to the last slot, ``C_j`` at most the horizon); None when no point meets that.
    ``feasibility``: any feasible point will do (no objective: HiGHS answers sooner), and its
    ``C_j`` mean nothing. Raises :class:`LPFailed` when HiGHS settles nothing (numbers, or
    ``time_limit_s``)."""
    lp = _Program()
    completion = lp.columns(len(jobs))
    gpu_cols: dict[int, list[int]] = {}
    overflow_cols: list[list[int]] = []
    for i, job in enumerate(jobs):
        rho = job.release_s
        slots = np.arange(int(rho // slot), int(horizons[i] // slot), dtype=np.int64)
        start = np.maximum(slots * float(slot), rho)
        length = (slots + 1) * float(slot) - start
        share = lp.columns(len(slots))
        for t, col in zip(slots.tolist(), share.tolist(), strict=True):
            gpu_cols.setdefault(t, []).append(col)
        mine = []
        for cur in job.currencies:
            work = lp.columns(len(slots))
            last = lp.columns(1)
            mine.append(int(last[0]))
            n, segs = len(slots), len(cur.slopes)
            # hull: U x_t - a_l Delta s_t <= b_l L_t, one row per (segment, slot)
            row = np.arange(n * segs)
            lp.add(
                np.concatenate([row, row]),
                np.concatenate([np.tile(work, segs), np.tile(share, segs)]),
                np.concatenate(
                    [np.full(n * segs, cur.units), -np.repeat(cur.slopes, n) * float(slot)]
                ),
                np.repeat(cur.intercepts, n) * np.tile(length, segs),
            )
            every = np.concatenate([work, last])
            ones = np.zeros(len(every), dtype=np.int64)
            lp.add(ones, every, -np.ones(len(every)), np.array([-(1.0 - cur.rounding)]))
            weights = np.concatenate([start - rho, [horizons[i] - rho]])
            lp.add(
                np.zeros(len(every) + 1, dtype=np.int64),
                np.concatenate([every, [completion[i]]]),
                np.concatenate([weights, [-1.0]]),
                np.array([-rho - (1.0 - cur.rounding) ** 2 * cur.fastest_s / 2.0]),
            )
        overflow_cols.append(mine)
    for cols in gpu_cols.values():
        idx = np.asarray(cols, dtype=np.int64)
        lp.add(np.zeros(len(idx), dtype=np.int64), idx, np.ones(len(idx)), np.array([float(gpus)]))
    cost = np.zeros(lp.ncols)
    cost[completion] = 1.0 / len(jobs)
    lower = np.zeros(lp.ncols)
    lower[completion] = [j.earliest_s for j in jobs]
    upper = np.full(lp.ncols, np.inf)
    if deadline:
        upper[[c for cols in overflow_cols for c in cols]] = 0.0
        upper[completion] = horizons
    if feasibility:
        cost[:] = 0.0
    res = scipy.optimize.linprog(
        cost,
        A_ub=lp.matrix(),
        b_ub=np.concatenate(lp.rhs),
        bounds=np.column_stack([lower, upper]),
        method="highs",
        options={} if time_limit_s is None else {"time_limit": float(time_limit_s)},
    )
    if deadline and res.status == 2:
        return None  # infeasible: no schedule finishes every job by its horizon
    if res.status != 0:
        raise LPFailed(f"lower-bound LP failed: {res.message}")
    left = np.array([max(res.x[c] for c in cols) for cols in overflow_cols])
    return np.asarray(res.x[completion], dtype=np.float64), left, lp.ncols, lp.nrows


def prepare_jobs(
    workload: Sequence[WorkloadJob],
    cluster: ClusterShape,
    traces: Mapping[str, AppTrace] | None = None,
    slot_s: int = 600,
) -> list[RelaxedJob]:
    """The LP's view of each job: release time, alone time and currencies (after checking the
    arguments every bound shares)."""
    if not 1 <= slot_s <= 86400:
        raise ValueError("slot_s must be between 1 s and a day")
    if not workload:
        raise ValueError("empty workload")
    apps = traces if traces is not None else load_traces()
    env = envelopes(workload, apps, cluster)
    return [
        RelaxedJob(
            name=w.name,
            application=w.application,
            submit_s=w.submit_time,
            release_s=float(w.submit_time + cluster.restart_delay_s),
            alone_s=env[w.name].alone_s,
            currencies=tuple(currencies(env[w.name])),
        )
        for w in workload
    ]


def lower_bound(
    workload: Sequence[WorkloadJob],
    cluster: ClusterShape | None = None,
    slot_s: int = 600,
    *,
    traces: Mapping[str, AppTrace] | None = None,
    max_rounds: int = 6,
) -> BoundResult:
    """The LP lower bound on the average JCT of ``workload`` (see the module docstring)."""
    cluster = cluster or ClusterShape()
    jobs = prepare_jobs(workload, cluster, traces, slot_s)
    # A first horizon per job (any horizon is valid; the LP lengthens the ones it fills).
    span = np.array([max(8.0 * j.alone_s, 3600.0) for j in jobs])
    release = np.array([j.release_s for j in jobs])
    t0 = time.perf_counter()
    submit = np.array([j.submit_s for j in jobs], dtype=np.float64)
    rounds, best = 0, 0.0
    while True:
        rounds += 1
        horizons = np.ceil((release + span) / slot_s) * slot_s
        solved = solve_relaxation(jobs, slot_s, horizons, cluster.gpus)
        assert solved is not None  # without a deadline the last slot takes any work left
        ends, left, nvar, ncon = solved
        full = left > 1e-7
        avg = float(np.mean(ends - submit))
        gain, best = avg - best, avg
        # Every round is a valid bound; stop once longer horizons stop paying.
        if not full.any() or rounds >= max_rounds or (rounds > 1 and gain < 1e-3 * best):
            break
        span = np.where(full, span * 2.0, span)
    return BoundResult(
        avg_jct_s=float(np.mean(ends - submit)),
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
