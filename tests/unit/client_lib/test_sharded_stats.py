"""The per-group squared norms of an FSDP2 reduce-scatter buffer (``world`` rows of padded
shards, one column block per parameter): what the sharded noise statistics add up."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import torch
from torch import nn

from adl.client_lib.gns import GradientNoiseEstimator
from adl.client_lib.sharded_stats import ShardedGradStats


def _stats(groups: list[int]) -> ShardedGradStats:
    params = [nn.Parameter(torch.zeros(1)) for _ in groups]
    n = max(groups) + 1
    return ShardedGradStats(params, groups, n, GradientNoiseEstimator(n), 2, 1)


def _layout(sizes: list[int], groups: list[int]) -> Any:
    single = groups[0] if len(set(groups)) == 1 and groups[0] >= 0 else None
    return SimpleNamespace(sizes=sizes, groups=groups, single=single)


def test_norms_are_split_by_the_optimizers_groups_across_every_row() -> None:
    stats = _stats([0, 1, 0])
    rows = torch.arange(2 * 9, dtype=torch.float32).reshape(2, 9)  # 2 ranks' chunks
    stats._fold(stats.local_sq, rows, _layout([4, 2, 3], [0, 1, 0]), 1.0)
    group0 = rows[:, :4].square().sum() + rows[:, 6:].square().sum()
    group1 = rows[:, 4:6].square().sum()
    torch.testing.assert_close(stats.local_sq, torch.stack([group0, group1]))


def test_a_parameter_outside_the_optimizer_is_left_out_and_one_group_takes_one_dot() -> None:
    stats = _stats([0, 0])
    rows = torch.ones(2, 5)
    stats._fold(stats.global_sq, rows, _layout([2, 3], [0, -1]), 0.25)
    assert stats.global_sq.tolist() == [0.25 * 4]  # only the first parameter's 2 x 2 entries
    stats._fold(stats.global_sq, rows, _layout([2, 3], [0, 0]), 1.0)
    assert stats.global_sq.tolist() == [1.0 + 10.0]


def test_a_buffer_that_does_not_match_the_layout_voids_the_observation() -> None:
    stats = _stats([0, 1])
    stats._fold(stats.local_sq, torch.ones(2, 4), _layout([2, 3], [0, 1]), 1.0)
    assert all(math.isnan(v) for v in stats.local_sq.tolist())
