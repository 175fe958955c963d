"""Scaling rules: formulas, defaults, progress, and AdaScale's promise at 8x the batch."""

from __future__ import annotations

import math

import pytest
import torch

from adl.client_lib.parallel import AdaptiveDataParallel
from adl.client_lib.scaling import (
    LEGW,
    AdamScale,
    AdaScale,
    LinearScale,
    Progress,
    ScalingRule,
    SqrtScale,
    adascale_gain,
    default_rule,
    rule_from_name,
)
from adl.sched.goodput import GradParams

GRAD = GradParams(sqr=2.0, var=6.0)


@pytest.mark.parametrize("scale", [1.0, 2.0, 8.0, 64.0])
def test_gain_matches_the_formula(scale: float) -> None:
    expected = (GRAD.var + GRAD.sqr) / (GRAD.var / scale + GRAD.sqr)
    assert adascale_gain(scale, GRAD) == pytest.approx(expected)
    assert 1.0 <= adascale_gain(scale, GRAD) <= scale


def test_gain_limits() -> None:
    assert adascale_gain(8.0, GradParams(sqr=0.0, var=1.0)) == pytest.approx(8.0)  # pure noise
    assert adascale_gain(8.0, GradParams(sqr=1.0, var=0.0)) == pytest.approx(1.0)  # no noise
    assert adascale_gain(8.0, None) == 1.0  # no statistics yet


def test_rule_factors() -> None:
    p = Progress()
    g = adascale_gain(4.0, GRAD)
    assert AdaScale().factor(4.0, GRAD, p) == pytest.approx(g)
    assert AdamScale().factor(4.0, GRAD, p) == pytest.approx(math.sqrt(g))
    assert LinearScale().factor(4.0, GRAD, p) == 4.0
    assert SqrtScale().factor(4.0, GRAD, p) == 2.0
    assert AdaScale().factors(4.0, [GRAD, None], p) == pytest.approx([g, 1.0])


def test_legw_warms_up_over_a_scaled_number_of_samples() -> None:
    rule = LEGW(warmup_samples=1000)
    p = Progress()
    assert rule.factor(4.0, None, p) == pytest.approx(2.0 * 1 / 4000)
    p.samples = 1999.0
    assert rule.factor(4.0, None, p) == pytest.approx(2.0 * 0.5)
    p.samples = 10_000.0
    assert rule.factor(4.0, None, p) == pytest.approx(2.0)
    assert LEGW(0).factor(9.0, None, Progress()) == pytest.approx(3.0)


def test_default_rule_follows_the_optimizer() -> None:
    params = [torch.nn.Parameter(torch.zeros(2))]
    assert isinstance(default_rule(torch.optim.SGD(params, lr=0.1)), AdaScale)
    assert isinstance(default_rule(torch.optim.Adam(params)), AdamScale)
    assert isinstance(default_rule(torch.optim.AdamW(params)), AdamScale)
    assert isinstance(rule_from_name("SQRT"), SqrtScale)
    with pytest.raises(ValueError):
        rule_from_name("nope")


def test_progress_counts_gain() -> None:
    p = Progress()
    p.advance(3.0, 128)
    p.advance(1.5, 64)
    assert (p.steps, p.samples, p.progress) == (2, 192.0, 4.5)
    q = Progress()
    q.load_state_dict(p.state_dict())
    assert q == p


# --------------------------------------------------------------------------- 8x batch training

DIM, B0, LR, NOISE = 16, 8, 0.02, 1.0


def _problem() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    w_true = torch.randn(DIM, 1, generator=gen)
    x_eval = torch.randn(4096, DIM, generator=gen)
    return w_true, x_eval, x_eval @ w_true


def _train(
    batch: int, target: float, max_steps: int, rule: ScalingRule
) -> tuple[float, int] | None:
    """(scale-invariant steps, real steps) until the noise-free eval loss is below ``target``."""
    w_true, x_eval, y_eval = _problem()
    gen = torch.Generator().manual_seed(batch)
    model = torch.nn.Linear(DIM, 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    adp = AdaptiveDataParallel(
        model, opt, scaling_rule=rule, init_batch_size=B0, memory_samples=20 * batch, report=False
    )
    for step in range(1, max_steps + 1):
        x = torch.randn(batch, DIM, generator=gen)
        y = x @ w_true + NOISE * torch.randn(batch, 1, generator=gen)
        opt.zero_grad()
        torch.nn.functional.mse_loss(adp(x), y).backward()
        opt.step()
        with torch.no_grad():
            if torch.nn.functional.mse_loss(model(x_eval), y_eval).item() < target:
                return adp.progress.progress, step
    return None


def test_adascale_at_8x_batch_reaches_the_base_loss_in_comparable_scale_invariant_steps() -> None:
    target = 0.05  # the noise-free loss starts at |w_true|^2 ~ 16
    base = _train(B0, target, max_steps=2000, rule=AdaScale())
    big = _train(8 * B0, target, max_steps=2000, rule=AdaScale())
    assert base is not None and big is not None
    base_progress, base_steps = base
    big_progress, big_steps = big
    assert base_progress == base_steps  # at B0 the gain is exactly 1
    assert 0.7 * base_progress <= big_progress <= 1.3 * base_progress, (base, big)
    # The larger batch paid off: far fewer real steps, each worth gain > 1 base steps.
    assert big_steps < base_steps / 2, (base, big)


def test_without_lr_scaling_8x_batch_wastes_most_of_its_samples() -> None:
    """Control: the same 8x run with an unscaled LR needs about as many real steps as B0."""

    class Unscaled(ScalingRule):
        def factor(self, scale: float, grad: GradParams | None, progress: Progress) -> float:
            return 1.0

    base = _train(B0, 0.05, max_steps=2000, rule=AdaScale())
    plain = _train(8 * B0, 0.05, max_steps=2000, rule=Unscaled())
    assert base is not None and plain is not None
    assert plain[1] > 0.7 * base[1]


@pytest.mark.parametrize(
    "grad", [GradParams(2.0, 6.0), GradParams(-1.0, 3.0), GradParams(5.0, -2.0), GradParams(0, 0)]
)
def test_gain_is_the_schedulers_gain(grad: GradParams) -> None:
    from adl.sched.goodput import gain

    for scale in (0.5, 1.0, 3.0, 100.0):
        assert adascale_gain(scale, grad) == pytest.approx(float(gain(grad, scale)), rel=1e-12)
