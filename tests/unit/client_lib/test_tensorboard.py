"""Opt-in TensorBoard scalars from AdaptiveDataParallel (adl.client_lib.tensorboard)."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from adl import contract as C
from adl.client_lib.context import JobContext
from adl.client_lib.data import AdaptiveDataLoader
from adl.client_lib.parallel import AdaptiveDataParallel
from adl.client_lib.tensorboard import INSTALL_HINT, TensorBoardScalars

MakeContext = Callable[..., JobContext]

TAGS = {
    "adl/batch_size",
    "adl/local_batch_size",
    "adl/accum_steps",
    "adl/replicas",
    "adl/lr_scale",
    "adl/progress",
    "adl/grad_noise_scale",
    "adl/goodput",
}


@pytest.fixture(autouse=True)
def _no_tensorboard_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test states its own settings; none leak in from the shell running the tests."""
    monkeypatch.delenv(C.ENV_TENSORBOARD_DIR, raising=False)
    monkeypatch.delenv(C.ENV_TENSORBOARD_EVERY, raising=False)


def _data(n: int) -> TensorDataset:
    # A learnable linear target with little noise: the true gradient is large against the
    # noise early on, so the noise estimate (and with it goodput) is usable within a few steps.
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1 * torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


def _job(batch_size: int = 8, **adp_kwargs: Any) -> tuple[AdaptiveDataParallel, Callable]:
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    adp = AdaptiveDataParallel(model, opt, **adp_kwargs)
    loader = AdaptiveDataLoader(_data(1000), batch_size=batch_size, name="data")

    def train(steps: int) -> None:
        for done, (x, y) in enumerate(loader, start=1):
            opt.zero_grad()
            nn.functional.mse_loss(adp(x), y).backward()
            opt.step()
            if done == steps:
                return
        raise AssertionError("the data set is too small for the steps asked")

    return adp, train


def _scalars(directory: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(directory))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def test_a_standalone_run_writes_the_scalars_every_n_steps(
    make_context: MakeContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logdir = tmp_path / "tb"
    monkeypatch.setenv(C.ENV_TENSORBOARD_DIR, str(logdir))
    monkeypatch.setenv(C.ENV_TENSORBOARD_EVERY, "5")
    make_context()
    # B0 = 4 while the loader hands out 8: the scaling rule then raises the LR (scale 2).
    adp, train = _job(batch_size=8, init_batch_size=4)
    train(40)
    adp.close()  # flushes; a job that only exits gets the same at interpreter exit

    scalars = _scalars(logdir)
    assert set(scalars) >= TAGS
    assert [s for s, _ in scalars["adl/batch_size"]] == list(range(5, 41, 5))
    for tag, points in scalars.items():
        steps = [s for s, _ in points]
        assert steps == sorted(set(steps)), tag  # increasing, no step twice
        assert all(math.isfinite(v) for _, v in points), tag
    assert {v for _, v in scalars["adl/batch_size"]} == {8.0}  # what the loader used
    assert {v for _, v in scalars["adl/local_batch_size"]} == {8.0}
    assert {v for _, v in scalars["adl/accum_steps"]} == {0.0}
    assert {v for _, v in scalars["adl/replicas"]} == {1.0}
    # A step at twice B0 is worth between one and two steps at B0, and so is the LR factor.
    progress = scalars["adl/progress"]
    assert all(step < p <= 2 * step for step, p in progress)
    assert progress[-1][1] == pytest.approx(adp.progress.progress, rel=1e-6)
    lr = scalars["adl/lr_scale"]
    assert all(1.0 <= v <= 2.0 for _, v in lr) and max(v for _, v in lr) > 1.0
    assert lr[-1][1] == pytest.approx(adp.lr_factors[0], rel=1e-6)
    grad = adp.grad_params()
    assert grad is not None
    # the noise scale in samples: B0 * var / sqr
    noise = scalars["adl/grad_noise_scale"]
    assert all(v > 0 for _, v in noise)
    assert noise[-1][1] == pytest.approx(4 * grad.var / grad.sqr, rel=1e-4)
    assert all(v > 0 for _, v in scalars["adl/goodput"])


def test_nothing_is_written_unless_asked(
    make_context: MakeContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # SummaryWriter's own default would be ./runs
    make_context()
    adp, train = _job()
    train(25)
    adp.close()
    assert not list(tmp_path.rglob("events.out.tfevents.*"))
    assert not (tmp_path / "runs").exists()


def test_a_resumed_job_continues_the_curves_in_the_same_directory(
    make_context: MakeContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch.utils.tensorboard import SummaryWriter

    # The local writer often lands events before any flush; what makes them certain to be on
    # disk (or in remote storage, which buffers) is the flush, so count the flushes.
    flushes: list[int] = []
    flush = SummaryWriter.flush

    def counted(self: SummaryWriter) -> None:
        flushes.append(1)
        flush(self)

    monkeypatch.setattr(SummaryWriter, "flush", counted)
    logdir = tmp_path / "tb"
    ctx = make_context()
    adp, train = _job(tensorboard_dir=logdir)  # the argument alone asks for it (default N=10)
    train(25)
    assert not flushes  # writing every N steps does not flush (no per-write file sync)
    ctx.save()  # puts a point at the saved step and flushes
    # on disk now, without a close: a preemption (which checkpoints, then exits) loses nothing
    assert flushes
    assert [s for s, _ in _scalars(logdir)["adl/batch_size"]] == [10, 20, 25]
    train(7)  # step 30 is written, then the job dies before its next checkpoint
    adp.close()

    make_context()  # the restart: it resumes from step 25
    adp, train = _job(tensorboard_dir=logdir)
    assert adp.progress.steps == 25
    train(15)
    adp.close()

    assert len(list(logdir.glob("events.out.tfevents.*"))) == 2  # one file per run
    scalars = _scalars(logdir)
    # Step 30 of the dead run is hidden; the resumed run's 30 and 40 continue the curve.
    assert [s for s, _ in scalars["adl/batch_size"]] == [10, 20, 25, 30, 40]
    assert [v for _, v in scalars["adl/progress"]] == pytest.approx([10, 20, 25, 30, 40])


@pytest.mark.parametrize("bad", ["0", "-3", "100001", "ten", "2.5"])
def test_a_bad_interval_names_the_variable(
    make_context: MakeContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: str
) -> None:
    monkeypatch.setenv(C.ENV_TENSORBOARD_DIR, str(tmp_path / "tb"))
    monkeypatch.setenv(C.ENV_TENSORBOARD_EVERY, bad)
    make_context()
    with pytest.raises(ValueError, match=C.ENV_TENSORBOARD_EVERY):
        _job()
    # checked on every rank, so no rank goes on alone while another fails
    with pytest.raises(ValueError, match=C.ENV_TENSORBOARD_EVERY):
        TensorBoardScalars.create(tmp_path / "tb", rank=1)


def test_a_missing_package_fails_at_once_with_the_install_hint(
    make_context: MakeContext, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # `import tensorboard` now fails
    make_context()
    with pytest.raises(ImportError, match=INSTALL_HINT.replace("[", r"\[").replace("]", r"\]")):
        _job(tensorboard_dir=tmp_path / "tb")
    assert not (tmp_path / "tb").exists()


def test_other_ranks_write_nothing(tmp_path: Path) -> None:
    assert TensorBoardScalars.create(tmp_path / "tb", rank=1) is None
    assert TensorBoardScalars.create(None, rank=0) is None  # not asked
    assert TensorBoardScalars.create(tmp_path / "tb", rank=0) is not None
