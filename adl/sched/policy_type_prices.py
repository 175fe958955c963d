"""Prices per GPU type for the replica-count knapsack on a mixed cluster (opt-in:
``Knobs.type_prices``).

The knapsack chooses each job's replica count against the cluster's free GPUs in total, each
count valued on the type where it is worth most *as if that type had room*. On a cluster of
V100s and K80s nearly every job is worth most on V100s, so the counts are chosen as though
every job ran there, and the placement that follows puts the overflow on K80s, where those
counts are worth a fraction of what they were chosen for. Sia avoids this by solving one
program with a capacity per type.

A price per GPU of each over-asked type, subtracted from what a count on that type is worth,
is the Lagrangian way to the same answer: jobs that gain least from the scarce type turn to
another one first, and the knapsack sees each job's real alternatives. The policy re-solves
with prices raised on the types the last solve over-asked, a few times, and keeps whichever
allocation is worth most by the unpriced objective, so the prices can only add candidates,
never lose value. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

#: each re-solve raises an over-asked type's price by this fraction of the mean value per GPU
#: of the unpriced solve: four steps reach a price equal to the mean value of a GPU
PRICE_STEP = 0.25


def over_asked(demand: Mapping[str, int], free: Mapping[str, int]) -> dict[str, int]:
    """GPUs asked of each type beyond those free on it (types asked within their room left out)."""
    return {t: d - free.get(t, 0) for t, d in demand.items() if d > free.get(t, 0)}


def raised_prices(
    prices: Mapping[str, float], over: Mapping[str, int], unit: float
) -> dict[str, float]:
    """``prices`` with each over-asked type's raised by ``PRICE_STEP x unit`` (``unit``: the
    mean value of one GPU in the unpriced solve)."""
    out = dict(prices)
    for gpu_type in over:
        out[gpu_type] = out.get(gpu_type, 0.0) + PRICE_STEP * unit
    return out
