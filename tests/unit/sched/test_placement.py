"""The policy's GPU bookkeeping against brute force, over random takes and releases on clusters
of every shape: many small nodes (the traces' 4 GPUs), a few big ones, and the local daemon's
one node of thousands of slots (where the scans once walked every empty free-count bucket)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from adl.sched.placement import Cluster, Placement
from adl.sched.types import NodeInfo

shapes = st.one_of(
    st.lists(st.integers(0, 8), min_size=1, max_size=12),
    st.lists(st.integers(1, 3000), min_size=1, max_size=3),
)


def best_single(cluster: Cluster, need: int) -> int | None:
    """The fewest free GPUs of any node that holds ``need`` (best fit)."""
    fits = [f for f in cluster.free if f >= need]
    return min(fits) if fits else None


def fewest_nodes(cluster: Cluster, replicas: int, gpr: int) -> int | None:
    """Open nodes, emptiest first, until ``replicas`` fit (None: they never do)."""
    left = replicas
    open_free = [f for f, o in zip(cluster.free, cluster.owner, strict=True) if o is None]
    for used, f in enumerate(sorted(open_free, reverse=True), start=1):
        if f // gpr == 0:
            break
        left -= f // gpr
        if left <= 0:
            return used
    return None


@settings(max_examples=150, deadline=None)
@given(shape=shapes, ops=st.lists(st.tuples(st.integers(1, 4000), st.integers(1, 2)), max_size=25))
def test_place_matches_brute_force_through_takes_and_releases(
    shape: list[int], ops: list[tuple[int, int]]
) -> None:
    cluster = Cluster([NodeInfo(f"n{i}", g) for i, g in enumerate(shape)])
    held: list[tuple[str, Placement, int]] = []
    for step, (replicas, gpr) in enumerate(ops):
        need = replicas * gpr
        got = cluster.place(replicas, gpr)
        single = best_single(cluster, need) if need <= cluster.max_gpus else None
        if single is not None:
            assert got is not None and len(got) == 1
            ((node, reps),) = got.items()
            assert reps == replicas and cluster.free[node] == single
        else:
            nodes = fewest_nodes(cluster, replicas, gpr)
            if nodes is None or nodes < 2:
                assert got is None
            else:
                assert got is not None and sum(got.values()) == replicas
                assert len(got) == nodes
                assert all(cluster.owner[i] is None for i in got)
        if got is not None:
            assert cluster.fits(got, gpr)
            cluster.take(f"j{step}", got, gpr)
            held.append((f"j{step}", got, gpr))
        elif held and step % 2:
            cluster.release(*held.pop(0))
    for job, placement, gpr in reversed(held):
        cluster.release(job, placement, gpr)
    assert cluster.free == [max(g, 0) for g in shape]
    assert all(owner is None for owner in cluster.owner)


def test_a_full_single_big_node_answers_without_walking_its_buckets() -> None:
    # One node of 2048 slots, all taken but one: a 2-replica job fits nowhere, a 1-replica job
    # fits in the hole; both answers come from the one filled bucket.
    cluster = Cluster([NodeInfo("local", 2048)])
    cluster.take("big", {0: 2047})
    assert cluster.place(2) is None
    assert cluster.place(1) == {0: 1}


def test_a_placement_within_allowed_nodes_uses_only_them():
    """``allowed`` (a job's node pool): best fit among its nodes, a preferred node first,
    and a spread over its open nodes only; None when they cannot hold it."""
    cluster = Cluster([NodeInfo("a", 4), NodeInfo("b", 2), NodeInfo("c", 4), NodeInfo("d", 8)])
    pool = frozenset({1, 2})
    assert cluster.place(2, allowed=pool) == {1: 2}  # best fit: b, not the emptier c
    assert cluster.place(2, prefer=[0, 2], allowed=pool) == {2: 2}  # a is not in the pool
    assert cluster.place(5, allowed=pool) == {2: 4, 1: 1}  # spread, emptiest first
    assert cluster.place(7, allowed=pool) is None
    cluster.take("wide", {2: 2, 3: 2})  # c now hosts a distributed job: closed to spreads
    assert cluster.place(3, allowed=pool) is None
    assert cluster.place(2, allowed=pool) == {1: 2}
