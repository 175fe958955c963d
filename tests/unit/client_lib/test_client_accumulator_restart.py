"""Accumulators and tracked values after restarts, whatever the script's construction pattern.

The script below has the shape of the MNIST tutorial: ``train()`` and ``evaluate()`` each build
an unnamed Accumulator every epoch, and a tracked dict keeps the best accuracy. It is run once
uninterrupted and once stopped (a real stop request, checkpoint, SystemExit 143) at several
points, restarting each time from the checkpoint; every metric it prints must be the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch.utils.data import TensorDataset

import adl
from adl.client_lib.accumulator import AccumulatorScopeError
from adl.client_lib.context import JobContext
from adl.client_lib.preemption import EXIT_CODE

MakeContext = Callable[..., JobContext]
Stop = tuple[int, str, int]  # (epoch, phase, batch index) at which a stop is requested


def _tutorial(ctx: JobContext, printed: list[Any], stop: Stop | None, epochs: int = 4) -> None:
    train = adl.AdaptiveDataLoader(TensorDataset(torch.arange(40)), batch_size=4, name="train")
    val = adl.AdaptiveDataLoader(TensorDataset(torch.arange(10)), batch_size=3, name="val")
    best = {"accuracy": 0.0, "epoch": -1}
    adl.track("best", best)
    total = adl.Accumulator()  # created once, counts the whole run

    def maybe_stop(epoch: int, phase: str, i: int) -> None:
        if stop == (epoch, phase, i):
            assert ctx.preemption is not None
            ctx.preemption.request_stop()  # what SIGTERM does

    def train_epoch(epoch: int) -> None:
        stats = adl.Accumulator()
        for i, (x,) in enumerate(train):
            stats["samples"] += len(x)
            stats["sum"] += float(x.sum()) * (epoch + 1)
            total["samples"] += len(x)
            maybe_stop(epoch, "train", i)
        with stats.synchronized():
            printed.append((epoch, "train", dict(stats)))

    def evaluate(epoch: int) -> None:
        stats = adl.Accumulator()
        with torch.no_grad():
            for i, (x,) in enumerate(val):
                stats["correct"] += int((x % (epoch + 2) == 0).sum())
                stats["count"] += len(x)
                maybe_stop(epoch, "eval", i)
        with stats.synchronized():
            accuracy = 100.0 * stats["correct"] / stats["count"]
        printed.append((epoch, "eval", accuracy))
        if accuracy > best["accuracy"]:
            best.update(accuracy=accuracy, epoch=epoch)
        printed.append((epoch, "best", dict(best)))

    for epoch in adl.remaining_epochs_until(epochs):
        train_epoch(epoch)
        evaluate(epoch)
    printed.append(("end", "total", total.sync()))


def _run(make_context: MakeContext, stops: list[Stop | None]) -> list[Any]:
    """Run the script once per stop (None: to the end), each run resuming the previous one."""
    printed: list[Any] = []
    for stop in stops:
        ctx = make_context()
        if stop is None:
            _tutorial(ctx, printed, None)
        else:
            with pytest.raises(SystemExit) as exited:
                _tutorial(ctx, printed, stop)
            assert exited.value.code == EXIT_CODE
    return printed


def test_per_epoch_accumulators_and_tracked_best_resume_exactly(make_context: MakeContext) -> None:
    straight = _run(make_context, [None])
    by_key = {(e, kind): value for e, kind, value in straight}
    assert by_key[(0, "train")] == {"samples": 40, "sum": 780.0}
    assert by_key[("end", "total")] == {"samples": 160}
    assert isinstance(by_key[("end", "total")]["samples"], int)  # counts stay ints

    stops: list[Stop | None] = [
        (0, "train", 3),  # mid-training
        (1, "eval", 1),  # mid-evaluation: the train accumulator of epoch 1 is out of scope
        (2, "eval", 3),  # last eval batch: stops at the next epoch's first batch
        (3, "train", 9),  # last train batch
        None,
    ]
    resumed = _run(make_context, stops)
    for epoch, kind, value in resumed:
        assert value == by_key[(epoch, kind)], (epoch, kind, value)
    # Every metric of the uninterrupted run was printed again, none missing.
    assert {(e, k) for e, k, _ in resumed} == set(by_key)


def test_named_accumulator_kept_across_epochs_is_restored(make_context: MakeContext) -> None:
    def script(stop_epoch: int | None) -> Any:
        ctx = make_context()
        loader = adl.AdaptiveDataLoader(TensorDataset(torch.arange(12)), batch_size=4, name="d")
        acc: adl.Accumulator | None = None
        for epoch in adl.remaining_epochs_until(3):
            if acc is None:  # created lazily, in whichever epoch the run starts in
                acc = adl.Accumulator("running")
            for (x,) in loader:
                if epoch == stop_epoch and ctx.preemption is not None:
                    ctx.preemption.request_stop()
                acc["n"] += len(x)
        assert acc is not None
        return acc.sync()

    with pytest.raises(SystemExit):
        script(stop_epoch=1)
    assert script(stop_epoch=None) == {"n": 36}


def test_unnamed_accumulator_used_in_a_later_epoch_raises_at_once(
    make_context: MakeContext,
) -> None:
    make_context()
    acc: adl.Accumulator | None = None
    with pytest.raises(AccumulatorScopeError, match="give it a name"):
        for _epoch in adl.remaining_epochs_until(3):
            if acc is None:
                acc = adl.Accumulator()
            acc["n"] += 1


def test_unnamed_accumulator_of_one_batch_used_at_the_next_raises(
    make_context: MakeContext,
) -> None:
    make_context()
    loader = adl.AdaptiveDataLoader(TensorDataset(torch.arange(8)), batch_size=2, name="d")
    acc: adl.Accumulator | None = None
    with pytest.raises(AccumulatorScopeError, match="batch"):
        for _epoch in adl.remaining_epochs_until(1):
            for (x,) in loader:
                acc = acc or adl.Accumulator()
                acc["n"] += len(x)


def test_per_batch_accumulators_are_not_restored_into_later_batches(
    make_context: MakeContext,
) -> None:
    def script(stop_at: int | None) -> list[Any]:
        ctx = make_context()
        loader = adl.AdaptiveDataLoader(TensorDataset(torch.arange(12)), batch_size=2, name="d")
        seen = []
        for _epoch in adl.remaining_epochs_until(1):
            for i, (x,) in enumerate(loader):
                step = adl.Accumulator()  # one per step, read within the step
                step["sum"] += int(x.sum())
                seen.append(step.sync())
                if i == stop_at and ctx.preemption is not None:
                    ctx.preemption.request_stop()
        return seen

    straight = script(None)  # (writes no checkpoint: it is never stopped)
    with pytest.raises(SystemExit):
        script(2)
    assert script(None) == straight[3:]


def test_accumulators_in_a_hand_written_epoch_loop_raise(make_context: MakeContext) -> None:
    make_context()
    loader = adl.AdaptiveDataLoader(TensorDataset(torch.arange(8)), batch_size=4, name="d")
    with (
        pytest.warns(UserWarning, match="remaining_epochs_until"),
        pytest.raises(AccumulatorScopeError, match="remaining_epochs_until"),
    ):
        for _epoch in range(3):
            stats = adl.Accumulator()
            for (x,) in loader:
                stats["n"] += len(x)


def test_several_named_and_unnamed_created_once_resume(make_context: MakeContext) -> None:
    ctx = make_context()
    a, b, c = adl.Accumulator(), adl.Accumulator("loss"), adl.Accumulator()
    a["n"] += 1
    b["sum"] += 0.5
    c["n"] += 3
    ctx.save()
    make_context()
    a, b, c = adl.Accumulator(), adl.Accumulator("loss"), adl.Accumulator()
    assert (dict(a), dict(b), dict(c)) == ({"n": 1}, {"sum": 0.5}, {"n": 3})
    assert isinstance(a["n"], int) and isinstance(b["sum"], float)


def test_counts_stay_integers(make_context: MakeContext) -> None:
    make_context()
    acc = adl.Accumulator("m")
    acc["n"] += 2
    acc["n"] += torch.tensor(3)
    acc.update_sums({"k": 1, "loss": 0.25})
    acc["loss"] += 1
    with acc.synchronized() as totals:
        assert dict(totals) == {"n": 5, "k": 1, "loss": 1.25}
        assert [type(totals[k]) for k in ("n", "k", "loss")] == [int, int, float]


def test_track_called_every_epoch_keeps_and_resumes_the_value(make_context: MakeContext) -> None:
    def script(stop_epoch: int | None) -> dict[str, Any]:
        ctx = make_context()
        loader = adl.AdaptiveDataLoader(TensorDataset(torch.arange(6)), batch_size=3, name="d")
        best = {"value": -1, "epoch": -1}
        for epoch in adl.remaining_epochs_until(4):
            adl.track("best", best)  # inside the loop, as in a save_best() helper
            for _batch in loader:
                if epoch == stop_epoch and ctx.preemption is not None:
                    ctx.preemption.request_stop()
            score = [3, 7, 5, 6][epoch]
            if score > best["value"]:
                best.update(value=score, epoch=epoch)
        return best

    with pytest.raises(SystemExit):
        script(stop_epoch=2)
    assert script(stop_epoch=None) == {"value": 7, "epoch": 1}
