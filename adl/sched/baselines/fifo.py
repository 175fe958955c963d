"""Plain FIFO: non-preemptive, gang scheduled, strict arrival order (head-of-line blocking)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from adl.sched.baselines.placement import free_gpus, place_most_free
from adl.sched.gpu_types import one_type_per_job
from adl.sched.types import Allocation, JobInfo, NodeInfo


class FifoPolicy:
    """Each job gets exactly ``max_replicas`` GPUs in arrival order and keeps them to the end;
    a job that does not fit blocks everyone behind it."""

    def __init__(self, seed: int = 0) -> None:
        del seed  # deterministic

    def optimize(
        self,
        jobs: Sequence[JobInfo],
        nodes: Sequence[NodeInfo],
        previous: Mapping[str, list[str]],
    ) -> Allocation:
        names = {j.name for j in jobs}
        allocation = {k: list(v) for k, v in previous.items() if k in names and v}
        free = free_gpus(nodes, allocation)
        for job in sorted(jobs, key=lambda j: j.submit_order):
            if job.name in allocation:
                continue
            want = min(job.max_replicas, sum(n.gpus for n in nodes))
            if want > sum(free.values()):
                break
            allocation[job.name] = place_most_free(want, free)
        return one_type_per_job(allocation, jobs, nodes, whole=True)
