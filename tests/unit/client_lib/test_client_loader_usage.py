"""What a training script does with its loaders beyond one training pass: validation loaders
built in any order, several passes per epoch, loaders built again, unsupported datasets."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch
from torch import nn
from torch.utils.data import IterableDataset, TensorDataset

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


def _ids(loader: adl.AdaptiveDataLoader) -> list[int]:
    return [int(i) for (batch,) in loader for i in batch]


def _indexed(n: int) -> TensorDataset:
    return TensorDataset(torch.arange(n))


def test_validating_several_times_per_epoch_runs_whole_passes(make_context: MakeContext) -> None:
    make_context()
    train = adl.AdaptiveDataLoader(_indexed(40), batch_size=8, name="train")
    val = adl.AdaptiveDataLoader(_indexed(30), batch_size=8, name="val")
    passes: list[list[int]] = []
    for _ in adl.remaining_epochs_until(2):
        for i, _batch in enumerate(train):
            if i % 2 == 1:
                assert len(val) == 4
                passes.append(_ids(val))
    assert len(passes) == 4 and all(sorted(p) == list(range(30)) for p in passes)


def test_a_pass_done_before_a_restart_is_not_run_again(make_context: MakeContext) -> None:
    """Validation first in the epoch, stopped during training: the resumed epoch does not
    validate again (its results are in the checkpoint), the next epoch does."""
    ctx = make_context()
    val = adl.AdaptiveDataLoader(_indexed(30), batch_size=8, name="val")
    train = adl.AdaptiveDataLoader(_indexed(40), batch_size=8, name="train")
    epochs = adl.remaining_epochs_until(2)
    assert next(epochs) == 0
    assert len(_ids(val)) == 30
    for i, _batch in enumerate(train):
        if i == 1:
            break
    ctx.save()
    make_context()
    val = adl.AdaptiveDataLoader(_indexed(30), batch_size=8, name="val")
    train = adl.AdaptiveDataLoader(_indexed(40), batch_size=8, name="train")
    seen = {}
    for epoch in adl.remaining_epochs_until(2):
        seen[epoch] = (len(val), len(_ids(val)), len(_ids(train)))
    assert seen == {0: (0, 0, 24), 1: (4, 30, 40)}


def test_a_named_loader_built_again_goes_on_where_it_stopped(make_context: MakeContext) -> None:
    make_context()

    def validation_loader() -> adl.AdaptiveDataLoader:  # as in an evaluate() function
        return adl.AdaptiveDataLoader(_indexed(30), batch_size=8, name="val")

    passes: list[list[int]] = []
    for _ in adl.remaining_epochs_until(2):
        first: list[int] = []
        for (batch,) in validation_loader():
            first.extend(int(i) for i in batch)
            break
        passes.append(first + _ids(validation_loader()))  # the rest of the same pass
        passes.append(_ids(validation_loader()))  # a new pass
    assert len(passes) == 4 and all(sorted(p) == list(range(30)) for p in passes)


def test_an_iterable_dataset_is_refused_when_the_loader_is_built(
    make_context: MakeContext,
) -> None:
    make_context()

    class Stream(IterableDataset[int]):
        def __iter__(self) -> Iterator[int]:
            return iter(range(10))

        def __len__(self) -> int:
            return 10

    with pytest.raises(TypeError, match=r"map-style dataset .* not Stream"):
        adl.AdaptiveDataLoader(Stream(), batch_size=4)


def test_an_epoch_without_a_batch_is_said_once(
    make_context: MakeContext, caplog: pytest.LogCaptureFixture
) -> None:
    make_context()
    tiny = adl.AdaptiveDataLoader(_indexed(5), batch_size=32, drop_last=True, name="tiny")
    with caplog.at_level("WARNING"):
        for _ in adl.remaining_epochs_until(2):
            assert _ids(tiny) == []
    said = [r.getMessage() for r in caplog.records if "gives no batch" in r.getMessage()]
    assert len(said) == 1 and "tiny" in said[0] and "drop_last" in said[0]
