"""A steady efficient share for long jobs (knob ``long_job_mult``; issue 34's tail).

Shortest-first weights (``1 / R^srpt_power``) give the short jobs GPUs whose extra speedup is
small while a long job (imagenet: ~10^6 one-GPU seconds) waits on 0-2 GPUs through the busy
hours; its work then runs at the end, wide and at a low speedup per GPU, and sets the
makespan and p99 JCT (docs/results.md, "Tail protection: where the p99 and makespan gap comes
from"). Sia keeps such jobs on a few GPUs each through the busy hours (workload-2 under the
peer conditions: three imagenet jobs on 4, 4 and 2 GPUs) and shares the end between them.

The floor: a job whose remaining one-GPU work is at least the longest job's over
``long_job_mult`` and more than ``long_job_mult`` times the median of the tier's other jobs
(those outside the longest's class) is *long*. Its
*efficient scale* is the most replicas at which one more step of GPUs still adds at least
``long_floor_gain`` speedup per GPU, capped at its part of ``long_floor_share`` of the
cluster (split equally between the long jobs). Its first GPUs, up to that count, are weighed
at ``long_floor_weight`` times the tier's largest weight (at least its own): at 1 they outbid
any other job's low-value GPUs but not a short job's efficient ones; far above 1 the floor
acts as a constraint the knapsack meets whenever the GPUs exist. Beyond the floor the job's
own weight applies, so the floor only acts while the job holds less; with
``long_floor_catchup`` it acts only while the job has had fewer GPU-seconds than the floor
would have given it since it arrived.

Measured on workload-1..4 in both simulator modes it moves adl along the same frontier as the
other tail knobs (a shorter makespan and p99 for a longer mean), so it is opt-in
(docs/results.md, "A steady efficient share for long jobs").

Pure functions over numbers; the policy applies them in :mod:`adl.sched.policy_floors`
(``apply_long_floor``) through the same floor fields as the starvation bound
(:mod:`adl.sched.policy_starvation`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence


def long_job_indices(remaining: Sequence[float], mult: float) -> list[int]:
    """Indices of the *long* jobs: those whose remaining work is at least the longest's over
    ``mult`` (the class of the longest job: on the traces imagenet, or yolov3 where no
    imagenet runs), and more than ``mult`` x the median of the jobs outside that class (the
    upper median), so that when every job is of one size (the last few long jobs, alone on
    the cluster) none is long. The median leaves the class out so that the test does not
    turn off whenever the class is half of a quiet cluster's jobs: a floor that came and
    went with the count of short jobs preempted and resumed its job each time.
    ``mult`` below 1 is off."""
    if mult < 1 or len(remaining) < 2:
        return []
    longest = max(remaining)
    others = sorted(r for r in remaining if r * mult < longest)
    if not others:
        return []
    median = others[len(others) // 2]
    return [i for i, r in enumerate(remaining) if r * mult >= longest and r > mult * median]


def efficient_scale(
    speedup_at: Callable[[int], float], cap: int, per_node: int, gain: float
) -> int:
    """The most replicas in ``1..cap`` reached by a step that adds at least ``gain`` speedup
    per replica over the step before it (at least 1). Steps are single replicas within the
    first node and whole nodes beyond it, so the cost of crossing a node boundary is paid by
    the node it buys, not by its first replica alone. Scanned from the top: a curve may dip
    at a boundary and recover, so the answer is the highest step that still pays."""
    if not 0.0 < gain <= 1.0:
        raise ValueError(f"long_floor_gain must be in (0, 1], got {gain}")
    per_node = max(per_node, 1)
    steps = list(range(1, min(per_node, cap) + 1))
    steps += list(range(2 * per_node, cap + 1, per_node))
    if steps[-1] != cap and cap > per_node:
        steps.append(cap)
    for i in range(len(steps) - 1, 0, -1):
        lo, hi = steps[i - 1], steps[i]
        if speedup_at(hi) - speedup_at(lo) >= gain * (hi - lo):
            return hi
    return 1


def floor_count(efficient: int, total_gpus: int, share: float, long_jobs: int, gpr: int) -> int:
    """The floor: the efficient scale, capped at an equal part of ``share`` of the cluster's
    ``total_gpus`` between ``long_jobs`` jobs (in replicas of ``gpr`` GPUs; at least 1)."""
    if long_jobs <= 0:
        raise ValueError(f"a floor needs at least one long job, got {long_jobs}")
    part = int(share * total_gpus / long_jobs) // max(gpr, 1)
    return max(min(efficient, part), 1)


def floor_weight(weight: float, top: float, factor: float) -> float:
    """The weight of a long job's floor GPUs: ``factor`` x the tier's largest weight ``top``,
    never below the job's own."""
    return max(weight, factor * top)


def behind_floor(attained_gpu_s: float, age_s: float, floor_gpus: int, hold_s: float = 0.0) -> bool:
    """``long_floor_catchup``: whether a job has had fewer GPU-seconds than ``floor_gpus``
    held since it arrived ``age_s`` ago would have given it, plus ``hold_s`` seconds of that
    floor (``long_floor_hold_s``, for a job that holds GPUs: a floor it is on stays on until
    it is that far ahead, rather than flapping off and on around even)."""
    return attained_gpu_s < floor_gpus * (max(age_s, 0.0) + max(hold_s, 0.0))
