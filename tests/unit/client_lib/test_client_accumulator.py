"""The metrics Accumulator in one process: sums, checkpointing, epochs that survive restarts."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch.utils.data import TensorDataset

import adl
from adl.client_lib.context import JobContext

MakeContext = Callable[..., JobContext]


def test_sums_and_synchronized_totals(make_context: MakeContext) -> None:
    make_context()
    acc = adl.Accumulator("m")
    acc["loss"] += 1.5
    acc["loss"] += 2.5
    acc.update_sums({"loss": 1.0, "n": 3})
    assert acc["missing"] == 0.0 and "missing" not in acc
    with acc.synchronized() as totals:
        assert dict(totals) == {"loss": 5.0, "n": 3.0}
    assert len(acc) == 2 and list(acc) == ["loss", "n"]
    acc.reset()
    assert dict(acc) == {}


def test_totals_survive_a_restart_without_double_counting(make_context: MakeContext) -> None:
    ctx = make_context()
    acc = adl.Accumulator("m")
    acc["samples"] += 10  # not yet synchronized: folded in by the checkpoint
    ctx.save()
    make_context()
    again = adl.Accumulator("m")
    assert again["samples"] == 10.0
    again["samples"] += 5
    assert again.sync() == {"samples": 15.0}


def test_epochs_resume_where_the_checkpoint_was_taken(make_context: MakeContext) -> None:
    ctx = make_context()
    seen = []
    for epoch in adl.remaining_epochs_until(5):
        seen.append(epoch)
        if epoch == 2:
            ctx.save()  # checkpoint taken during epoch 2
            break
    make_context()
    assert list(adl.remaining_epochs_until(5)) == [2, 3, 4]
    with pytest.raises(ValueError):
        next(iter(adl.remaining_epochs_until(-1)))


def test_declared_epochs_give_the_total_progress(make_context: MakeContext) -> None:
    ctx = make_context()
    adl.AdaptiveDataLoader(TensorDataset(torch.arange(100)), batch_size=10, name="data")
    assert ctx.total_progress is None
    next(iter(adl.remaining_epochs_until(3)))
    assert ctx.total_progress == pytest.approx(3 * 100 / 10)
