"""What a training script does with its loaders beyond one training pass: validation loaders
built in any order, several passes per epoch, loaders built again, unsupported datasets."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.utils.data import TensorDataset

import adl
from adl.client_lib.context import JobContext
from adl.client_lib.scaling import LinearScale

MakeContext = Callable[..., JobContext]


def _dataset(n: int) -> TensorDataset:
    return TensorDataset(torch.randn(n, 3), torch.randn(n, 1))


def test_a_validation_loader_built_first_does_not_become_b0(make_context: MakeContext) -> None:
    ctx = make_context()
    val = adl.AdaptiveDataLoader(_dataset(30), batch_size=64, name="val")
    train = adl.AdaptiveDataLoader(_dataset(64), batch_size=16, shuffle=True, name="train")
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    net = adl.AdaptiveDataParallel(model, opt, scaling_rule=LinearScale(), report=False)
    for _ in adl.remaining_epochs_until(1):
        for x, y in train:
            nn.functional.mse_loss(net(x), y).backward()
            opt.step()
            opt.zero_grad()
        with torch.no_grad():
            for x, _y in val:
                net(x)
    assert net.init_batch_size == 16 and net.lr_factors == [1.0]  # steps of B0: LR as written
    assert net.progress.progress == 4.0
    assert (ctx.init_batch_size, ctx.dataset_size, ctx.total_progress) == (16, 64, 4.0)
