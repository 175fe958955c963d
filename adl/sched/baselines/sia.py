"""Sia (SOSP'23, "Sia: Heterogeneity-aware, goodput-optimized ML-cluster scheduling") on a
homogeneous cluster, replayed: the paper's integer program, solved by HiGHS.

Each round Sia chooses for every job at most one *configuration*, a GPU count that is part
of one node (1, 2, 4, ... up to a node: powers of two) or whole nodes (2, 3, ... nodes), by the
binary program

    minimize   sum_{j,c} x_jc * G_jc^p  +  lambda_n * (number of jobs left without GPUs)
    subject to sum_c x_jc <= 1 for every job,  sum_{j,c} x_jc * gpus(c) <= the cluster's GPUs

with p = -0.5 and lambda_n = 1.1 (the paper's defaults; lambda_n above 1, the value of the
worst configuration after normalization, keeps every job that fits running). ``G_jc`` is the
job's goodput at configuration c, normalized per job so its smallest valid configuration is 1
(the row normalization that makes jobs of any speed comparable), capped at the job's replica
limit and at twice the replicas it has profiled. A job that has no goodput model yet
(it has not run: the linear prior) is offered one GPU only: Sia bootstraps on the smallest
configuration and lets the model grow from what the job measures. For a job that holds a
configuration, every other one has its goodput scaled by the restart factor
``max(T - S * r, 0) / (T + r)`` (age ``T``, restarts so far ``S``, the job's own measured
restart cost ``r`` from :attr:`JobInfo.restart_cost_s`), except for jobs younger than ``r``;
``G^p`` is capped at 3000 (a factor of 0 makes every move infinitely costly). Non-preemptible
jobs that hold GPUs keep them. Sia's third term (lambda_a, a cost per change of allocation) is
off in its published configuration and is left out. Remaining work is not used.

Placement (:mod:`adl.sched.baselines.sia_placement`) keeps a job whose GPU count is unchanged
where it is, so only a change of configuration restarts a job, as in Sia's own simulator.

On a cluster of several GPU types this is Sia's heterogeneous formulation: the
configurations are those above *per type* (a job's GPUs all of one type), a configuration's
goodput is the job's speedup there times its speed on the type (``JobInfo.speed_on``: its
per-type models compared, or an estimate for a type it has not run on), the row is
normalized by its smallest goodput over every type, there is one capacity constraint per type,
and each type's nodes are placed apart. A job without a model is offered one GPU of each type
it may use (Sia bootstraps on the smallest configuration of each type), valued at its speed
there. A configuration moving a job to another type costs a restart like any other change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array

from adl.sched.baselines.sia_placement import place
from adl.sched.baselines.speedup_grid import SpeedupGrids
from adl.sched.gpu_types import one_type_per_job
from adl.sched.types import Allocation, JobInfo, NodeInfo, linear_speedup


@dataclass(frozen=True)
class SiaSettings:
    p: float = -0.5  # fairness exponent (the paper's default)
    lambda_n: float = 1.1  # cost of a job left without GPUs
    max_cost: float = 3000.0  # cap on G^p (Sia's clip value)
    gap: float = 1e-4  # relative MIP gap (Sia's solver threshold)
    time_limit_s: float = 10.0

    def __post_init__(self) -> None:
        if not -10.0 <= self.p < 0.0:
            raise ValueError("p must be in [-10, 0): Sia's homogeneous objective is minimized")
        if not 0.0 < self.lambda_n <= 1e6 or not 1.0 <= self.max_cost <= 1e9:
            raise ValueError("lambda_n must be in (0, 1e6] and max_cost in [1, 1e9]")
        if not 0.0 <= self.gap < 1.0 or not 0.0 < self.time_limit_s <= 3600.0:
            raise ValueError("gap must be in [0, 1) and time_limit_s in (0, 3600]")


def configurations(gpus_per_node: int, num_nodes: int) -> list[tuple[int, int]]:
    """(nodes, GPUs) Sia may give a job: powers of two within one node, then whole nodes."""
    out = []
    k = 1
    while k < gpus_per_node:
        out.append((1, k))
        k *= 2
    out.append((1, gpus_per_node))
    out += [(n, n * gpus_per_node) for n in range(2, num_nodes + 1)]
    return out


def restart_factor(job: JobInfo) -> float:
    """Sia's (Pollux's) restart factor with the job's own restart cost; 1 while the job is
    younger than one restart."""
    age, cost = max(job.age_s, 0.0), max(job.restart_cost_s, 0.0)
    if age < cost or age + cost <= 0:
        return 1.0
    return max(age - job.restarts * cost, 0.0) / (age + cost)


class SiaPolicy:
    """Sia's configuration program on a homogeneous cluster (see the module docstring)."""

    def __init__(self, seed: int = 0, settings: SiaSettings | None = None) -> None:
        del seed  # deterministic: HiGHS with fixed settings
        self.settings = settings or SiaSettings()
        self._grids = SpeedupGrids()
        self.last_objective: float | None = None

    def costs(
        self,
        job: JobInfo,
        configs: Sequence[tuple[int, int]],
        current: int | None,
        kinds: Sequence[str] | None = None,
    ) -> np.ndarray:
        """``G_jc^p`` per configuration (inf where the job cannot take it); ``kinds``: the
        GPU type of each configuration (None: one type)."""
        s = self.settings
        gpr = max(job.gpus_per_replica, 1)
        cap = min(job.max_replicas, max(2 * job.max_profiled_replicas, 1))
        low = max(job.min_replicas, 1)
        replicas = np.array([g // gpr if g % gpr == 0 else 0 for _, g in configs])
        valid = (replicas >= low) & (replicas <= cap)
        speed = np.ones(len(configs))
        if kinds is not None:
            speed = np.array([job.speed_on(t) if job.may_use(t) else 0.0 for t in kinds])
            valid &= speed > 0
        cost = np.full(len(configs), np.inf)
        if not valid.any():
            return cost
        if job.speedup is linear_speedup:  # no model yet: bootstrap on the smallest config
            kept = np.zeros(len(configs), dtype=bool)
            for t in dict.fromkeys(kinds or [""]):  # of each type
                of_type = valid & (np.array(kinds) == t) if kinds is not None else valid
                if of_type.any():
                    kept[int(np.flatnonzero(of_type)[0])] = True
            valid = kept
            goodput = np.where(valid, speed, 0.0)
        else:
            width = int(replicas[valid].max())
            nodes = max(n for n, _ in configs)
            per_node = max(max(g // n for n, g in configs) // gpr, 1)
            grid = self._grids.grid(job.speedup, nodes, width, per_node)
            goodput = np.zeros(len(configs))
            for c in np.flatnonzero(valid).tolist():
                goodput[c] = grid[min(configs[c][0], replicas[c]), replicas[c]] * speed[c]
        positive = valid & (goodput > 0)
        if not positive.any():
            return cost
        # one type: the smallest valid configuration is 1 (as published); several: the row's
        # smallest goodput over every type (the configurations are no longer in size order)
        base = goodput[positive][0] if kinds is None else goodput[positive].min()
        goodput = goodput / base
        # Moving away from the configuration the job holds costs a restart; a job that holds
        # none has nothing to lose (and a factor of 0 would otherwise starve it for good).
        factor = restart_factor(job) if current is not None else 1.0
        scaled = np.where(np.arange(len(configs)) == current, goodput, goodput * factor)
        with np.errstate(divide="ignore"):
            powered = np.where(scaled > 1e-4, scaled, 0.0) ** s.p
        cost[valid] = np.minimum(powered[valid], s.max_cost)
        return cost

    def optimize(
        self,
        jobs: Sequence[JobInfo],
        nodes: Sequence[NodeInfo],
        previous: Mapping[str, list[str]],
    ) -> Allocation:
        self._grids.new_round()
        if not jobs or not nodes:
            return {}
        if len({n.gpu_type for n in nodes}) > 1 or any(j.gpu_types for j in jobs):
            return self._optimize_types(jobs, nodes, previous)
        per_node = max(n.gpus for n in nodes)
        configs = configurations(per_node, len(nodes))
        names = {n.name for n in nodes}
        pinned = {
            j.name: list(previous[j.name])
            for j in jobs
            if not j.preemptible and previous.get(j.name)
        }
        free = sum(n.gpus for n in nodes) - sum(len(v) for v in pinned.values())
        ordered = sorted(jobs, key=lambda j: (j.submit_order, j.name))
        movable = [j for j in ordered if j.name not in pinned]
        gpus = {g: c for c, (_, g) in enumerate(configs)}
        rows = [
            self.costs(j, configs, self._current(previous.get(j.name), gpus, names))
            for j in movable
        ]
        costs = np.stack(rows) if rows else np.zeros((0, len(configs)))
        chosen = self._solve(costs, np.array([g for _, g in configs]), max(free, 0))
        want = {job.name: configs[c][1] for job, c in zip(movable, chosen, strict=True) if c >= 0}
        kept = {k: v for k, v in previous.items() if k in want}
        allocation = place(want, kept, _free_nodes(nodes, pinned))
        allocation.update(pinned)
        return one_type_per_job(allocation, jobs, nodes)

    def _optimize_types(
        self,
        jobs: Sequence[JobInfo],
        nodes: Sequence[NodeInfo],
        previous: Mapping[str, list[str]],
    ) -> Allocation:
        """Sia's heterogeneous program: configurations per GPU type, a capacity per type."""
        pinned = {
            j.name: list(previous[j.name])
            for j in jobs
            if not j.preemptible and previous.get(j.name)
        }
        free_nodes = _free_nodes(nodes, pinned)
        types = sorted({n.gpu_type for n in nodes})
        of_type = {t: [n for n in free_nodes if n.gpu_type == t] for t in types}
        configs: list[tuple[int, int]] = []
        kinds: list[str] = []
        for t in types:
            here = [n for n in nodes if n.gpu_type == t]
            for config in configurations(max(n.gpus for n in here), len(here)):
                configs.append(config)
                kinds.append(t)
        node_type = {n.name: n.gpu_type for n in nodes}
        index = {(t, g): c for c, (t, (_, g)) in enumerate(zip(kinds, configs, strict=True))}
        movable = [
            j for j in sorted(jobs, key=lambda j: (j.submit_order, j.name)) if j.name not in pinned
        ]
        rows = []
        for job in movable:
            held = previous.get(job.name) or []
            held_types = {node_type.get(n) for n in held}
            current = None
            if held and len(held_types) == 1 and None not in held_types:
                current = index.get((node_type[held[0]], len(held)))
            rows.append(self.costs(job, configs, current, kinds))
        costs = np.stack(rows) if rows else np.zeros((0, len(configs)))
        groups = np.array([types.index(t) for t in kinds])
        free = np.array([max(sum(n.gpus for n in of_type[t]), 0) for t in types])
        chosen = self._solve(costs, np.array([g for _, g in configs]), free, groups)
        allocation: Allocation = {}
        for t in types:
            want = {
                job.name: configs[c][1]
                for job, c in zip(movable, chosen, strict=True)
                if c >= 0 and kinds[c] == t
            }
            kept = {
                k: v
                for k, v in previous.items()
                if k in want and {node_type.get(n) for n in v} == {t}
            }
            allocation.update(place(want, kept, of_type[t]))
        allocation.update(pinned)
        return one_type_per_job(allocation, jobs, nodes)

    @staticmethod
    def _current(held: list[str] | None, gpus: Mapping[int, int], names: set[str]) -> int | None:
        """Index of the configuration the job holds now, if it holds one."""
        if not held or any(n not in names for n in held):
            return None
        return gpus.get(len(held))

    def _solve(
        self,
        costs: np.ndarray,
        config_gpus: np.ndarray,
        free: int | np.ndarray,
        groups: np.ndarray | None = None,
    ) -> list[int]:
        """Chosen configuration index per job (-1: none), optimal within the MIP gap;
        ``groups[c]``: the GPU type of configuration c, ``free[g]``: that type's free GPUs
        (None: one type, ``free`` a number)."""
        s = self.settings
        jobs = costs.shape[0]
        if jobs == 0:
            self.last_objective = 0.0
            return []
        ok = np.isfinite(costs)
        rows, cols = np.nonzero(ok)
        if len(rows) == 0:
            self.last_objective = s.lambda_n * jobs
            return [-1] * jobs
        # x_jc = 1 costs G_jc^p and saves lambda_n (the job is no longer unallocated)
        c = costs[rows, cols] - s.lambda_n
        one_each = coo_array(
            (np.ones(len(rows)), (rows, np.arange(len(rows)))), shape=(jobs, len(rows))
        )
        limits = np.atleast_1d(np.asarray(free, dtype=np.float64))
        group = np.zeros(len(config_gpus), dtype=int) if groups is None else groups
        capacity = np.zeros((len(limits), len(rows)))
        capacity[group[cols], np.arange(len(rows))] = config_gpus[cols]
        result = milp(
            c,
            integrality=np.ones(len(rows)),
            bounds=Bounds(0, 1),
            constraints=[
                LinearConstraint(one_each.tocsr(), -np.inf, 1),
                LinearConstraint(capacity, -np.inf, limits),
            ],
            options={"mip_rel_gap": s.gap, "time_limit": s.time_limit_s, "presolve": True},
        )
        if result.x is None:
            raise RuntimeError(f"Sia's program found no solution: {result.message}")
        x = np.round(result.x).astype(int)
        self.last_objective = float(result.fun) + s.lambda_n * jobs
        chosen = [-1] * jobs
        for k in np.flatnonzero(x):
            chosen[int(rows[k])] = int(cols[k])
        return chosen


def _free_nodes(nodes: Sequence[NodeInfo], pinned: Mapping[str, list[str]]) -> list[NodeInfo]:
    """Nodes as seen after the pinned jobs' GPUs (kept out of the program) are taken."""
    used: dict[str, int] = {}
    for held in pinned.values():
        for node in held:
            used[node] = used.get(node, 0) + 1
    return [replace(n, gpus=max(n.gpus - used.get(n.name, 0), 0)) for n in nodes]
