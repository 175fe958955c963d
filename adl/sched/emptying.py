"""Which nodes to empty so that the autoscaler can remove them: the other half of asking.

An autoscaler removes a node when it is empty (Karpenter's emptiness consolidation,
cluster-autoscaler's scale-down of an unneeded node); it rarely moves adl's GPU pods itself.
So a node that holds only replicas adding little, or a one-replica leftover beside idle GPUs,
is paid for until adl moves off it. After each round this rule picks such nodes; the backend
then offers them to no job (they are not cordoned: adl does not touch Nodes), the jobs on them
shrink or move at the next round, and the autoscaler removes the empty node.

A node is worth emptying when every replica on it can go (an idle node trivially):

- *moved*: it fits on free GPUs of another node the job may use (its pool, GPU types); or,
  with ``CapacityRule.drop_low_value``,
- *dropped*: its job keeps at least its minimum, and each replica dropped adds less than
  ``CapacityRule.min_marginal_speedup`` of a GPU (:func:`adl.sched.capacity.replica_gains`,
  the very measure the asks use). Off by default: the policy then re-plans the whole cluster
  around the GPUs lost, and in the simulator that doubled the restarts and lengthened the
  average JCT by about a quarter for a few percent of cost (``docs/results.md``).

Asking and emptying must not fight: a node is chosen only if the round's asks, recomputed
(:func:`adl.sched.capacity.capacity_asks`) without the node and with its replicas gone or
moved, ask for no more GPUs than before. A node that would be asked for again is kept, in the
same state. Nodes that hold a job that must not be preempted are never chosen (the policy
keeps such a job where it is). On-demand nodes go before spot ones, the dearest first where
prices are known, then the least used; at most ``CapacityRule.max_emptied_per_round`` a round,
so the cluster shrinks a node at a time rather than oscillating.

Pure: the operator (``adl.operator``) and the simulator's elastic cluster
(``adl.sched.sim.elastic``) both call :func:`nodes_worth_emptying`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from adl.sched.capacity import CapacityRule, capacity_asks, replica_gains
from adl.sched.types import JobInfo, NodeInfo


@dataclass(frozen=True)
class NodeToEmpty:
    """``node`` is to be offered to no job: ``moves`` says, per job with replicas there, what
    happens to them in words (shown on the job); ``gain`` is the most one dropped replica
    adds (GPUs of throughput; 0.0 when none is dropped)."""

    node: str
    moves: tuple[tuple[str, str], ...]
    gain: float
    why: str

    @property
    def jobs(self) -> tuple[str, ...]:
        return tuple(job for job, _ in self.moves)


def _asked_gpus(
    infos: Sequence[JobInfo],
    allocation: Mapping[str, Sequence[str]],
    nodes: Sequence[NodeInfo],
    rule: CapacityRule,
) -> int:
    return sum(a.gpus for a in capacity_asks(infos, allocation, nodes, rule))


def _order(
    nodes: Sequence[NodeInfo], busy: Mapping[str, int], prices: Mapping[str, float]
) -> list[NodeInfo]:
    """On-demand before spot, the dearest first (unknown prices tie), then the least used."""
    return sorted(
        nodes,
        key=lambda n: (n.preemptible, -prices.get(n.name, 0.0), busy.get(n.name, 0), n.name),
    )


def _may_move_to(info: JobInfo, node: NodeInfo) -> bool:
    return (info.nodes is None or node.name in info.nodes) and info.may_use(node.gpu_type)


@dataclass
class _State:
    """The allocation and free GPUs as the nodes chosen so far leave them."""

    allocation: dict[str, list[str]]
    free: dict[str, int]
    offered: list[NodeInfo]
    #: node -> replicas of each job on it (an index, so a node's plan reads only its jobs)
    on_node: dict[str, Counter[str]]


def _plan_node(
    node: NodeInfo, state: _State, info_of: Mapping[str, JobInfo], rule: CapacityRule
) -> tuple[_State, list[tuple[str, str]], float] | None:
    """The state once ``node``'s replicas are dropped or moved, what each job is told, and the
    most a dropped replica adds; None when some replica can neither go nor move."""
    # copies of the containers only: the lists are replaced, never changed in place
    alloc = dict(state.allocation)
    free = dict(state.free)
    free.pop(node.name, None)
    others = [n for n in state.offered if n.name != node.name]
    on_node = dict(state.on_node)
    here = on_node.pop(node.name, Counter())
    moves: list[tuple[str, str]] = []
    top_gain = 0.0
    thr = rule.min_marginal_speedup
    for job, count in sorted(here.items()):
        info = info_of.get(job)
        if info is None or not info.preemptible:
            return None  # unknown to the policy, or a job the policy must leave in place
        held = alloc[job]
        gains = replica_gains(info, rule, len(held))
        floor = max(info.min_replicas, 1)
        # drop from the top (replicas are interchangeable: the last ones add the least
        # under a concave model) while each dropped one adds less than the threshold
        dropped, gain = 0, 0.0
        while rule.drop_low_value and gains is not None and dropped < count:
            k = len(held) - dropped  # replica k would go
            if k <= floor or gains[k - 1] >= thr:
                break
            gain = max(gain, float(gains[k - 1]))
            dropped += 1
        gpr = max(info.gpus_per_replica, 1)
        moved: Counter[str] = Counter()
        for _ in range(count - dropped):
            # best fit: the fullest node with room, so the emptiest ones stay emptiable
            fits = [n for n in others if free.get(n.name, 0) >= gpr and _may_move_to(info, n)]
            if not fits:
                return None
            target = min(fits, key=lambda n: (free[n.name], n.name))
            free[target.name] -= gpr
            moved[target.name] += 1
        for name, count_there in moved.items():
            on_node[name] = on_node.get(name, Counter()) + Counter({job: count_there})
        rest = [n for n in held if n != node.name]
        rest += [n for n, c in sorted(moved.items()) for _ in range(c)]
        alloc[job] = rest
        parts = []
        if dropped:
            top_gain = max(top_gain, gain)
            parts.append(
                f"{dropped} replica(s) there add at most {gain:.2f} of a GPU each, below "
                f"{thr:g}: it runs on {len(held) - dropped} instead of {len(held)}"
            )
        if moved:
            parts.append(f"{sum(moved.values())} replica(s) fit on free GPUs elsewhere")
        moves.append(
            (
                job,
                f"moving off node {node.name}: " + "; ".join(parts) + "; freeing the node for "
                "the autoscaler to remove",
            )
        )
    return _State(alloc, free, others, on_node), moves, top_gain


def nodes_worth_emptying(
    infos: Sequence[JobInfo],
    allocation: Mapping[str, Sequence[str]],
    nodes: Sequence[NodeInfo],
    rule: CapacityRule,
    *,
    prices: Mapping[str, float] | None = None,
    kept: Collection[str] = (),
) -> list[NodeToEmpty]:
    """The nodes to empty after a round that gave ``allocation`` on ``nodes`` (the nodes it
    offered: one already leaving or being emptied is not among them), at most
    ``rule.max_emptied_per_round`` (see the module docstring). ``prices``: $/h by node where
    known; ``kept``: nodes never to choose, e.g. those that some other pod keeps (only an
    empty node is removed)."""
    if rule.max_emptied_per_round <= 0 or not nodes:
        return []
    info_of = {i.name: i for i in infos}
    gpr_of = {i.name: max(i.gpus_per_replica, 1) for i in infos}
    known = {n.name for n in nodes}
    busy: Counter[str] = Counter()
    for job, held in allocation.items():
        for n in held:
            busy[n] += gpr_of.get(job, 1)
    on_node: dict[str, Counter[str]] = {}
    for job, held in allocation.items():
        for n in held:
            on_node.setdefault(n, Counter())[job] += 1
    state = _State(
        {job: list(held) for job, held in allocation.items()},
        {n.name: max(n.gpus - busy[n.name], 0) for n in nodes},
        list(nodes),
        on_node,
    )
    if any(n not in known for held in allocation.values() for n in held):
        return []  # the answer names nodes it was not offered: nothing to reason from
    asked = _asked_gpus(infos, state.allocation, state.offered, rule)
    chosen: list[NodeToEmpty] = []
    for node in _order(nodes, busy, prices or {}):
        if len(chosen) >= rule.max_emptied_per_round or len(state.offered) <= 1:
            break
        if node.name in kept:
            continue
        if not rule.drop_low_value:
            # every replica must move: not worth planning unless the others' free GPUs
            # could hold them all
            mine = sum(c * gpr_of.get(j, 1) for j, c in state.on_node.get(node.name, {}).items())
            if mine > sum(state.free.values()) - state.free.get(node.name, 0):
                continue
        planned = _plan_node(node, state, info_of, rule)
        if planned is None:
            continue
        after, moves, gain = planned
        if _asked_gpus(infos, after.allocation, after.offered, rule) > asked:
            continue  # the asks would want it back: keep it
        state = after
        idle = node.gpus - busy[node.name]
        why = (
            f"node {node.name}: {busy[node.name]} of its {node.gpus} GPUs hold replicas that "
            f"add too little or fit elsewhere ({idle} idle); freeing it for the autoscaler "
            "to remove"
        )
        if not moves:
            why = f"node {node.name}: all {node.gpus} GPUs idle; freeing it for the autoscaler"
        chosen.append(NodeToEmpty(node.name, tuple(moves), gain, why))
    return chosen


def keep_emptying(
    infos: Sequence[JobInfo],
    allocation: Mapping[str, Sequence[str]],
    nodes: Sequence[NodeInfo],
    emptying: Sequence[NodeInfo],
    rule: CapacityRule,
) -> bool:
    """Whether the nodes being emptied (``emptying``, offered to no job while they are) should
    stay so after a round on ``nodes``: no, once the jobs would ask for fewer GPUs with them
    offered again (new demand they would cover: better theirs than a new node's)."""
    if not emptying:
        return True
    without = _asked_gpus(infos, allocation, nodes, rule)
    return without == 0 or _asked_gpus(infos, allocation, [*nodes, *emptying], rule) >= without
