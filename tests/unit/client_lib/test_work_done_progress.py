"""The progress a job reports once every declared epoch has run is its total: the work is done.

Progress is the sum of AdaScale gains (scale-invariant steps), the total is the declared
samples over the initial batch size. They differ at the end when a step's batch was not the
initial one: a partial last batch of an epoch is worth more than its share of samples once the
job has gradient statistics (two replicas on the digits tutorial ended at 680 of 674), a larger
batch less. The status must still show the declared work done, and the scheduler no work left.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import adl
from adl.client_lib.context import JobContext

MakeContext = Callable[..., JobContext]


def _job(make_context: MakeContext) -> tuple[JobContext, adl.AdaptiveDataParallel, nn.Module]:
    ctx = make_context()
    data = TensorDataset(torch.randn(40, 3), torch.randn(40, 1))
    loader = adl.AdaptiveDataLoader(data, batch_size=16, name="data")
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    adp = adl.AdaptiveDataParallel(model, opt, report=False)
    adp.loader = loader  # type: ignore[attr-defined]
    return ctx, adp, model


def _epoch(adp: adl.AdaptiveDataParallel) -> None:
    for x, y in adp.loader:  # type: ignore[attr-defined]
        adp.optimizer.zero_grad()
        nn.functional.mse_loss(adp(x), y).backward()
        adp.optimizer.step()


def test_the_reported_progress_is_the_total_once_every_declared_epoch_ran(
    make_context: MakeContext,
) -> None:
    ctx, adp, _ = _job(make_context)
    for epoch in adl.remaining_epochs_until(2):
        _epoch(adp)
        adp.progress.progress += 0.4  # what gains above a partial batch's share add up to
        hints = adp.hints()
        assert hints is not None and ctx.total_progress == pytest.approx(2 * 40 / 16)
        if epoch == 0:  # under way: what the steps were worth, as counted
            assert hints.progress == pytest.approx(adp.progress.progress)
    hints = adp.hints()
    assert hints is not None
    assert adp.progress.progress != pytest.approx(ctx.total_progress)
    assert hints.progress == pytest.approx(ctx.total_progress)
    assert hints.work_done
