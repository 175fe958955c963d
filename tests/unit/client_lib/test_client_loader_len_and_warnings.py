"""``len(AdaptiveDataLoader)`` during iteration, and the warning for a hand-written epoch loop."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

import adl
from adl.client_lib.context import JobContext

MakeContext = Callable[..., JobContext]


def _data(n: int) -> TensorDataset:
    return TensorDataset(torch.arange(n))


def test_len_is_the_batches_the_iteration_yields_with_accumulation(
    make_context: MakeContext,
) -> None:
    ctx = make_context()
    loader = adl.AdaptiveDataLoader(_data(40), batch_size=8, name="d")
    loader.autoscale_batch_size(8, local_bsz_bounds=(1, 2))  # B0 = 4 micro-batches of 2
    assert len(loader) == 20
    lens = []
    with pytest.raises(SystemExit):
        for _ in adl.remaining_epochs_until(1):
            for i, _batch in enumerate(loader):
                lens.append(len(loader))
                if i == 4:  # stops at the next optimizer-step boundary, after micro-batch 7
                    assert ctx.preemption is not None
                    ctx.preemption.request_stop()
    assert loader.accumulation_steps == 3
    assert lens == [20] * 8  # constant: i / len(loader) ends at 100%, not 1000%
    # Restarted mid-epoch: the iteration yields the 12 micro-batches left, and says so.
    make_context()
    loader = adl.AdaptiveDataLoader(_data(40), batch_size=8, name="d")
    loader.autoscale_batch_size(8, local_bsz_bounds=(1, 2))
    for epoch in adl.remaining_epochs_until(1):
        assert epoch == 0 and len(loader) == 12
        assert [len(loader) for _batch in loader] == [12] * 12


def test_a_range_epoch_loop_warns_once_with_the_fix(make_context: MakeContext) -> None:
    make_context()
    loader = adl.AdaptiveDataLoader(_data(8), batch_size=4, name="d")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _epoch in range(3):
            for _batch in loader:
                pass
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1, messages
    assert "epoch 1 outside adl.remaining_epochs_until()" in messages[0]
    assert "for epoch in adl.remaining_epochs_until(n):" in messages[0]


def test_a_range_epoch_loop_warns_at_the_first_pass_after_a_restore(
    make_context: MakeContext,
) -> None:
    ctx = make_context()
    loader = adl.AdaptiveDataLoader(_data(8), batch_size=4, name="d")
    with pytest.warns(UserWarning):
        for _epoch in range(2):
            for _batch in loader:
                pass
    ctx.save()
    make_context()
    loader = adl.AdaptiveDataLoader(_data(8), batch_size=4, name="d")
    with pytest.warns(UserWarning, match="starts training epoch 2"):
        next(iter(loader))


def test_no_warning_for_epochs_or_repeated_validation(make_context: MakeContext) -> None:
    make_context()
    train = adl.AdaptiveDataLoader(_data(8), batch_size=4, name="train")
    val = adl.AdaptiveDataLoader(_data(4), batch_size=2, name="val")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _epoch in adl.remaining_epochs_until(3):
            for _batch in train:
                pass
        for _ in range(3):  # validation passes outside the epoch loop, without gradients
            with torch.no_grad():
                for _batch in val:
                    pass


def test_batch_configuration_changes_are_logged_with_the_lr_scale(
    make_context: MakeContext, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="adl.client_lib.data")
    ctx = make_context()
    loader = adl.AdaptiveDataLoader(_data(32), batch_size=8, name="d")
    model = nn.Linear(1, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    adl.AdaptiveDataParallel(model, opt, report=False)
    for _ in adl.remaining_epochs_until(2):
        for _batch in loader:
            pass
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("adl: ")]
    assert lines == ["adl: batch size 8 (local 8 x 1 replicas, accumulation 0), lr scale 1.00"]
    ctx.save()
    # Restarted with a micro-batch bound that the checkpoint's configuration exceeds.
    caplog.clear()
    make_context()
    loader = adl.AdaptiveDataLoader(_data(32), batch_size=8, name="d")
    loader.autoscale_batch_size(16, local_bsz_bounds=(1, 2))
    model = nn.Linear(1, 1)
    adl.AdaptiveDataParallel(model, torch.optim.SGD(model.parameters(), lr=0.1), report=False)
    for _ in adl.remaining_epochs_until(3):
        next(iter(loader))
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("adl: ")]
    assert lines == [
        "adl: batch size 8 -> 8 (local 2 x 1 replicas, accumulation 3), lr scale 1.00 -> 1.00"
    ]


def test_len_before_iterating_after_a_restore_at_another_world_size(
    make_context: MakeContext, tmp_path
) -> None:  # type: ignore[no-untyped-def]
    """Restored from a checkpoint of 2 replicas (micro-batch 4 of B0 = 8) on 1, the next
    iteration splits B0 over 1 replica: ``len`` must say so before it starts (a framework such
    as Lightning reads it then, and ends the epoch after that many batches)."""
    from adl.client_lib import checkpoint

    state = {"epoch": 0, "offset": 16, "size": 40, "local_bsz": 4, "accum_steps": 0}
    state["world_size"] = 2
    checkpoint.write(tmp_path / "ckpt", {"d": state, "adl.epoch": {"epoch": 0}})
    make_context()
    loader = adl.AdaptiveDataLoader(_data(40), batch_size=8, name="d")
    for _epoch in adl.remaining_epochs_until(1):
        expected = len(loader)
        assert [len(batch) for (batch,) in loader] == [8, 8, 8]  # the 24 samples left
        assert expected == 3
