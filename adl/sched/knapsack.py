"""The exact replica counts of the adl policy: a multiple-choice knapsack over GPUs.

Each job offers a value for every replica count ``0..K`` (its packed speedup times its weight,
restart penalty included; ``-inf`` below its minimum); a count of ``k`` replicas costs
``k x gpus_per_replica`` GPUs. The answer maximises the total value within the free GPUs.
Dynamic programming over GPUs, one job at a time: ``O(jobs x counts x GPUs)`` numpy work, which
is why the policy bounds it by ``dp_max_cells`` (jobs x (GPUs + 1)).

Pure: numbers in, counts out. The policy places the counts (:mod:`adl.sched.placement`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray


def best_counts(
    values: Sequence[NDArray[np.float64]], gpus_per_replica: Sequence[int], free: int
) -> list[int]:
    """Replica count per job maximising ``sum values[j][count_j]`` subject to
    ``sum count_j x gpus_per_replica[j] <= free`` (``values[j][0]`` is taken as 0: a job may
    always get nothing). Ties keep the smaller counts of the later jobs."""
    if free < 0:
        raise ValueError("free GPUs must be >= 0")
    width = free + 1
    best = np.full(width, -np.inf)
    best[0] = 0.0
    choices: list[NDArray[np.int32]] = []
    for job_values, gpr in zip(values, gpus_per_replica, strict=True):
        new = best.copy()  # count 0
        choice = np.zeros(width, dtype=np.int32)
        worth = 0.0
        per = max(gpr, 1)
        for count, value in enumerate(np.asarray(job_values).tolist()):
            if count == 0 or value <= worth:
                continue  # dominated: a smaller count is worth as much
            worth = value
            gpus = count * per
            if gpus > free:
                break
            # Capacities below ``gpus`` cannot hold the count: only the tail is compared, in
            # place (the arithmetic and the order of counts are what decide ties)
            cand = best[: width - gpus] + worth
            tail = new[gpus:]
            better = cand > tail + 1e-15
            np.copyto(tail, cand, where=better)
            np.copyto(choice[gpus:], count, where=better)
        best = new
        choices.append(choice)
    c = int(np.argmax(best))
    counts = [0] * len(choices)
    for pos in range(len(choices) - 1, -1, -1):
        counts[pos] = int(choices[pos][c])
        c -= counts[pos] * max(gpus_per_replica[pos], 1)
    return counts
