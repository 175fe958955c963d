"""Placing Sia's chosen configurations on nodes without needless restarts.

Sia picks, per job, a number of GPUs that is either part of one node or whole nodes; the
placement is then free. Sia's own simulator restarts a job only when its GPU count changes,
but adl's restarts it whenever its nodes change, so a job whose count is unchanged keeps its
GPUs where they are. The rest are placed biggest first: whole-node jobs on empty nodes,
partial jobs best fit (the fullest node they fit on). When the kept placements fragment the
cluster so that something no longer fits, the kept single-node jobs on the emptiest node
are moved as well (as Sia's placement reclaims a node), then the kept multi-node ones, until
everything fits; with power-of-two partial sizes on equal nodes that always ends in a fit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from adl.sched.types import Allocation, NodeInfo


def _try_place(
    want: Mapping[str, int],
    kept: Mapping[str, list[str]],
    nodes: Sequence[NodeInfo],
    order: Sequence[str],
) -> Allocation | None:
    free = {n.name: n.gpus for n in nodes}
    out: Allocation = {}
    for name, held in kept.items():
        for node in held:
            free[node] -= 1
        out[name] = list(held)
    if any(v < 0 for v in free.values()):
        return None
    per_node = max((n.gpus for n in nodes), default=1)
    for name in order:
        if name in out:
            continue
        count = want[name]
        if count >= per_node:
            empty = [n for n in free if free[n] == per_node]
            whole, rest = divmod(count, per_node)
            if len(empty) < whole + (1 if rest else 0):
                return None
            out[name] = [n for n in empty[:whole] for _ in range(per_node)]
            for n in empty[:whole]:
                free[n] = 0
            if rest:
                out[name] += [empty[whole]] * rest
                free[empty[whole]] -= rest
            continue
        fits = [n for n in free if free[n] >= count]
        if not fits:
            return None
        node = min(fits, key=lambda n: free[n])  # best fit; first of equals: node order
        out[name] = [node] * count
        free[node] -= count
    return out


def place(
    want: Mapping[str, int],
    previous: Mapping[str, list[str]],
    nodes: Sequence[NodeInfo],
) -> Allocation:
    """Nodes for every job in ``want`` (job -> GPUs, > 0); raises ValueError if they cannot be
    placed even from scratch."""
    names = {n.name for n in nodes}
    kept = {
        name: list(previous[name])
        for name, count in want.items()
        if len(previous.get(name, [])) == count and all(n in names for n in previous[name])
    }
    order = sorted(want, key=lambda name: (-want[name], name))
    per_node = max((n.gpus for n in nodes), default=1)
    while True:
        placed = _try_place(want, kept, nodes, order)
        if placed is not None:
            return placed
        if not kept:
            raise ValueError(f"cannot place {sum(want.values())} GPUs of {dict(want)}")
        free = {n.name: n.gpus for n in nodes}
        for held in kept.values():
            for node in held:
                free[node] -= 1
        partial = [k for k in kept if want[k] < per_node]
        victims = partial or list(kept)
        # the emptiest node hosting a kept job is the cheapest to reclaim
        node = max({n for k in victims for n in kept[k]}, key=lambda n: (free[n], n))
        for name in [k for k in victims if node in kept[k]]:
            del kept[name]
