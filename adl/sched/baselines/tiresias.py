"""Tiresias (NSDI'19) as in the published Pollux comparison: two-level discretized LAS, gang
scheduled, non-elastic.

Each job asks for exactly its workload ``num_replicas`` (all or nothing; ``JobInfo.max_replicas``
carries it). New jobs join queue 0 in arrival order; a job moves to queue 1 once the time it has
been marked running, times its GPUs, reaches 16 GPU-hours. Every round both queues are walked in
order: a job runs if its GPUs still fit in the cluster total, else it is pending and loses its
GPUs. Running jobs keep their GPUs; those without any are placed on the nodes with the most free
GPUs. Time is measured from the jobs' ages, so the policy needs no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from adl.sched.baselines.placement import free_gpus, place_most_free
from adl.sched.gpu_types import one_type_per_job
from adl.sched.types import Allocation, JobInfo, NodeInfo

QUEUE_THRESHOLD_GPU_S = 16 * 3600


class TiresiasPolicy:
    """Two-queue discretized least-attained-service, all-or-nothing."""

    def __init__(self, seed: int = 0, threshold_gpu_s: float = QUEUE_THRESHOLD_GPU_S) -> None:
        del seed  # deterministic
        self.threshold_gpu_s = threshold_gpu_s
        self.queues: tuple[list[str], list[str]] = ([], [])
        self.running: dict[str, bool] = {}
        self.executed_s: dict[str, int] = {}  # seconds marked running while in queue 0
        self._last_age: dict[str, float] = {}

    def optimize(
        self,
        jobs: Sequence[JobInfo],
        nodes: Sequence[NodeInfo],
        previous: Mapping[str, list[str]],
    ) -> Allocation:
        infos = {j.name: j for j in sorted(jobs, key=lambda j: j.submit_order)}
        self._forget_finished(infos)
        q0, q1 = self.queues
        for name, info in infos.items():
            if name not in self.running:
                self.running[name] = False
                self.executed_s[name] = 0
                self._last_age[name] = info.age_s
                q0.append(name)
        for name, info in infos.items():
            elapsed = int(info.age_s - self._last_age[name])
            self._last_age[name] = info.age_s
            if self.running[name]:
                self.executed_s[name] += elapsed
                if name in q0 and self.executed_s[name] * info.max_replicas >= self.threshold_gpu_s:
                    q0.remove(name)
                    q1.append(name)
        allocation = {k: list(v) for k, v in previous.items() if k in infos and v}
        budget = sum(n.gpus for n in nodes)
        for name in (*q0, *q1):
            want = infos[name].max_replicas
            if want <= budget:
                self.running[name] = True
                budget -= want
            else:
                self.running[name] = False
                allocation.pop(name, None)
        free = free_gpus(nodes, allocation)
        for name in (*q0, *q1):
            if self.running[name] and not allocation.get(name):
                allocation[name] = place_most_free(infos[name].max_replicas, free)
        return one_type_per_job(allocation, jobs, nodes, whole=True)

    def _forget_finished(self, infos: Mapping[str, JobInfo]) -> None:
        for q in self.queues:
            q[:] = [n for n in q if n in infos]
        for d in (self.running, self.executed_s, self._last_age):
            for name in [n for n in d if n not in infos]:
                del d[name]
