"""A bound on starvation (knob ``starve_bound_s``): a guaranteed share for jobs left behind.

Shortest-first weights (``1 / R^srpt_power``) leave a long job (imagenet: ~10^6 one-GPU
seconds) without GPUs for hours while shorter work keeps arriving, and its aging
(``(1 + age / R)^fairness``) is counted against that same huge ``R``, so it hardly ages. The
long job's work then all runs at the end, on a quiet cluster, at wide and inefficient sizes:
a longer makespan and p99 JCT (docs/results.md, "Tail protection").

The bound measures how far a job has fallen behind an equal share of the cluster: its
*deficit* is its age less ``attained GPU-seconds / equal-share GPUs``, the time an equal share
would have needed to give it what it had. Past the bound, the job's first GPUs, up to an equal
share, are weighed with a boosted weight (``deficit / bound`` times its own, capped at the
largest weight in the tier), so it gets at least an equal share once it has been behind
longer than the bound, and keeps it while it stays behind; beyond that share its own weight
applies.

Pure functions over numbers; the policy applies them in :mod:`adl.sched.policy_floors`
(``apply_starvation_floor``) and ``_value`` (:mod:`adl.sched.policy_moves`).
"""

from __future__ import annotations


def deficit_s(age_s: float, attained_gpu_s: float, share_gpus: float) -> float:
    """Seconds a job is behind an equal share of ``share_gpus`` GPUs: its age less the time
    that share would have taken to give it ``attained_gpu_s`` GPU-seconds (0 when ahead)."""
    if share_gpus <= 0:
        raise ValueError(f"an equal share needs a positive GPU count, got {share_gpus}")
    return max(age_s - max(attained_gpu_s, 0.0) / share_gpus, 0.0)


def boosted_weight(weight: float, deficit: float, bound_s: float, top: float) -> float:
    """The weight of a job's first GPUs (up to an equal share): its own ``weight`` within the
    bound, ``deficit / bound`` times it beyond, never above ``top`` (the tier's largest
    weight) nor below its own."""
    if bound_s <= 0 or deficit <= bound_s:
        return weight
    return max(min(weight * deficit / bound_s, top), weight)
