"""Optimus (EuroSys'18) with an oracle, as in the published Pollux comparison.

Every job keeps its workload batch size; its remaining optimizer steps and its true step time at
any replica count are known exactly (from the simulator's :class:`SimulatorOracle`, which a real
cluster cannot offer). Each job first gets 1 GPU while GPUs last (arrival order); then GPUs go
one at a time to the job with the largest ``(t(K) - t(K+1)) * remaining_steps``, with ``t(K)``
the step time at ``K`` replicas packed 4 per node and ``K`` capped by ``JobInfo.max_replicas``
(batch / smallest micro-batch). Jobs whose replica count did not change keep their placement;
the others are placed greedily on the nodes with the most free GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from adl.sched.baselines.placement import free_gpus, place_most_free
from adl.sched.gpu_types import one_type_per_job
from adl.sched.types import Allocation, JobInfo, NodeInfo


class StepOracle(Protocol):
    """The trace knowledge Optimus+Oracle needs (the simulator's ``SimulatorOracle`` has it):
    a Protocol, so that the baseline does not import the simulator."""

    def step_time(self, name: str, replicas: int) -> float: ...

    def remaining_steps(self, name: str) -> float: ...


class OptimusOraclePolicy:
    """Marginal-gain GPU allocation driven by exact remaining work (simulation only)."""

    def __init__(self, seed: int = 0) -> None:
        del seed  # deterministic
        self.oracle: StepOracle | None = None
        self._step_cache: dict[tuple[str, int], float] = {}

    def bind_oracle(self, oracle: StepOracle) -> None:
        self.oracle = oracle
        self._step_cache.clear()

    def _t(self, name: str, replicas: int) -> float:
        key = (name, replicas)
        hit = self._step_cache.get(key)
        if hit is None:
            assert self.oracle is not None
            hit = self._step_cache[key] = self.oracle.step_time(name, replicas)
        return hit

    def _gain(self, job: JobInfo, k: int, remaining: float, gpus_left: int) -> float:
        if k + 1 > job.max_replicas or gpus_left < 1:
            return 0.0
        return (self._t(job.name, k) - self._t(job.name, k + 1)) * remaining

    def replica_counts(self, jobs: Sequence[JobInfo], total_gpus: int) -> dict[str, int]:
        """How many GPUs each job gets this round (pure given the oracle)."""
        if self.oracle is None:
            raise RuntimeError("Optimus+Oracle needs the simulator's oracle (bind_oracle)")
        ordered = sorted(jobs, key=lambda j: j.submit_order)
        remaining = {j.name: self.oracle.remaining_steps(j.name) for j in ordered}
        count: dict[str, int] = {}
        gain: dict[str, float] = {}
        left = total_gpus
        for job in ordered:
            if left < 1 or job.max_replicas < 1:
                count[job.name], gain[job.name] = 0, 0.0
                continue
            count[job.name] = 1
            left -= 1
            gain[job.name] = self._gain(job, 1, remaining[job.name], left)
        by_name = {j.name: j for j in ordered}
        while left > 0 and gain and max(gain.values()) > 0:
            name = max(gain, key=lambda n: gain[n])  # first of equals: arrival order
            count[name] += 1
            gain[name] = self._gain(by_name[name], count[name], remaining[name], left)
            left -= 1
        return count

    def optimize(
        self,
        jobs: Sequence[JobInfo],
        nodes: Sequence[NodeInfo],
        previous: Mapping[str, list[str]],
    ) -> Allocation:
        count = self.replica_counts(jobs, sum(n.gpus for n in nodes))
        keep = {
            name: list(held)
            for name, held in previous.items()
            if held and count.get(name, 0) == len(held)
        }
        free = free_gpus(nodes, keep)
        allocation = dict(keep)
        for job in sorted(jobs, key=lambda j: (count[j.name], j.submit_order)):
            k = count[job.name]
            if k > 0 and job.name not in allocation:
                allocation[job.name] = place_most_free(k, free)
        return one_type_per_job(allocation, jobs, nodes)
