"""Gradient noise estimator: exact algebra, unbiasedness on synthetic gradients, bookkeeping."""

from __future__ import annotations

import math

import pytest
import torch

from adl.client_lib.gns import (
    GradientNoiseEstimator,
    HostMirror,
    grouped_sq_norms,
    unbiased_estimates,
)

DIM = 1000
SQR = 1.0  # |true gradient|^2
TR = 16.0  # trace of the per-sample gradient covariance


def _true_gradient(gen: torch.Generator) -> torch.Tensor:
    g = torch.randn(DIM, generator=gen)
    return g * math.sqrt(SQR) / g.norm()


def _noisy(g: torch.Tensor, batch: float, shape: tuple[int, ...], gen: torch.Generator):
    """Mean gradients over ``batch`` samples: ``g`` plus noise of total variance ``TR / batch``."""
    std = math.sqrt(TR / batch / DIM)
    return g + std * torch.randn(*shape, DIM, generator=gen)


def test_estimates_solve_the_expectation_equations_exactly() -> None:
    b, big = 4.0, 32.0
    local = torch.tensor([SQR + TR / b])
    glob = torch.tensor([SQR + TR / big])
    sqr, tr = unbiased_estimates(local, b, glob, big)
    assert sqr.item() == pytest.approx(SQR)
    assert tr.item() == pytest.approx(TR)


def test_estimates_reject_a_local_batch_not_smaller_than_the_global_one() -> None:
    with pytest.raises(ValueError):
        unbiased_estimates(torch.ones(1), 8, torch.ones(1), 8)


def test_multi_replica_path_is_unbiased() -> None:
    """One replica's micro-gradient before averaging + the average over K replicas."""
    gen = torch.Generator().manual_seed(1)
    g = _true_gradient(gen)
    replicas, b, draws = 4, 8, 3000
    micro = _noisy(g, b, (draws, replicas), gen)  # (draws, K, D)
    local_sq = micro[:, 0].square().sum(-1)
    global_sq = micro.mean(1).square().sum(-1)
    sqr, tr = unbiased_estimates(local_sq, b, global_sq, replicas * b)
    assert sqr.mean().item() == pytest.approx(SQR, rel=0.05)
    assert tr.mean().item() == pytest.approx(TR, rel=0.05)
    # What AdaptiveDataParallel feeds it: the local norms averaged over the replicas.
    averaged = micro.square().sum(-1).mean(1)
    sqr, tr = unbiased_estimates(averaged, b, global_sq, replicas * b)
    assert sqr.mean().item() == pytest.approx(SQR, rel=0.05)
    assert tr.mean().item() == pytest.approx(TR, rel=0.05)


@pytest.mark.parametrize("in_place", [False, True])
def test_single_replica_consecutive_steps_are_unbiased(in_place: bool) -> None:
    """The estimator's own two-consecutive-steps path, fed independent step gradients.

    ``in_place`` mimics ``zero_grad(set_to_none=False)``: the same gradient tensors come back
    every step, so the estimator must notice and keep its own copy of the previous one.
    """
    gen = torch.Generator().manual_seed(2)
    g = _true_gradient(gen)
    batch, steps = 16, 3000
    # Memory long enough that the average covers (almost) every step equally.
    est = GradientNoiseEstimator(memory_samples=batch * steps * 50.0)
    held = [torch.zeros(600), torch.zeros(DIM - 600)]
    for grad in _noisy(g, batch, (steps,), gen):
        if in_place:
            held[0].copy_(grad[:600])
            held[1].copy_(grad[600:])
            est.observe_consecutive(held, None, batch)
        else:
            est.observe_consecutive([grad[:600].clone(), grad[600:].clone()], None, batch)
    est.publish()
    got = est.sqr_tr()
    assert got is not None
    assert est.updates == (steps - 2 if in_place else steps - 1)
    assert got[0][0] == pytest.approx(SQR, rel=0.05)
    assert got[1][0] == pytest.approx(TR, rel=0.05)


def test_estimator_average_converges_for_the_multi_replica_path() -> None:
    gen = torch.Generator().manual_seed(3)
    g = _true_gradient(gen)
    est = GradientNoiseEstimator(memory_samples=64 * 4000 * 50.0)
    for _ in range(2000):
        micro = _noisy(g, 16, (4,), gen)
        est.update(
            micro[0].square().sum().reshape(1), 16, micro.mean(0).square().sum().reshape(1), 64
        )
    est.publish()
    params = est.grad_params(init_batch_size=32)
    assert params is not None
    assert params.sqr == pytest.approx(SQR, rel=0.05)
    assert params.var == pytest.approx(TR / 32, rel=0.05)  # var is the noise at a batch of B0


def test_memory_is_counted_in_samples_not_steps() -> None:
    """After the same number of samples, small and large batches forget the past equally."""
    old, new = torch.tensor([10.0]), torch.tensor([2.0])

    def after(batch: int) -> float:
        est = GradientNoiseEstimator(memory_samples=1000.0)
        # Local == 2*global at b = B/2 gives sqr = 0, tr = B*global.
        for _ in range(20_000 // batch):  # a long history of the old value...
            est.update(old, batch / 2, old / 2, batch)
        for _ in range(2000 // batch):  # ...then 2000 samples of the new one
            est.update(new, batch / 2, new / 2, batch)
        est.publish()
        got = est.sqr_tr()
        assert got is not None
        return got[1][0] / batch

    # Both keep exp(-2000/1000) of the old value, though one took 10x more steps.
    expected = (2.0 + (10.0 - 2.0) * math.exp(-2.0)) / 2
    assert after(10) == pytest.approx(expected, rel=1e-3)
    assert after(100) == pytest.approx(expected, rel=1e-3)


def test_non_finite_observations_are_ignored() -> None:
    est = GradientNoiseEstimator()
    est.update(torch.tensor([3.0]), 2, torch.tensor([2.0]), 4)
    est.publish()
    before = est.sqr_tr()
    est.update(torch.tensor([float("inf")]), 2, torch.tensor([2.0]), 4)
    est.update(torch.tensor([float("nan")]), 2, torch.tensor([2.0]), 4)
    est.publish()
    assert est.sqr_tr() == before


def test_grouped_norms_sum_per_group() -> None:
    grads = [torch.full((3,), 1.0), torch.full((2,), 2.0), torch.full((4,), 3.0)]
    index = torch.tensor([0, 1, 0])
    got = grouped_sq_norms(grads, index, 2)
    assert got.tolist() == pytest.approx([3.0 + 36.0, 8.0])
    assert grouped_sq_norms(grads, None, 1).tolist() == pytest.approx([47.0])
    assert got.dtype == torch.float32
    half = grouped_sq_norms([g.to(torch.bfloat16) for g in grads], index, 2)
    assert half.dtype == torch.float32


def test_group_statistics_are_kept_apart() -> None:
    est = GradientNoiseEstimator(groups=2)
    local = torch.tensor([SQR + TR / 4, 5.0 + 1.0 / 4])
    glob = torch.tensor([SQR + TR / 16, 5.0 + 1.0 / 16])
    est.update(local, 4, glob, 16)
    est.publish()
    per_group = est.group_grad_params(init_batch_size=4)
    assert per_group[0].sqr == pytest.approx(SQR, rel=1e-5)
    assert per_group[0].var == pytest.approx(TR / 4, rel=1e-5)
    assert per_group[1].sqr == pytest.approx(5.0, rel=1e-5)
    assert per_group[1].var == pytest.approx(1.0 / 4, rel=1e-4)
    whole = est.grad_params(init_batch_size=4)
    assert whole is not None
    assert whole.sqr == pytest.approx(SQR + 5.0, rel=1e-5)


def test_nothing_is_reported_before_the_first_observation() -> None:
    est = GradientNoiseEstimator()
    assert est.grad_params(8) is None
    assert est.group_grad_params(8) == []
    est.observe_consecutive([torch.ones(3)], None, 8)  # first step: only stored
    est.publish()
    assert est.grad_params(8) is None


def test_a_batch_size_change_restarts_the_consecutive_pair() -> None:
    est = GradientNoiseEstimator()
    est.observe_consecutive([torch.ones(3)], None, 8)
    est.observe_consecutive([torch.ones(3)], None, 16)
    assert est.updates == 0
    est.observe_consecutive([torch.ones(3)], None, 16)
    assert est.updates == 1


def test_state_round_trip() -> None:
    est = GradientNoiseEstimator(memory_samples=500.0)
    est.update(torch.tensor([3.0]), 2, torch.tensor([2.0]), 4)
    state = est.state_dict()
    other = GradientNoiseEstimator()
    other.load_state_dict(state)
    est.publish()
    assert other.sqr_tr() == est.sqr_tr()
    assert other.memory_samples == 500.0
    with pytest.raises(ValueError):
        GradientNoiseEstimator(groups=2).load_state_dict(state)


def test_host_mirror_returns_the_latest_push() -> None:
    mirror = HostMirror(2, torch.device("cpu"))
    assert mirror.read() is None
    mirror.push(torch.tensor([1.0, 2.0]))
    assert mirror.read() == [1.0, 2.0]
    mirror.push(torch.tensor([3.0, 4.0]))
    assert mirror.read(wait=True) == [3.0, 4.0]


def test_update_is_the_unbiased_solution_with_prescaled_norms() -> None:
    est = GradientNoiseEstimator(groups=2, memory_samples=1e6)
    local, glob = torch.tensor([3.0, 5.0]), torch.tensor([2.0, 1.5])
    est.update(local, 8, glob, 32, local_scale=0.5, global_scale=0.25)
    est.publish()
    got = est.sqr_tr()
    sqr, tr = unbiased_estimates(local * 0.5, 8, glob * 0.25, 32)
    assert got is not None
    assert got[0] == pytest.approx(sqr.tolist(), rel=1e-5)
    assert got[1] == pytest.approx(tr.tolist(), rel=1e-5)
