"""The policy's fast speedup tables against the exhaustive goodput search."""

import numpy as np
import pytest

from adl.sched.goodput import BatchBounds, GoodputFunction, GradParams, PerfParams
from adl.sched.policy_goodput import best_goodput
from adl.sched.policy_optimism import frozen_sync
from adl.sched.speedup import SpeedupFunction
from adl.sched.speedup_table import SpeedupTable, fill_first


def random_model(rng: np.random.Generator) -> GoodputFunction:
    perf = PerfParams(
        alpha_c=float(rng.uniform(1e-3, 0.3)),
        beta_c=float(10 ** rng.uniform(-4, -1)),
        alpha_n=float(rng.uniform(0.0, 1.5)),
        beta_n=float(rng.uniform(0.0, 0.05)),
        alpha_r=float(rng.uniform(0.0, 0.3)),
        beta_r=float(rng.uniform(0.0, 0.1)),
        gamma=float(rng.uniform(1.0, 10.0)),
    )
    sqr = float(10 ** rng.uniform(-2, 2))
    grad = GradParams(sqr=sqr, var=sqr * float(10 ** rng.uniform(-1, 3)))
    b0 = int(2 ** rng.integers(3, 8))
    lo = max(b0 // int(2 ** rng.integers(0, 4)), 1)
    hi = lo * int(2 ** rng.integers(0, 6))
    bounds = BatchBounds(
        init_batch_size=b0,
        max_batch_size=b0 * int(2 ** rng.integers(1, 7)),
        local_bsz_bounds=(lo, hi),
        gradient_accumulation=bool(rng.integers(0, 2)),
    )
    return GoodputFunction(perf, grad, bounds)


@pytest.mark.parametrize("seed", range(8))
def test_fast_search_matches_exhaustive_search(seed):
    rng = np.random.default_rng(seed)
    for _ in range(10):
        gf = random_model(rng)
        ks = np.arange(1, 65)
        ns = np.where(rng.random(64) < 0.5, 1, 1 + ks // 4)
        exact = gf.optimize(ns, ks).goodput
        fast = best_goodput(gf.perf, gf.grad, gf.bounds, ns, ks)
        assert np.array_equal(fast > 0, exact > 0)  # same feasibility
        ok = exact > 0
        ratio = fast[ok] / exact[ok]
        assert np.all(ratio > 0.985)  # never far below the optimum
        assert np.all(ratio < 1.05)  # and no infeasible shortcut above it


def test_frozen_sync_is_never_slower_above_profiled():
    gf = random_model(np.random.default_rng(3))
    opt = frozen_sync(gf.perf, 8)
    ks = np.arange(1, 65)
    for nodes in (1, 2):
        ns = np.full(64, nodes)
        base = best_goodput(gf.perf, gf.grad, gf.bounds, ns, ks)
        hopeful = best_goodput(opt, gf.grad, gf.bounds, ns, ks)
        assert np.all(hopeful[8:] >= base[8:] - 1e-12)  # K above the profiled 8
        assert np.allclose(hopeful[7], base[7])  # K = 8 itself: unchanged


def test_table_rows_follow_the_model_and_are_optimistic_only_above_profiled():
    gf = GoodputFunction(
        PerfParams(0.01, 0.001, 0.3, 0.05, 0.02, 0.01, 1.5),
        GradParams(sqr=1.0, var=50.0),
        BatchBounds(64, 4096, (16, 256)),
    )
    fn = SpeedupFunction(gf)
    table = SpeedupTable(fn, per_node=4, profiled=4, cap=16)
    assert table.get(1, 1, 16) == pytest.approx(1.0)
    for k in (2, 3, 4):  # measured range: the model itself
        assert table.get(1, k, 16) == pytest.approx(float(np.atleast_1d(fn(1, k))[0]), rel=0.015)
    # Across nodes above the profiled count: at least the model, strictly more where sync grows.
    for k in (8, 12, 16):
        assert table.get(k // 4, k, 16) >= float(np.atleast_1d(fn(k // 4, k))[0]) * 0.985
    assert table.get(4, 16, 16) > float(np.atleast_1d(fn(4, 16))[0]) * 1.05
    # Node count matters only as one node vs several for a fitted model.
    assert table.get(2, 8, 16) == table.get(8, 8, 16)


def test_generic_functions_are_tabulated_per_node_count():
    calls = []

    def fn(n, k):
        calls.append((np.asarray(n).copy(), np.asarray(k).copy()))
        return np.asarray(k, dtype=float) / np.asarray(n, dtype=float)

    table = SpeedupTable(fn, per_node=4)
    assert table.get(1, 4, 16) == 4.0
    assert table.get(2, 4, 16) == 2.0
    assert table.get(2, 8, 16) == 4.0
    before = len(calls)
    assert table.get(2, 8, 16) == 4.0  # cached
    assert len(calls) == before


@pytest.mark.parametrize("seed", range(4))
def test_a_whole_row_at_once_fills_the_table_as_lookups_one_by_one_do(seed):
    rng = np.random.default_rng(seed)
    for _ in range(5):
        fn = SpeedupFunction(random_model(rng))
        cap = int(rng.integers(1, 70))
        profiled = int(rng.integers(0, 9))
        one_by_one = SpeedupTable(fn, per_node=4, profiled=profiled, cap=cap)
        for k in range(1, cap + 1):
            one_by_one.get(2, k, cap)
        at_once = SpeedupTable(fn, per_node=4, profiled=profiled, cap=cap)
        at_once.cover(cap + 5)  # within the cap
        assert at_once.covered == one_by_one.covered == cap
        assert np.array_equal(at_once.rows, one_by_one.rows)


@pytest.mark.parametrize("per_node", [1, 4, 8])
def test_the_policys_tables_search_one_node_only_where_one_node_holds_the_replicas(per_node):
    rng = np.random.default_rng(per_node)
    for _ in range(5):
        fn = SpeedupFunction(random_model(rng))
        profiled = int(rng.integers(0, 9))
        whole = SpeedupTable(fn, per_node, profiled=profiled, cap=40)
        fits = SpeedupTable(fn, per_node, profiled=profiled, cap=40, one_node_fits=True)
        whole.cover(40)
        fits.cover(40)
        # the same numbers wherever a placement can be (searched in other batches of rows)
        assert np.array_equal(fits.rows[1], whole.rows[1])
        assert np.array_equal(fits.rows[0, : per_node + 1], whole.rows[0, : per_node + 1])
        # above a node's worth, the one-node row repeats the several-node one
        assert np.array_equal(fits.rows[0, per_node + 1 :], fits.rows[1, per_node + 1 :])
        assert fits.get(2, 40, 40) == whole.get(2, 40, 40)


def test_new_tables_filled_together_hold_the_numbers_each_would_alone():
    rng = np.random.default_rng(11)
    specs = []
    for _ in range(12):  # with and without accumulation, optimistic or not, small caps too
        fn = SpeedupFunction(random_model(rng))
        specs.append(
            (fn, int(rng.choice([1, 4, 8])), int(rng.integers(0, 9)), int(rng.integers(1, 12)))
        )
    together = [SpeedupTable(fn, n, p, c, one_node_fits=True, fill=False) for fn, n, p, c in specs]
    fill_first([*together, together[0]])  # a table shared by two jobs is filled once
    for table, (fn, n, p, c) in zip(together, specs, strict=True):
        alone = SpeedupTable(fn, n, p, c, one_node_fits=True)
        assert table.covered == alone.covered == min(8, c)
        assert table.base == alone.base
        assert np.array_equal(table.rows, alone.rows)
    generic = SpeedupTable(lambda n, k: np.asarray(k, dtype=float), 4, fill=False)
    fill_first([generic])  # nothing to fill: looked up lazily
    assert generic.get(1, 3, 8) == 3.0
