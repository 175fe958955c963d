"""Greedy node filling shared by the baselines."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from adl.sched.types import NodeInfo


def free_gpus(nodes: Sequence[NodeInfo], allocation: Mapping[str, list[str]]) -> dict[str, int]:
    """Free GPUs per node (in node order) after ``allocation``."""
    free = {n.name: n.gpus for n in nodes}
    for held in allocation.values():
        for node in held:
            if node in free:
                free[node] -= 1
    return free


def place_most_free(count: int, free: dict[str, int]) -> list[str]:
    """Take ``count`` GPUs node by node, always from the node with the most free GPUs (earliest
    node on ties), emptying each chosen node before moving on. Updates ``free``."""
    if count > sum(max(v, 0) for v in free.values()):
        raise ValueError(f"cannot place {count} GPUs: only {sum(free.values())} free")
    out: list[str] = []
    while len(out) < count:
        node = max(free, key=lambda n: free[n])  # max() keeps the first of equal keys
        take = min(free[node], count - len(out))
        out.extend([node] * take)
        free[node] -= take
    return out
