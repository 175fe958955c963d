"""``AdaptiveDataLoader.exact_batch``: at a world size that does not divide B0, a fixed batch is
still B0 samples a step, split in shares that differ by at most one (AdaptiveTrainer's batch)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch
from torch.utils.data import TensorDataset

import adl
from adl.client_lib.context import JobContext
from adl.client_lib.data import AdaptiveDataLoader, plan_micro_batches

MakeContext = Callable[..., JobContext]


def test_a_given_micro_batch_is_split_over_the_replicas_in_near_even_shares() -> None:
    plan = plan_micro_batches(40, 0, 3, 6, micro_batch=16)
    assert [mb.shares for mb in plan] == [(6, 5, 5), (6, 5, 5), (3, 3, 2)]
    assert [mb.offset for mb in plan] == [0, 16, 32]
    assert len(plan_micro_batches(34, 0, 3, 6, micro_batch=16)) == 2  # 2 left: dropped
    with pytest.raises(ValueError, match="micro_batch"):
        plan_micro_batches(40, 0, 3, 1, micro_batch=2)


def _epoch(make_context: MakeContext, exact: bool, size: int = 40) -> list[list[list[int]]]:
    """Each rank's batches (sample ids) of one epoch at 3 replicas, B0 = 16."""
    per_rank = []
    for rank in range(3):
        ctx = make_context()
        ctx.env = dataclasses.replace(ctx.env, rank=rank, world_size=3)
        data = TensorDataset(torch.arange(size))
        loader = AdaptiveDataLoader(data, batch_size=16, shuffle=True, name="data")
        loader.exact_batch = exact
        assert loader.current_batch_size == (16 if exact else 18)
        batches = []
        for _ in adl.remaining_epochs_until(1):
            steps = len(loader)
            batches = [batch[0].tolist() for batch in loader]
        assert len(batches) == steps
        per_rank.append(batches)
    return per_rank


def test_exact_batch_makes_every_step_b0_at_three_replicas(make_context: MakeContext) -> None:
    ranks = _epoch(make_context, exact=True)
    steps = [sum(len(r[i]) for r in ranks) for i in range(len(ranks[0]))]
    assert steps == [16, 16, 8]
    assert [len(b) for b in ranks[0]] == [6, 6, 3] and [len(b) for b in ranks[2]] == [5, 5, 2]
    assert sorted(i for r in ranks for b in r for i in b) == list(range(40))


def test_without_exact_batch_each_replica_takes_the_ceiling(make_context: MakeContext) -> None:
    ranks = _epoch(make_context, exact=False, size=38)
    assert [sum(len(r[i]) for r in ranks) for i in range(len(ranks[0]))] == [18, 18]
    # the last 2 samples are fewer than the replicas: dropped, 36 of 38 trained
    assert len({i for r in ranks for b in r for i in b}) == 36
    # with exact_batch, the same epoch is 16, 16 and 6 (2 + 2 + 2)
    ranks = _epoch(make_context, exact=True, size=38)
    assert [sum(len(r[i]) for r in ranks) for i in range(len(ranks[0]))] == [16, 16, 6]


def test_each_share_weighs_its_size_in_its_step() -> None:
    """The replicas' and micro-batches' gradients (each a mean over its share) are averaged with
    equal weights; weighted, the average is the mean over the step's samples."""
    from adl.client_lib.data import share_weights

    plan = plan_micro_batches(40, 0, 3, 6, micro_batch=16)  # (6,5,5) (6,5,5) (3,3,2)
    assert share_weights(plan, 1, 0, 3) == [6 * 3 / 16, 6 * 3 / 16, 3 * 3 / 8]
    assert share_weights(plan, 1, 2, 3) == [5 * 3 / 16, 5 * 3 / 16, 2 * 3 / 8]
    # two micro-batches a step: the second step holds the short tail alone
    assert share_weights(plan, 2, 0, 3) == [6 * 3 * 2 / 32, 6 * 3 * 2 / 32, 3 * 3 / 8]
    even = plan_micro_batches(36, 0, 3, 4)
    assert share_weights(even, 3, 1, 3) == [1.0] * 3
    for per_step in (1, 2):  # each share's part of the average is its part of the samples
        for rank in range(3):
            weights = share_weights(plan, per_step, rank, 3)
            for start in range(0, len(plan), per_step):
                step = plan[start : start + per_step]
                total = sum(mb.size for mb in step)
                for i, mb in enumerate(step):
                    part = weights[start + i] / (3 * len(step))
                    assert part == pytest.approx(mb.shares[rank] / total)
