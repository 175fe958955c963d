"""The genetic search of Pollux (OSDI'21, section 4.2), vectorised over a population.

An individual is a job x node matrix of replica counts; a population is a ``(P, J, N)`` integer
array. Jobs are in Pollux's order (pinned first, then least attained service first), which is
also their priority whenever a repair has to take replicas away. The operators, as the paper
describes them:

- **crossover**: single point over jobs: a child takes the first jobs' rows from one parent
  and the rest from the other;
- **mutation**: a job's row is reset to its current allocation (probability 0.1), or some of
  its entries zeroed (0.1, then 0.1 per entry), and every node with free GPUs grows about one
  random job there (and about one of the jobs already on it) to a random count up to the node's
  capacity: the search mostly tries giving more, and the repair decides who keeps what;
- **repair**: at most one distributed job per node (interference avoidance: the first in job
  order keeps its replicas there), no job above its replica cap (trimmed on randomly ordered
  nodes), no node over capacity (trimmed in job order), and jobs below their minimum get none.

Fitness is the power mean (p = -1) of the jobs' speedups over their fair share, a job that is
moved scaled by its restart factor; see :class:`PolluxProblem`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

#: replica counts; int32 halves the memory traffic of every operator (counts stay < 2**15)
Pop = NDArray[np.int32]


@dataclass(frozen=True)
class PolluxProblem:
    """Everything the operators and the fitness need, for one round (arrays by job order)."""

    base: Pop  # (J, N) current allocation
    per_node_max: Pop  # (J, N) replicas of job j that fit on node n alone
    node_gpus: Pop  # (N,)
    gpus_per_replica: Pop  # (J,)
    cap: Pop  # (J,) most replicas a job may get
    min_replicas: Pop  # (J,)
    pinned: NDArray[np.bool_]  # (J,) non-preemptible jobs that hold GPUs: never moved
    grids: NDArray[np.float64]  # (J, N + 1, K + 1) speedup at (nodes, replicas)
    fair_speedup: NDArray[np.float64]  # (J,) speedup at the job's fair share
    restart_factor: NDArray[np.float64]  # (J,) multiplies the speedup of a moved job
    scale: float  # speedups are scaled so that one node's worth of GPUs counts about 1
    zero_speedup: float = 1e-3  # added to every scaled speedup: a job without GPUs is ~1/eps
    p: float = -1.0

    def fitness(self, pop: Pop) -> NDArray[np.float64]:
        """Power mean of the jobs' scaled, restart-discounted speedups; one value per
        individual (higher is better)."""
        replicas = pop.sum(axis=2)
        nodes = np.count_nonzero(pop, axis=2)
        jobs = np.arange(pop.shape[1])[None, :]
        speedup = self.grids[jobs, np.minimum(nodes, self.grids.shape[1] - 1), replicas]
        speedup = speedup / self.fair_speedup * self.scale
        moved = np.any(pop != self.base[None], axis=2)
        speedup = np.where(moved, speedup * self.restart_factor, speedup)
        shifted = speedup + self.zero_speedup
        if self.p == 0:
            return np.exp(np.mean(np.log(shifted), axis=1))
        return np.mean(shifted**self.p, axis=1) ** (1.0 / self.p)


def crossover(parents_a: Pop, parents_b: Pop, rng: np.random.Generator) -> Pop:
    """Two children per pair of parents, swapping job rows after a random point."""
    pairs, jobs = parents_a.shape[:2]
    point = rng.integers(0, max(jobs, 1), size=(pairs, 1))
    first = (np.arange(jobs)[None, :] < point)[..., None]
    return np.concatenate(
        [np.where(first, parents_a, parents_b), np.where(first, parents_b, parents_a)]
    )


def mutate(pop: Pop, problem: PolluxProblem, rng: np.random.Generator) -> Pop:
    size, jobs, _ = pop.shape
    reset = rng.random((size, jobs)) < 0.1
    pop = np.where(reset[..., None], problem.base[None], pop)
    thin = rng.random((size, jobs)) < 0.1
    if thin.any():
        rows = pop[thin]
        rows[rng.random(rows.shape) < 0.1] = 0
        pop[thin] = rows
    gpr = problem.gpus_per_replica[None, :, None]
    free = problem.node_gpus[None, :] - (pop * gpr).sum(axis=1)  # (P, N)
    fits = free[:, None, :] >= gpr  # (P, J, N)
    p_any = fits / np.maximum(fits.sum(axis=1, keepdims=True), 1)
    on = fits & (pop > 0)
    p_on = on / np.maximum(on.sum(axis=1, keepdims=True), 1)
    grow = np.nonzero(rng.random(pop.shape) < p_any + p_on - p_any * p_on)
    # a uniformly random count between the current one and the node's capacity
    upper = problem.per_node_max[grow[1], grow[2]]
    low = np.minimum(pop[grow], upper)
    pop[grow] = low + (rng.random(len(low)) * (upper - low + 1)).astype(pop.dtype)
    return pop


def repair(pop: Pop, problem: PolluxProblem, rng: np.random.Generator) -> Pop:
    pop = np.where(problem.pinned[None, :, None], problem.base[None], pop)
    pop = np.minimum(pop, problem.per_node_max[None])
    # At most one distributed job per node: later distributed jobs leave the node.
    distributed = np.count_nonzero(pop, axis=2) > 1
    on_node = (pop > 0) & distributed[..., None]
    pop = np.where(np.cumsum(on_node, axis=1) > 1, 0, pop)
    # Replica caps, trimmed on randomly ordered nodes (which of a job's nodes it keeps); only
    # the rows over their cap are shuffled (a sort per row is the costliest step here).
    over = pop.sum(axis=2) > problem.cap[None, :]
    if over.any():
        rows = pop[over]  # (R, N)
        shuffle = np.argsort(rng.random(rows.shape), axis=1)
        shuffled = np.take_along_axis(rows, shuffle, axis=1)
        cap = np.broadcast_to(problem.cap[None, :], over.shape)[over][:, None]
        shuffled = np.diff(np.minimum(np.cumsum(shuffled, axis=1), cap), axis=1, prepend=0)
        trimmed = np.empty_like(rows)
        np.put_along_axis(trimmed, shuffle, shuffled, axis=1)
        pop = pop.copy()
        pop[over] = trimmed
    # Node capacity, in job order: earlier jobs keep their GPUs.
    gpr = problem.gpus_per_replica[None, :, None]
    used = np.minimum(np.cumsum(pop * gpr, axis=1), problem.node_gpus[None, None, :])
    pop = np.diff(used, axis=1, prepend=0) // gpr
    short = pop.sum(axis=2) < problem.min_replicas[None, :]
    return np.where(short[..., None], 0, pop)


def tournament(fitness: NDArray[np.float64], count: int, rng: np.random.Generator) -> Pop:
    """Indices of ``count`` parents, each the fitter of two drawn at random."""
    a = rng.integers(0, len(fitness), size=count)
    b = rng.integers(0, len(fitness), size=count)
    return np.where(fitness[a] >= fitness[b], a, b)


def unique_rows(
    pop: Pop, fitness: NDArray[np.float64], weights: NDArray[np.int64]
) -> tuple[Pop, NDArray[np.float64]]:
    """Drop duplicate individuals (keeps the population diverse), first occurrence kept.

    Individuals are compared by a random 64-bit linear hash of their entries (``weights``,
    one per entry; wrapping arithmetic): a sort of P numbers instead of P matrices."""
    keys = pop.reshape(len(pop), -1) @ weights
    _, first = np.unique(keys, return_index=True)
    first.sort()
    return pop[first], fitness[first]


def evolve(
    start: Pop,
    problem: PolluxProblem,
    rng: np.random.Generator,
    *,
    population: int,
    generations: int,
) -> tuple[Pop, NDArray[np.float64]]:
    """Run the search from ``start`` (repaired first); returns the final population sorted
    best first, with its fitness."""
    pop = repair(start, problem, rng)
    fit = problem.fitness(pop)
    weights = rng.integers(-(2**62), 2**62, size=pop[0].size, dtype=np.int64)
    pop, fit = unique_rows(pop, fit, weights)
    pairs = max(population // 2, 1)
    for _ in range(generations):
        a = pop[tournament(fit, pairs, rng)]
        b = pop[tournament(fit, pairs, rng)]
        children = repair(mutate(crossover(a, b, rng), problem, rng), problem, rng)
        pop = np.concatenate([pop, children])
        fit = np.concatenate([fit, problem.fitness(children)])
        pop, fit = unique_rows(pop, fit, weights)
        order = np.argsort(-fit, kind="stable")[:population]
        pop, fit = pop[order], fit[order]
    order = np.argsort(-fit, kind="stable")
    return pop[order], fit[order]
