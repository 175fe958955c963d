"""Pollux (OSDI'21, "Pollux: Co-adaptive Cluster Scheduling for Goodput-Optimized Deep
Learning"): its scheduling policy, with its own genetic search, replayed rather than quoted.

Each round Pollux maximizes the power mean (p = -1) of every active job's speedup, where a job's
speedup is its goodput at the allocation over its goodput at its fair share (an equal share
of the cluster's GPUs, ``ceil(G / J)`` replicas packed on as few nodes as they fit), and the
speedup of a job whose allocation changes is scaled by Pollux's restart factor
``max(T - S * d, 0) / (T + d)`` (age ``T``, restarts so far ``S``, restart delay ``d``: what
is left of its life spent training if it restarts once more). A job without GPUs counts as
speedup 0 (plus a small constant), so running every job that fits comes first. Speedups are
the job's own fitted goodput model (batch size re-picked per allocation); a job may get at
most twice the replicas it has profiled (``max_profiled_replicas``), so jobs ramp up 1, 2, 4,
... Remaining work is not used at all.

The search is Pollux's genetic algorithm over job x node allocation matrices
(:mod:`adl.sched.baselines.pollux_genetic`): population 100, 100 generations, seeded with last
round's final population (so the search continues across rounds) and the current allocation.
The paper used pymoo's NSGA-II with a second objective (cluster utility, for autoscaling); on a
fixed-size cluster only the best power mean is ever used, so this is a single-objective
(mu + lambda) search with binary tournaments and duplicates removed.

Pollux's allocator also places a job the moment it arrives, first fit on the first node with
room for its minimum replicas (at least one), until the next optimization. The published
simulator never did (new jobs wait for the next 60 s round), so it is off by default
(``PolluxSettings.first_fit_arrivals``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from adl.sched.baselines.pollux_genetic import PolluxProblem, Pop, evolve
from adl.sched.baselines.speedup_grid import SpeedupGrids
from adl.sched.gpu_types import one_type_per_job
from adl.sched.types import Allocation, JobInfo, NodeInfo


@dataclass(frozen=True)
class PolluxSettings:
    population: int = 100
    generations: int = 100
    p: float = -1.0  # power-mean exponent: -1 as in the paper
    #: normalize speedups by the job's fair share (the paper); False: by one GPU
    fair_share: bool = True
    #: place each job first fit when it is first seen, before the search (Pollux's allocator
    #: between rounds; the published simulator never did)
    first_fit_arrivals: bool = False
    #: see GPUs only, not their types (the published Pollux): a job may span types and the
    #: slowest paces it; False: its answer passes the shared one-type rule like every policy's
    type_agnostic: bool = False

    def __post_init__(self) -> None:
        if not 2 <= self.population <= 10_000 or not 0 <= self.generations <= 10_000:
            raise ValueError("population must be 2..10000 and generations 0..10000")
        if not -10.0 <= self.p <= 1.0:
            raise ValueError("p must be in [-10, 1]")


def restart_factor(job: JobInfo) -> float:
    """What is left of a moved job's speedup: Pollux's ``max(T - S d, 0) / (T + d)``."""
    age, delay = max(job.age_s, 0.0), max(job.restart_cost_s, 0.0)
    if age + delay <= 0:
        return 1.0
    return max(age - job.restarts * delay, 0.0) / (age + delay)


def first_fit(job: JobInfo, nodes: Sequence[NodeInfo], free: Mapping[str, int]) -> list[str]:
    """Pollux's placement of an arriving job: its minimum replicas (at least one) on the first
    node, non-preemptible nodes first, that has room for all of them; [] if none has."""
    want = max(job.min_replicas, 1)
    gpr = max(job.gpus_per_replica, 1)
    for node in sorted(nodes, key=lambda n: (n.preemptible, n.name)):
        if free.get(node.name, 0) // gpr >= want:
            return [node.name] * want
    return []


class PolluxPolicy:
    """Pollux's power-mean objective with its restart factor, solved by its genetic search."""

    def __init__(self, seed: int = 0, settings: PolluxSettings | None = None) -> None:
        self.settings = settings or PolluxSettings()
        self._rng = np.random.default_rng(seed)
        self._grids = SpeedupGrids()
        self._seen: set[str] = set()
        # last round's final population, with the job and node names of its axes
        self._population: Pop | None = None
        self._pop_jobs: list[str] = []
        self._pop_nodes: list[str] = []
        self.last_fitness: tuple[float, float] = (0.0, 0.0)  # (start, best) of the last round

    def optimize(
        self,
        jobs: Sequence[JobInfo],
        nodes: Sequence[NodeInfo],
        previous: Mapping[str, list[str]],
    ) -> Allocation:
        self._grids.new_round()
        nodes = sorted(nodes, key=lambda n: (n.preemptible, n.name))
        if not jobs or not nodes:
            return {}
        previous = self._with_arrivals(jobs, nodes, previous)
        ordered = sorted(
            jobs,
            key=lambda j: (
                not (not j.preemptible and bool(previous.get(j.name))),
                j.attained_service_s,
                j.submit_order,
                j.name,
            ),
        )
        problem = self._problem(ordered, nodes, previous)
        start = self._start(ordered, nodes, problem.base)
        start_fit = float(problem.fitness(start).max())
        s = self.settings
        pop, fit = evolve(
            start, problem, self._rng, population=s.population, generations=s.generations
        )
        self._population = pop
        self._pop_jobs = [j.name for j in ordered]
        self._pop_nodes = [n.name for n in nodes]
        self.last_fitness = (start_fit, float(fit[0]))
        best = pop[0]
        answer = {
            job.name: [node.name for n, node in enumerate(nodes) for _ in range(best[j, n])]
            for j, job in enumerate(ordered)
            if best[j].sum() > 0
        }
        if self.settings.type_agnostic:
            return answer
        return one_type_per_job(answer, jobs, nodes)

    # ------------------------------------------------------------------ round set-up

    def _with_arrivals(
        self, jobs: Sequence[JobInfo], nodes: Sequence[NodeInfo], previous: Mapping[str, list[str]]
    ) -> Mapping[str, list[str]]:
        names = {j.name for j in jobs}
        self._seen &= names
        arrivals = [j for j in jobs if j.name not in self._seen]
        self._seen |= names
        if not self.settings.first_fit_arrivals or not arrivals:
            return previous
        out = {k: list(v) for k, v in previous.items() if k in names}
        free = {n.name: n.gpus for n in nodes}
        for held in out.values():
            for node in held:
                free[node] = free.get(node, 0) - 1
        for job in sorted(arrivals, key=lambda j: j.submit_order):
            if out.get(job.name):
                continue
            placed = first_fit(job, nodes, free)
            if placed:
                out[job.name] = placed
                free[placed[0]] -= len(placed) * max(job.gpus_per_replica, 1)
        return out

    def _problem(
        self, jobs: list[JobInfo], nodes: list[NodeInfo], previous: Mapping[str, list[str]]
    ) -> PolluxProblem:
        index = {n.name: i for i, n in enumerate(nodes)}
        node_gpus = np.array([max(n.gpus, 0) for n in nodes], dtype=np.int32)
        gpr = np.array([max(j.gpus_per_replica, 1) for j in jobs], dtype=np.int32)
        per_node_max = node_gpus[None, :] // gpr[:, None]
        base = np.zeros((len(jobs), len(nodes)), dtype=np.int32)
        for j, job in enumerate(jobs):
            for node in previous.get(job.name, []):
                if node in index:
                    base[j, index[node]] += 1
        cap = np.array(
            [
                max(min(j.max_replicas, max(2 * j.max_profiled_replicas, 1)), 0)
                if j.max_replicas > 0
                else 0
                for j in jobs
            ],
            dtype=np.int32,
        )
        cap = np.minimum(cap, per_node_max.sum(axis=1))
        total = int(node_gpus.sum())
        per_node = max(int(node_gpus.max()), 1)
        fair = max(math.ceil(total / len(jobs)), 1)  # GPUs
        width = max(int(cap.max()), fair, 1)
        grids = np.stack(
            [
                self._grids.grid(job.speedup, len(nodes), width, per_node // gpr[j])
                for j, job in enumerate(jobs)
            ]
        )
        fair_speedup = np.ones(len(jobs))
        if self.settings.fair_share:
            for j in range(len(jobs)):
                replicas = max(fair // int(gpr[j]), 1)
                nodes_needed = min(-(-replicas // max(per_node // int(gpr[j]), 1)), len(nodes))
                row = grids[j, nodes_needed, : replicas + 1]
                positive = np.flatnonzero(row > 0)
                # beyond what the model can run (batch limits): its largest feasible count
                fair_speedup[j] = row[positive[-1]] if len(positive) else 1.0
        return PolluxProblem(
            base=base,
            per_node_max=per_node_max,
            node_gpus=node_gpus,
            gpus_per_replica=gpr,
            cap=cap,
            min_replicas=np.array([max(j.min_replicas, 0) for j in jobs], dtype=np.int32),
            pinned=np.array([not j.preemptible and base[i].sum() > 0 for i, j in enumerate(jobs)]),
            grids=grids,
            fair_speedup=np.maximum(fair_speedup, 1e-9),
            restart_factor=np.array([restart_factor(j) for j in jobs]),
            # a node's worth of GPUs counts about 1 (Pollux's dominant-share scaling), which
            # sets how much the constant added to every speedup weighs
            scale=float(len(nodes)) / max(total, 1),
            p=self.settings.p,
        )

    def _start(self, jobs: list[JobInfo], nodes: list[NodeInfo], base: Pop) -> Pop:
        """Last round's final population mapped onto this round's jobs and nodes (new jobs
        get no GPUs, finished jobs' rows are dropped), plus the current allocation."""
        if self._population is None:
            return base[None].copy()
        prev_jobs = {name: i for i, name in enumerate(self._pop_jobs)}
        prev_nodes = {name: i for i, name in enumerate(self._pop_nodes)}
        pop = np.zeros((len(self._population), len(jobs), len(nodes)), dtype=np.int32)
        dst_j = [j for j, job in enumerate(jobs) if job.name in prev_jobs]
        src_j = [prev_jobs[jobs[j].name] for j in dst_j]
        dst_n = [n for n, node in enumerate(nodes) if node.name in prev_nodes]
        src_n = [prev_nodes[nodes[n].name] for n in dst_n]
        if dst_j and dst_n:
            pop[:, np.array(dst_j)[:, None], np.array(dst_n)[None, :]] = self._population[
                :, np.array(src_j)[:, None], np.array(src_n)[None, :]
            ]
        return np.concatenate([base[None], pop])


class PolluxTypeAgnosticPolicy(PolluxPolicy):
    """Pollux as published on a mixed cluster: it counts GPUs and never looks at their type, so
    its placements may mix types (the slowest type paces such a job)."""

    def __init__(self, seed: int = 0, settings: PolluxSettings | None = None) -> None:
        super().__init__(seed, settings or PolluxSettings(type_agnostic=True))
