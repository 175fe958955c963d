"""Alternative job weights for the adl objective, kept as opt-in knobs because they were
measured against the default ``weight / R^srpt_power`` and lost (docs/results.md, "Weights
tried against shortest-first").

- **Rank weights** (``rank_power = p`` in (0, 1)): heSRPT (Berg, Vesilo, Harchol-Balter 2020)
  shows that, with no arrivals and every job's speedup ``k^p``, the allocation minimising mean
  flow time depends only on the *order* of the jobs' sizes: the ``i``-th largest of ``m`` gets
  the share ``(i/m)^c - ((i-1)/m)^c`` with ``c = 1 / (1 - p)``. The objective ``sum_j w_j
  S_j(k_j)`` reaches that allocation at its optimum (``w_j S_j'(k_j)`` equal for all ``j``)
  with ``w_j`` proportional to ``share_j^(1 - p)``.
- **Aging on the best time** (``aging_best = 1``): the aging factor ``(1 + age / R)^fairness``
  counts age against the job's remaining one-GPU seconds ``R``, so a long job (imagenet: ~10^6
  s on one GPU) never ages; counting it against ``R / S(cap)``, the time it would still need
  at its cap, makes age a slowdown, as finish-time fairness does.

Pure functions over numbers; the policy applies them in :mod:`adl.sched.policy_floors`
(``apply_alternative_weights``).
"""

from __future__ import annotations

from collections.abc import Sequence


def rank_shares(count: int, p: float) -> list[float]:
    """heSRPT's shares of ``count`` jobs, largest job first (they sum to 1)."""
    if count <= 0:
        return []
    if not 0.0 < p < 1.0:
        raise ValueError(f"rank_power must be in (0, 1), got {p}")
    c = 1.0 / (1.0 - p)
    return [(i / count) ** c - ((i - 1) / count) ** c for i in range(1, count + 1)]


def rank_weights(remaining: Sequence[float], p: float) -> list[float]:
    """Weight of each job (in the order given) that makes ``sum w S`` pick heSRPT's shares:
    ``share^(1 - p)`` of its rank, jobs ordered by remaining work, largest first (ties keep
    the given order, which the policy makes submission order)."""
    order = sorted(range(len(remaining)), key=lambda i: (-remaining[i], i))
    shares = rank_shares(len(remaining), p)
    out = [0.0] * len(remaining)
    for rank, idx in enumerate(order):
        out[idx] = shares[rank] ** (1.0 - p)
    return out


def aging(age_s: float, basis_s: float, fairness: float) -> float:
    """``(1 + age / basis)^fairness``: how much a job's weight has grown while it waited."""
    return (1.0 + max(age_s, 0.0) / max(basis_s, 1e-9)) ** fairness
