"""Elastic data loading: partitioning, mid-epoch resumption, batch-size decisions."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable

import pytest
import torch
from torch.utils.data import TensorDataset

import adl
from adl.client_lib.context import JobContext
from adl.client_lib.data import (
    AdaptiveDataLoader,
    choose_config,
    default_config,
    epoch_order,
    plan_micro_batches,
    split_evenly,
)
from adl.sched.goodput import BatchBounds, GoodputFunction, GradParams, PerfParams

MakeContext = Callable[..., JobContext]


def _dataset(n: int) -> TensorDataset:
    return TensorDataset(torch.arange(n), torch.randn(n, 3))


# ---------------------------------------------------------------------------- pure partitioning


def test_epoch_order_is_a_seeded_permutation_per_epoch() -> None:
    a, b = epoch_order(50, 3, True, seed=7), epoch_order(50, 3, True, seed=7)
    assert a == b and sorted(a) == list(range(50)) and a != list(range(50))
    assert epoch_order(50, 4, True, seed=7) != a  # a new order every epoch
    assert epoch_order(5, 3, False, seed=7) == [0, 1, 2, 3, 4]


def test_split_evenly() -> None:
    assert split_evenly(10, 3) == [4, 3, 3]
    assert split_evenly(2, 3) == [1, 1, 0]


def _consume(
    size: int, offset: int, replicas: int, local: int, steps: int | None
) -> tuple[list[int], int]:
    """Positions consumed by ``steps`` global micro-batches (all of them when None)."""
    seen: list[int] = []
    plan = plan_micro_batches(size, offset, replicas, local)
    for mb in plan[:steps] if steps is not None else plan:
        for rank in range(replicas):
            start, end = mb.span(rank)
            seen.extend(range(start, end))
        offset = mb.offset + mb.size
    return seen, offset


@pytest.mark.parametrize("size", [97, 100, 120])
def test_any_resize_sequence_covers_each_position_exactly_once(size: int) -> None:
    for worlds in itertools.permutations([1, 2, 3, 4], 3):
        seen: list[int] = []
        offset = 0
        for world, steps in zip(worlds, (3, 2, None), strict=True):
            part, offset = _consume(size, offset, world, 5, steps)
            seen.extend(part)
        counts = Counter(seen)
        assert max(counts.values()) == 1, worlds
        # Only a tail smaller than the replica count may be left out.
        assert size - len(counts) < worlds[-1], worlds
        assert set(counts) == set(range(len(counts)))


def test_the_tail_of_an_epoch_is_split_evenly_or_dropped() -> None:
    plan = plan_micro_batches(23, 0, 3, 4)
    assert [mb.shares for mb in plan] == [(4, 4, 4), (4, 4, 3)]
    assert plan_micro_batches(14, 12, 3, 4) == []  # 2 left for 3 replicas: dropped
    assert len(plan_micro_batches(23, 0, 3, 4, drop_last=True)) == 1


def test_default_config_splits_b0_and_accumulates_beyond_the_micro_batch_limit() -> None:
    bounds = BatchBounds(64, 1024, (4, 16), gradient_accumulation=True)
    assert default_config(bounds, 4) == (16, 0)
    assert default_config(bounds, 2) == (16, 1)  # 32 per replica = 2 x 16
    no_accum = BatchBounds(64, 1024, (4, 16), gradient_accumulation=False)
    assert default_config(no_accum, 2) == (16, 0)


def _goodput(sqr: float, var: float) -> GoodputFunction:
    perf = PerfParams(0.01, 0.001, 0.1, 0.01, 0.02, 0.002, 1.5)
    return GoodputFunction(perf, GradParams(sqr=sqr, var=var), BatchBounds(32, 1024, (8, 128)))


def test_choose_config_changes_only_for_a_worthwhile_gain() -> None:
    bounds = BatchBounds(32, 1024, (8, 128))
    noisy = _goodput(sqr=0.01, var=10.0)  # very noisy: large batches are efficient
    best = noisy.optimize(1, 2)
    best_cfg = (int(best.local_bsz[0]), int(best.accum_steps[0]))
    assert best_cfg != default_config(bounds, 2)
    assert choose_config(noisy, bounds, 1, 2, None, 0.05) == best_cfg
    # Without a model, or when the current configuration is within the margin, nothing moves.
    assert choose_config(None, bounds, 1, 2, (16, 0), 0.05) == (16, 0)
    near = (best_cfg[0] - 1, best_cfg[1])
    assert float(noisy.evaluate(1, 2, *near)) > float(best.goodput[0]) / 1.05
    assert choose_config(noisy, bounds, 1, 2, near, 0.05) == near
    # An infeasible current configuration (here: beyond the micro-batch limit) is replaced.
    assert choose_config(None, bounds, 1, 2, (256, 0), 0.05) == default_config(bounds, 2)


# ---------------------------------------------------------------------------- the loader


def _ids(batches: list[list[torch.Tensor]]) -> list[int]:
    return [int(i) for b in batches for i in b[0]]


def test_loader_visits_every_sample_once_per_epoch(make_context: MakeContext) -> None:
    make_context()
    loader = AdaptiveDataLoader(_dataset(37), batch_size=8, shuffle=True, name="data")
    epochs = []
    for epoch in adl.remaining_epochs_until(3):
        assert adl.current_epoch() == epoch
        epochs.append(_ids(list(loader)))
    assert adl.current_epoch() is None
    assert all(sorted(ids) == list(range(37)) for ids in epochs)
    assert epochs[0] != epochs[1]  # reshuffled per epoch


def test_stop_mid_epoch_resumes_at_the_next_sample(make_context: MakeContext) -> None:
    ctx = make_context()
    loader = AdaptiveDataLoader(_dataset(40), batch_size=6, shuffle=True, name="data")
    before: list[int] = []
    epochs = adl.remaining_epochs_until(2)
    assert next(epochs) == 0
    for i, batch in enumerate(loader):
        before.extend(int(x) for x in batch[0])
        if i == 2:
            break
    ctx.save()
    # A restart: a new process would build the same objects and be handed the saved state.
    make_context()
    loader = AdaptiveDataLoader(_dataset(40), batch_size=6, shuffle=True, name="data")
    assert loader.offset == 18
    rest = {epoch: _ids(list(loader)) for epoch in adl.remaining_epochs_until(2)}
    assert sorted(before + rest[0]) == list(range(40))
    assert sorted(rest[1]) == list(range(40))


def test_autoscale_changes_the_batch_only_at_an_epoch_boundary(make_context: MakeContext) -> None:
    ctx = make_context()
    loader = AdaptiveDataLoader(_dataset(64), batch_size=4, name="data")
    loader.autoscale_batch_size(32, local_bsz_bounds=(2, 16))
    assert (loader.current_local_bsz, loader.accumulation_steps) == (4, 0)
    noisy = GoodputFunction(
        PerfParams(0.01, 0.0001, 0.1, 0.01, 0.02, 0.002, 1.5),
        GradParams(sqr=0.001, var=10.0),
        loader.bounds,
    )
    sizes: list[int] = []
    for epoch in adl.remaining_epochs_until(2):
        for i, batch in enumerate(loader):
            sizes.append(len(batch[0]))
            if epoch == 0 and i == 0:
                ctx.set_goodput_provider(lambda bounds: noisy)  # the model appears mid-epoch
    assert set(sizes[:16]) == {4}  # epoch 0 keeps B0
    assert loader.current_batch_size > 4 and set(sizes[16:]) == {loader.current_local_bsz}
    assert ctx.local_bsz == loader.current_local_bsz


def test_accumulation_marks_only_the_last_micro_batch_as_a_sync_step(
    make_context: MakeContext,
) -> None:
    ctx = make_context()
    loader = AdaptiveDataLoader(_dataset(24), batch_size=12, name="data")
    loader.autoscale_batch_size(12, local_bsz_bounds=(4, 4), gradient_accumulation=True)
    flags = [ctx.is_sync_step for _ in loader]
    assert flags == [False, False, True] * 2
