"""AdaptiveDataParallel in one process: LR scaling, accumulation, AMP, scheduler, checkpoints."""

from __future__ import annotations

import copy
import io
import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from client_kit import sgd_reference_step
from torch import nn

from adl.client_lib import parallel as parallel_mod
from adl.client_lib.gns import unbiased_estimates
from adl.client_lib.parallel import AdaptiveDataParallel
from adl.client_lib.scaling import AdamScale, LinearScale, adascale_gain
from adl.models import Hints
from adl.sched.goodput import BatchBounds, GoodputFunction

DIM = 12


def _data(gen: torch.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(n, DIM, generator=gen)
    return x, x.sum(1, keepdim=True) + torch.randn(n, 1, generator=gen)


def _model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(DIM, 8), nn.Tanh(), nn.Linear(8, 1))


def _flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _step(adp: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> None:
    opt.zero_grad()
    nn.functional.mse_loss(adp(x), y).backward()
    opt.step()


def test_sgd_step_uses_the_adascale_factor_and_restores_the_lr() -> None:
    gen = torch.Generator().manual_seed(0)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    adp = AdaptiveDataParallel(model, opt, init_batch_size=4, report=False)
    for _ in range(5):
        _step(adp, opt, *_data(gen, 16))
    x, y = _data(gen, 16)
    before = _flat(model)
    opt.zero_grad()
    nn.functional.mse_loss(adp(x), y).backward()
    grad = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    stats = adp.grad_params(wait=True)  # the step uses the statistics as of the previous step
    opt.step()
    [factor] = adp.lr_factors
    assert stats is not None and stats.var > 0
    assert factor == pytest.approx(adascale_gain(16 / 4, stats))
    assert 1.0 < factor < 4.0
    torch.testing.assert_close(_flat(model), before - 0.05 * factor * grad)
    assert opt.param_groups[0]["lr"] == 0.05
    assert adp.progress.steps == 6
    assert adp.progress.samples == 96
    assert adp.gain == pytest.approx(factor)


def test_parameter_groups_get_their_own_factor() -> None:
    gen = torch.Generator().manual_seed(1)
    model = _model()
    opt = torch.optim.SGD(
        [{"params": model[0].parameters()}, {"params": model[2].parameters(), "lr": 0.01}],
        lr=0.05,
    )
    adp = AdaptiveDataParallel(model, opt, init_batch_size=2, report=False)
    for _ in range(10):
        per_group = adp.gns.group_grad_params(2, wait=True)
        _step(adp, opt, *_data(gen, 16))
    assert len(per_group) == 2
    assert adp.lr_factors == pytest.approx([adascale_gain(8.0, g) for g in per_group])
    assert adp.lr_factors[0] != pytest.approx(adp.lr_factors[1])
    assert [g["lr"] for g in opt.param_groups] == [0.05, 0.01]


def test_accumulation_averages_micro_batches_and_uses_the_first_micro_gradient() -> None:
    gen = torch.Generator().manual_seed(2)
    model = _model()
    reference = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    adp = AdaptiveDataParallel(
        model, opt, scaling_rule=LinearScale(), init_batch_size=8, report=False
    )
    x, y = _data(gen, 24)
    opt.zero_grad()
    with adp.no_sync():
        nn.functional.mse_loss(adp(x[:8]), y[:8]).backward()
        nn.functional.mse_loss(adp(x[8:16]), y[8:16]).backward()
    nn.functional.mse_loss(adp(x[16:]), y[16:]).backward()
    opt.step()
    # Reference: one plain step on the whole batch of 24 with LR x 3 (linear rule, B0 = 8).
    sgd_reference_step(reference, x, y, 0.1 * 3.0)
    torch.testing.assert_close(_flat(model), _flat(reference))
    assert adp.progress.samples == 24
    assert adp.gns.updates == 1  # first micro-gradient (b=8) against the mean (B=24)


def _wrapped_and_whole(
    model: nn.Module,
) -> tuple[nn.Module, torch.optim.Optimizer, AdaptiveDataParallel]:
    """A copy of ``model`` to compute whole-batch reference gradients with, and ``model``
    wrapped for accumulation (B0 = 8)."""
    whole = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    return whole, opt, AdaptiveDataParallel(model, opt, init_batch_size=8, report=False)


def _assert_same_grads(model: nn.Module, whole: nn.Module) -> None:
    for p, q in zip(model.parameters(), whole.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)


def test_with_accumulation_the_gradients_are_the_mean_before_the_step() -> None:
    # What runs between backward() and step() (clipping, norm logging) sees the batch's mean
    # gradient, as it does on several replicas where the comm hook averages: not the sum.
    gen = torch.Generator().manual_seed(3)
    model = _model()
    whole, opt, adp = _wrapped_and_whole(model)
    x, y = _data(gen, 24)
    for _ in range(2):  # the second optimizer step too (the bookkeeping resets per step)
        opt.zero_grad()
        with adp.no_sync():
            nn.functional.mse_loss(adp(x[:8]), y[:8]).backward()
            nn.functional.mse_loss(adp(x[8:16]), y[8:16]).backward()
        nn.functional.mse_loss(adp(x[16:]), y[16:]).backward()
        whole.load_state_dict(model.state_dict())
        whole.zero_grad()
        nn.functional.mse_loss(whole(x), y).backward()  # equal chunks: mean of micro-losses
        _assert_same_grads(model, whole)
        before = _flat(model)
        opt.step()
        assert not torch.equal(before, _flat(model))
    adp.close()


def test_the_mean_holds_with_two_losses_in_the_last_micro_step() -> None:
    # Two backward passes in the last micro-step (or reentrant checkpointing) add two
    # contributions to each gradient: the mean counts each once.
    gen = torch.Generator().manual_seed(4)
    model = _model()
    whole, _, adp = _wrapped_and_whole(model)
    x, y = _data(gen, 16)
    with adp.no_sync():
        nn.functional.mse_loss(adp(x[:8]), y[:8]).backward()
    out = adp(x[8:])
    nn.functional.mse_loss(out, y[8:]).backward(retain_graph=True)
    out.abs().mean().backward()
    whole.zero_grad()
    loss = nn.functional.mse_loss(whole(x[:8]), y[:8]) + nn.functional.mse_loss(whole(x[8:]), y[8:])
    (loss + whole(x[8:]).abs().mean()).div(2).backward()
    _assert_same_grads(model, whole)
    adp.close()


class _TwoHeads(nn.Module):
    """Returns a dict; an auxiliary loss on a hidden layer reaches the parameters too."""

    def __init__(self) -> None:
        super().__init__()
        self.body, self.head = nn.Linear(DIM, 8), nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        hidden = torch.tanh(self.body(x))
        return {"y": self.head(hidden), "aux": hidden.square().mean()}


def test_the_mean_holds_for_dict_outputs_and_auxiliary_losses() -> None:
    gen = torch.Generator().manual_seed(5)
    torch.manual_seed(0)
    model = _TwoHeads()
    whole, opt, adp = _wrapped_and_whole(model)
    x, y = _data(gen, 16)

    def loss(out: dict[str, torch.Tensor], target: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(out["y"], target) + 0.1 * out["aux"]

    with adp.no_sync():
        loss(adp(x[:8]), y[:8]).backward()
    loss(adp(x[8:]), y[8:]).backward()
    ((loss(whole(x[:8]), y[:8]) + loss(whole(x[8:]), y[8:])) / 2).backward()
    _assert_same_grads(model, whole)
    opt.step()
    adp.close()


def test_stepping_in_the_middle_of_an_accumulating_step_warns_once() -> None:
    gen = torch.Generator().manual_seed(6)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    adp = AdaptiveDataParallel(model, opt, init_batch_size=8, report=False)
    x, y = _data(gen, 16)
    for _ in range(2):
        with adp.no_sync():
            nn.functional.mse_loss(adp(x[:8]), y[:8]).backward()
        if _ == 0:
            with pytest.warns(UserWarning, match="is_sync_step"):
                opt.step()
        else:
            opt.step()  # once is enough
        nn.functional.mse_loss(adp(x[8:]), y[8:]).backward()
        opt.step()
    adp.close()


def test_a_wrapper_built_first_in_a_worker_joins_the_job(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Built before the loader or init_process_group, in a process that is a worker of a job,
    # the wrapper joins the job itself, so the model and optimizer are in its checkpoints.
    from adl.client_lib.context import get_context, has_context
    from adl.client_lib.env import shutdown

    assert not has_context()
    monkeypatch.setenv("ADL_JOB", "ns/j")
    monkeypatch.setenv("ADL_CHECKPOINT_DIR", str(tmp_path))
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        adp = AdaptiveDataParallel(model, opt, report=False, name="net")
        assert has_context() and "net" in get_context().states
        adp.close()
    finally:
        shutdown()


def test_a_script_that_set_up_torch_distributed_itself_is_not_joined_again(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch.distributed as dist

    from adl.client_lib.context import has_context

    monkeypatch.setenv("ADL_JOB", "ns/j")
    store = tmp_path / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    try:
        model = _model()
        adp = AdaptiveDataParallel(model, torch.optim.SGD(model.parameters(), lr=0.1), report=False)
        assert not has_context() and adp.world_size == 1
        adp.close()
    finally:
        dist.destroy_process_group()


def test_stats_interval_measures_every_nth_step_alone_as_consecutive_pairs() -> None:
    gen = torch.Generator().manual_seed(7)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with pytest.raises(ValueError):
        AdaptiveDataParallel(model, opt, report=False, stats_interval=0)
    adp = AdaptiveDataParallel(model, opt, init_batch_size=4, report=False, stats_interval=4)
    pairs = []
    observe = adp.gns.observe_consecutive

    def spy(grads, index, batch):  # type: ignore[no-untyped-def]
        pairs.append(adp.progress.steps)
        observe(grads, index, batch)

    adp.gns.observe_consecutive = spy  # type: ignore[method-assign]
    for _ in range(12):
        _step(adp, opt, *_data(gen, 16))
    # Alone, a measurement pairs two consecutive steps: steps 3+4 and 7+8 (step 0 has no
    # predecessor), so two updates in twelve steps, and the LR follows them.
    assert pairs == [0, 3, 4, 7, 8, 11]
    assert adp.gns.updates == 2
    stats = adp.grad_params(wait=True)
    assert stats is not None and adp.lr_factors[0] == pytest.approx(adascale_gain(4.0, stats))


def test_stats_interval_with_accumulation_still_averages_every_step() -> None:
    gen = torch.Generator().manual_seed(8)
    model = _model()
    reference = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    adp = AdaptiveDataParallel(
        model, opt, scaling_rule=LinearScale(), init_batch_size=8, report=False, stats_interval=3
    )
    for _ in range(3):
        x, y = _data(gen, 16)
        opt.zero_grad()
        _accumulate(adp, x[:8], y[:8])
        nn.functional.mse_loss(adp(x[8:]), y[8:]).backward()
        opt.step()
        sgd_reference_step(reference, x, y, 0.1 * 2.0)
    torch.testing.assert_close(_flat(model), _flat(reference))
    # Steps 0 and 2 (alone, the step before a measured one is measured too), not step 1.
    assert adp.gns.updates == 2


def test_noise_statistics_from_accumulation_match_the_formula() -> None:
    gen = torch.Generator().manual_seed(3)
    model = _model()
    probe = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # parameters stay put
    adp = AdaptiveDataParallel(model, opt, init_batch_size=4, report=False)
    x, y = _data(gen, 16)
    opt.zero_grad()
    for i in range(3):  # three accumulation micro-batches of 4, then the synchronizing one
        _accumulate(adp, x[4 * i : 4 * i + 4], y[4 * i : 4 * i + 4])
    nn.functional.mse_loss(adp(x[12:]), y[12:]).backward()
    opt.step()
    nn.functional.mse_loss(probe(x[:4]), y[:4]).backward()
    local = sum(p.grad.square().sum() for p in probe.parameters())
    probe.zero_grad()
    nn.functional.mse_loss(probe(x), y).backward()
    glob = sum(p.grad.square().sum() for p in probe.parameters())
    sqr, tr = unbiased_estimates(local.reshape(1), 4, glob.reshape(1), 16)
    got = adp.gns.sqr_tr(wait=True)
    assert got is not None
    assert got[0][0] == pytest.approx(sqr.item(), rel=1e-4)
    assert got[1][0] == pytest.approx(tr.item(), rel=1e-4)


def _accumulate(adp: AdaptiveDataParallel, x: torch.Tensor, y: torch.Tensor) -> None:
    with adp.no_sync():
        nn.functional.mse_loss(adp(x), y).backward()


def test_grad_scaler_statistics_equal_unscaled_ones_and_skip_inf_steps() -> None:
    def run(use_scaler: bool, accumulate: bool) -> AdaptiveDataParallel:
        gen = torch.Generator().manual_seed(4)
        model = _model()
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12, enabled=use_scaler)
        adp = AdaptiveDataParallel(model, opt, grad_scaler=scaler, init_batch_size=4, report=False)
        for _ in range(6):
            x, y = _data(gen, 16)
            opt.zero_grad()
            if accumulate:
                with adp.no_sync():
                    scaler.scale(nn.functional.mse_loss(adp(x[:8]), y[:8])).backward()
                x, y = x[8:], y[8:]
            scaler.scale(nn.functional.mse_loss(adp(x), y)).backward()
            scaler.step(opt)
            scaler.update()
        adp.grad_scaler_ref = scaler  # type: ignore[attr-defined]
        return adp

    for accumulate in (False, True):
        plain, scaled = run(False, accumulate), run(True, accumulate)
        a, b = plain.gns.sqr_tr(wait=True), scaled.gns.sqr_tr(wait=True)
        assert a is not None and b is not None
        assert b[0][0] == pytest.approx(a[0][0], rel=1e-3)
        assert b[1][0] == pytest.approx(a[1][0], rel=1e-3)
        torch.testing.assert_close(_flat(plain._model), _flat(scaled._model))

    # An overflowing step is skipped by the scaler: no progress, statistics untouched.
    adp = scaled
    scaler = adp.grad_scaler_ref  # type: ignore[attr-defined]
    before = (adp.progress.steps, adp.gns.state_dict()["state"])
    x, y = _data(torch.Generator().manual_seed(5), 16)
    adp.optimizer.zero_grad()
    scaler.scale(nn.functional.mse_loss(adp(x), y)).backward()
    next(iter(adp._model.parameters())).grad[0, 0] = float("inf")
    scaler.step(adp.optimizer)
    scaler.update()
    assert (adp.progress.steps, adp.gns.state_dict()["state"]) == before


def test_bf16_autocast_keeps_float32_statistics() -> None:
    gen = torch.Generator().manual_seed(6)
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    adp = AdaptiveDataParallel(model, opt, init_batch_size=4, report=False)
    assert isinstance(adp.scaling_rule, AdamScale)
    for _ in range(4):
        x, y = _data(gen, 16)
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = adp(x)
        nn.functional.mse_loss(out.float(), y).backward()
        stats = adp.grad_params(wait=True)
        opt.step()
    assert stats is not None
    assert math.isfinite(stats.sqr) and math.isfinite(stats.var)
    assert adp.lr_factors[0] == pytest.approx(math.sqrt(adascale_gain(4.0, stats)))


def test_scheduler_advances_once_per_scale_invariant_step() -> None:
    gen = torch.Generator().manual_seed(7)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda k: 0.99**k)
    adp = AdaptiveDataParallel(model, opt, lr_scheduler=sched, init_batch_size=2, report=False)
    for _ in range(10):
        _step(adp, opt, *_data(gen, 32))
    assert adp.progress.progress > 12  # gain > 1 at 16x B0
    assert sched.last_epoch == math.floor(adp.progress.progress)
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05 * 0.99**sched.last_epoch)


def test_a_fixed_length_schedule_stops_at_its_end_instead_of_raising() -> None:
    """OneCycleLR raises when stepped past ``total_steps``; progress may pass
    epochs x dataset / B0 by a fraction of a step per epoch (the short last step of an epoch
    counts for more than its samples), so the last epoch of a run could crash."""
    gen = torch.Generator().manual_seed(7)
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.01, total_steps=3)
    adp = AdaptiveDataParallel(model, opt, lr_scheduler=sched, init_batch_size=8, report=False)
    for _ in range(5):
        _step(adp, opt, *_data(gen, 8))
    assert adp.progress.progress == 5.0 and sched.last_epoch == 3
    assert opt.param_groups[0]["lr"] == pytest.approx(sched.get_last_lr()[0])


def test_a_fixed_length_schedule_after_a_warm_up_stops_at_its_end_too() -> None:
    gen = torch.Generator().manual_seed(7)
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=0.01)
    warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=2)
    cycle = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.01, total_steps=3)
    sched = torch.optim.lr_scheduler.SequentialLR(opt, [warm, cycle], milestones=[2])
    adp = AdaptiveDataParallel(model, opt, lr_scheduler=sched, init_batch_size=8, report=False)
    for _ in range(7):
        _step(adp, opt, *_data(gen, 8))
    assert adp.progress.progress == 7.0 and cycle.last_epoch == 3


def test_a_cosine_schedule_holds_its_floor_instead_of_climbing_back() -> None:
    """CosineAnnealingLR stepped past ``T_max`` climbs back towards the initial LR; progress
    may pass epochs x dataset / B0 (the example's ``T_max``) by a fraction of a step per
    epoch, so the last steps of a run would train at a rising LR."""
    gen = torch.Generator().manual_seed(7)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=3, eta_min=0.001)
    adp = AdaptiveDataParallel(model, opt, lr_scheduler=sched, init_batch_size=8, report=False)
    lrs = []
    for _ in range(6):
        _step(adp, opt, *_data(gen, 8))
        lrs.append(opt.param_groups[0]["lr"])
    assert adp.progress.progress == 6.0 and sched.last_epoch == 3
    assert lrs == sorted(lrs, reverse=True)  # never climbs
    assert lrs[-1] == pytest.approx(0.001)


def test_a_cosine_schedule_after_a_warm_up_holds_its_floor_too() -> None:
    gen = torch.Generator().manual_seed(7)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=2)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=3)
    sched = torch.optim.lr_scheduler.SequentialLR(opt, [warm, cosine], milestones=[2])
    adp = AdaptiveDataParallel(model, opt, lr_scheduler=sched, init_batch_size=8, report=False)
    for _ in range(8):
        _step(adp, opt, *_data(gen, 8))
    assert adp.progress.progress == 8.0 and cosine.last_epoch == 3
    assert opt.param_groups[0]["lr"] == pytest.approx(0.0)


def test_adaptive_state_round_trip() -> None:
    gen = torch.Generator().manual_seed(8)

    def make() -> tuple[AdaptiveDataParallel, torch.optim.Optimizer]:
        model = _model()
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        return AdaptiveDataParallel(model, opt, init_batch_size=4, report=False), opt

    adp, opt = make()
    for _ in range(5):
        _step(adp, opt, *_data(gen, 16))
    buf = io.BytesIO()
    torch.save(adp.adaptive_state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)  # loadable without arbitrary pickle execution
    other, other_opt = make()
    other.load_adaptive_state_dict(state)
    assert other.progress == adp.progress
    assert other.gns.sqr_tr(wait=True) == adp.gns.sqr_tr(wait=True)
    torch.testing.assert_close(_flat(other._model), _flat(adp._model))
    x, y = _data(gen, 16)
    _step(adp, opt, x, y)
    _step(other, other_opt, x, y)
    torch.testing.assert_close(_flat(other._model), _flat(adp._model))
    assert set(adp.state_dict()) == set(adp._model.state_dict())


def test_context_integration(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sync steps, checkpoint registry and goodput provider come from the job context."""
    registered: list[Any] = []
    ctx = SimpleNamespace(
        is_sync_step=True,
        register=registered.append,
        goodput_provider=None,
        batch_bounds=BatchBounds(4, 256, (2, 64)),
        init_batch_size=4,
        local_bsz=8,
    )
    monkeypatch.setattr(parallel_mod, "_context", lambda: ctx)
    gen = torch.Generator().manual_seed(9)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    adp = AdaptiveDataParallel(model, opt, report=False)
    assert [s.name for s in registered] == ["adaptive_data_parallel"]
    assert ctx.goodput_provider is not None
    for i in range(12):
        ctx.is_sync_step = i % 2 == 1  # the data loader says: accumulate every other batch
        x, y = _data(gen, 8)
        if i % 2 == 0:
            opt.zero_grad()
        nn.functional.mse_loss(adp(x), y).backward()
        if ctx.is_sync_step:
            opt.step()
    assert adp.progress.steps == 6
    assert adp.progress.samples == 6 * 16
    assert adp.init_batch_size == 4
    provider = ctx.goodput_provider
    assert isinstance(provider(ctx.batch_bounds), GoodputFunction)
    hints = adp.hints()
    assert isinstance(hints, Hints)
    assert hints.grad_params is not None and hints.perf_params is not None
    assert hints.max_batch_size == 256
    assert hints.progress == pytest.approx(adp.progress.progress)
    state = registered[0].state_dict()
    registered[0].load_state_dict(state)
    assert adp.progress.steps == 6


def test_eval_forward_does_not_count_as_a_step() -> None:
    gen = torch.Generator().manual_seed(10)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    adp = AdaptiveDataParallel(model, opt, init_batch_size=4, report=False)
    _step(adp, opt, *_data(gen, 8))
    with torch.no_grad():
        adp(_data(gen, 100)[0])
    adp.eval()
    adp(_data(gen, 100)[0])
    adp.train()
    _step(adp, opt, *_data(gen, 8))
    assert adp.progress.samples == 16
