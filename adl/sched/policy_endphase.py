"""The end phase (knob ``end_phase_mult``): when only long jobs are left, finish them together.

Shortest-first weights (``1 / R^srpt_power``) keep ranking the long jobs against each other
once nothing else runs: on workload-2 under the peer conditions the three imagenet jobs are
left alone for hours, and adl gives the shortest of them 48 of 64 GPUs (then 61) while the
last waits on few or none, so they finish one after another and the last one ends alone on
the whole cluster, at a low speedup per GPU. Sia holds them on about 20 GPUs each and two
finish together (docs/results.md, "A steady efficient share for long jobs"). With speedups
that flatten, running the jobs side by side is the cheaper way through the same work, and the
makespan is shortest when they all end at once.

The end phase is online: no future arrival is known, so it holds only while every job of the
tier already holds GPUs (none waits), the youngest is older than ``restart_horizon_s`` (no
arrival for that long), and every job's size (GPU-seconds so far plus remaining one-GPU work)
is at least the largest's over ``end_phase_mult`` (all are of the largest job's kind; a short
job running or arriving ends it; counting the work done keeps a job nearing its end in the
phase). Then each job's *balanced* count is found by water-filling: every job starts on one
step (a replica within the first node, whole nodes beyond), and each next step goes to the job
with the largest predicted JCT (its age plus its remaining work over its speedup), while that
step still makes it faster and GPUs are left: the largest JCT of the jobs left, which sets the
tail, is as small as whole steps allow. Each job's predicted JCT stays put while it runs at
its count (it ages one second a second and its predicted time left falls as fast), so the
counts hold from round to round until a model or a job changes.

Pure functions over numbers; the policy applies them in :mod:`adl.sched.policy_floors`
(``apply_end_phase``): the end-phase jobs share one weight (no shortest-first among them) and
are softly capped at their balanced counts (beyond them a replica is worth a hundredth, as with
``efficiency_floor``).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

#: a job's speedup at a replica count
SpeedupAt = Callable[[int], float]


def in_end_phase(
    sizes: Sequence[float],
    holding: Sequence[bool],
    ages: Sequence[float],
    mult: float,
    quiet_s: float,
) -> bool:
    """Whether the round is in the end phase: at least two jobs, every one holding GPUs, the
    youngest older than ``quiet_s`` (no arrival for that long), and every one's size (its
    GPU-seconds so far plus its remaining one-GPU work: a job nearing its end stays of its
    kind) at least the largest's over ``mult`` (below 1: off)."""
    if mult < 1 or len(sizes) < 2 or not all(holding) or min(ages) < quiet_s:
        return False
    largest = max(sizes)
    return largest > 0 and all(size * mult >= largest for size in sizes)


def _steps(cap: int, per_node: int) -> list[int]:
    """The counts a job may hold in the water-filling: ``1..per_node`` one replica at a
    time, then whole nodes, then ``cap`` (ascending, none above ``cap``)."""
    per_node = max(per_node, 1)
    out = list(range(1, min(per_node, cap) + 1))
    out += list(range(2 * per_node, cap + 1, per_node))
    if out and out[-1] != cap and cap > per_node:
        out.append(cap)
    return out


def balanced_counts(
    remaining: Sequence[float],
    speedups: Sequence[SpeedupAt],
    caps: Sequence[int],
    per_node: Sequence[int],
    gprs: Sequence[int],
    total_gpus: int,
    ages: Sequence[float],
) -> list[int] | None:
    """Replicas per job that make the jobs' predicted JCTs (``age + remaining / speedup``) as
    even as whole steps allow: from one step each, the next step goes to the job predicted to
    end with the longest JCT, while it still speeds that job up and its GPUs are free. None
    when the jobs cannot all hold one replica (``gprs``: GPUs per replica; ``per_node``:
    replicas a node holds)."""
    n = len(remaining)
    if not n == len(speedups) == len(caps) == len(per_node) == len(gprs) == len(ages):
        raise ValueError("balanced_counts needs one remaining, speedup, cap, node size, gpr each")
    steps = [_steps(max(c, 1), p) for c, p in zip(caps, per_node, strict=True)]
    at = [0] * n  # index into each job's steps
    used = sum(gprs)
    if used > total_gpus:
        return None
    # the job with the longest predicted JCT first; ties to the earlier job (submission order)
    heap = [(-ages[i] - remaining[i] / max(speedups[i](steps[i][0]), 1e-9), i) for i in range(n)]
    heapq.heapify(heap)
    while heap:
        _, i = heapq.heappop(heap)
        if at[i] + 1 >= len(steps[i]):
            continue  # at its cap: the rest go to others
        now, nxt = steps[i][at[i]], steps[i][at[i] + 1]
        extra = (nxt - now) * gprs[i]
        faster = speedups[i](nxt)
        if used + extra > total_gpus or faster <= speedups[i](now) * (1.0 + 1e-9):
            continue  # no room for its next step, or no faster there: it stays
        at[i] += 1
        used += extra
        heapq.heappush(heap, (-ages[i] - remaining[i] / max(faster, 1e-9), i))
    return [steps[i][at[i]] for i in range(n)]


def shared_weight(weights: Sequence[float], own: Sequence[float]) -> list[float]:
    """The end-phase jobs' weights: one weight per unit of the user's own (``own``, the jobs'
    ``JobInfo.weight``), the largest any of them has, so that no job ranks another by its
    remaining work while the user's weights still count."""
    if len(weights) != len(own):
        raise ValueError("shared_weight needs one own weight per weight")
    units = [w / o for w, o in zip(weights, own, strict=True) if o > 0]
    unit = max(units, default=0.0)
    return [unit * max(o, 0.0) for o in own]
