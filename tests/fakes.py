"""The test kit's stand-in policies (one place; every test package imports them from here).

They are test doubles for the scheduling policy only: the round, the lifecycle and the backends
around them are the production code."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from adl.sched.types import Allocation, JobInfo, NodeInfo


class NoPolicy:
    """Gives nothing to anyone."""

    def optimize(
        self, jobs: Sequence[JobInfo], nodes: Sequence[NodeInfo], previous: Mapping[str, list[str]]
    ) -> Allocation:
        return {}


class EveryoneOneGpu(NoPolicy):
    """One GPU of ``n1`` for every job."""

    def optimize(
        self, jobs: Sequence[JobInfo], nodes: Sequence[NodeInfo], previous: Mapping[str, list[str]]
    ) -> Allocation:
        return {j.name: ["n1"] for j in jobs}


class GreedyPolicy:
    """Gives each job, oldest first, up to its max replicas from a pool of slots; records every
    call (the JobInfos, nodes and previous allocation it was given)."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[JobInfo], list[NodeInfo], dict[str, list[str]]]] = []

    def optimize(
        self, jobs: Sequence[JobInfo], nodes: Sequence[NodeInfo], previous: Mapping[str, list[str]]
    ) -> Allocation:
        self.calls.append((list(jobs), list(nodes), dict(previous)))
        free = [n.name for n in nodes for _ in range(n.gpus)]
        out: Allocation = {}
        for job in sorted(jobs, key=lambda j: j.submit_order):
            take = min(job.max_replicas, len(free))
            out[job.name], free = free[:take], free[take:]
        return out


class FixedPolicy:
    """Gives each job ``replicas[name]`` slots of the first node (default its minimum); tests
    change the dict (keyed by the job's name without its namespace)."""

    def __init__(self) -> None:
        self.replicas: dict[str, int] = {}

    def optimize(
        self, jobs: Sequence[JobInfo], nodes: Sequence[NodeInfo], previous: Mapping[str, list[str]]
    ) -> Allocation:
        out = {}
        free = sum(n.gpus for n in nodes)
        for j in jobs:
            want = min(self.replicas.get(j.name.split("/")[1], max(j.min_replicas, 1)), free)
            out[j.name] = [nodes[0].name] * want
            free -= want
        return out
