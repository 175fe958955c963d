"""AdaptiveDataParallel over real gloo with two processes on 127.0.0.1 (file rendezvous)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn

from adl.client_lib.gns import unbiased_estimates
from adl.client_lib.parallel import AdaptiveDataParallel
from adl.client_lib.scaling import LinearScale
from tests.unit.client_lib.client_kit import run_gloo_ranks, sgd_reference_step

WORLD = 2
DIM = 10
M = 6  # micro-batch per replica


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(DIM, 16), nn.Tanh(), nn.Linear(16, 1))


def _data(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The global batch of a step: WORLD x (accumulation) x M samples, same on every rank."""
    gen = torch.Generator().manual_seed(100 + step)
    x = torch.randn(WORLD * 2 * M, DIM, generator=gen)
    return x, x[:, :1] * 2 + torch.randn(len(x), 1, generator=gen)


def _sq(model: nn.Module) -> float:
    return float(sum(p.grad.double().square().sum() for p in model.parameters()))


def _flat(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _capture_global_norms(adp: AdaptiveDataParallel, model: nn.Module) -> list[tuple]:
    """Record, at every noise update, the global norms given and those of the final gradients."""
    seen: list[tuple] = []
    update = adp.gns.update
    groups = [list(g["params"]) for g in adp.optimizer.param_groups]

    def spy(local_sq, local_bsz, global_sq, global_bsz, **kw):  # type: ignore[no-untyped-def]
        truth = [float(sum(p.grad.double().square().sum() for p in g)) for g in groups]
        scale = kw.get("global_scale", 1.0)  # the norms may come pre-scaled
        seen.append(([scale * v for v in global_sq.tolist()], truth))
        update(local_sq, local_bsz, global_sq, global_bsz, **kw)

    adp.gns.update = spy  # type: ignore[method-assign]
    return seen


def _assert_same_on_every_rank(*tensors: torch.Tensor) -> None:
    for shared in tensors:
        copies = [torch.zeros_like(shared) for _ in range(WORLD)]
        dist.all_gather(copies, shared)
        assert torch.equal(copies[0], copies[1])


def _checks(rank: int) -> None:
    loss_fn = nn.functional.mse_loss
    model = _model()
    ref = copy.deepcopy(model)  # single-process replay of the whole global batch
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    adp = AdaptiveDataParallel(
        model, opt, scaling_rule=LinearScale(), init_batch_size=M, report=False
    )
    assert isinstance(adp.module, nn.parallel.DistributedDataParallel)

    # 1) No accumulation: the comm hook sees this rank's own micro-gradient before averaging.
    x, y = _data(0)
    xs, ys = x[: WORLD * M], y[: WORLD * M]
    mine = slice(rank * M, (rank + 1) * M)
    opt.zero_grad()
    loss_fn(adp(xs[mine]), ys[mine]).backward()
    probe = copy.deepcopy(ref)
    loss_fn(probe(xs[mine]), ys[mine]).backward()
    local_sq = _sq(probe)
    assert adp._stats.hook_sq.item() == pytest.approx(local_sq, rel=1e-5)
    local_sqs = []  # every replica's local norm: the estimate uses their average
    for r in range(WORLD):
        probe.zero_grad()
        loss_fn(probe(xs[r * M : (r + 1) * M]), ys[r * M : (r + 1) * M]).backward()
        local_sqs.append(_sq(probe))
    assert local_sqs[rank] == pytest.approx(local_sq)
    probe.zero_grad()
    loss_fn(probe(xs), ys).backward()  # mean over the global batch == average of the replicas
    for p, q in zip(model.parameters(), probe.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad)
    opt.step()
    sqr, tr = unbiased_estimates(
        torch.tensor([sum(local_sqs) / WORLD]), M, torch.tensor([_sq(probe)]), WORLD * M
    )
    got = adp.gns.sqr_tr(wait=True)
    assert got is not None  # one observation: the bias-corrected average is that observation
    assert got[0][0] == pytest.approx(sqr.item(), rel=1e-4)
    assert got[1][0] == pytest.approx(tr.item(), rel=1e-4)
    with torch.no_grad():
        for p, q in zip(ref.parameters(), probe.parameters(), strict=True):
            p -= 0.1 * 2.0 * q.grad  # linear rule: batch 2M = 2 x B0
    torch.testing.assert_close(_flat(model), _flat(ref))

    # 2) One accumulation step under no_sync: replicas diverge locally, then agree after sync.
    seen = _capture_global_norms(adp, model)
    x, y = _data(1)
    own = x[rank * 2 * M : (rank + 1) * 2 * M], y[rank * 2 * M : (rank + 1) * 2 * M]
    opt.zero_grad()
    with adp.no_sync():
        loss_fn(adp(own[0][:M]), own[1][:M]).backward()
    gathered = [torch.zeros_like(_flat(model)) for _ in range(WORLD)]
    grads_now = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    dist.all_gather(gathered, grads_now)
    assert not torch.allclose(gathered[0], gathered[1])  # no all-reduce happened
    loss_fn(adp(own[0][M:]), own[1][M:]).backward()
    opt.step()
    sgd_reference_step(ref, x, y, 0.1 * 4.0)  # batch 4M = 4 x B0
    torch.testing.assert_close(_flat(model), _flat(ref))
    assert adp.progress.samples == 2 * M + 4 * M
    assert adp.gns.updates == 2
    # The comm hook's norm of the reduced buckets, rescaled, is that of the averaged gradient.
    assert len(seen) == 1 and seen[0][0] == pytest.approx(seen[0][1], rel=1e-5)

    # 3) AdaScale: the LR factor follows the noise statistics, so every rank must hold the same
    # statistics (averaged local norms), or the replicas' parameters drift apart.
    model = _model()
    first, *rest = model.parameters()  # two parameter groups: per-group bucket norms
    opt = torch.optim.SGD([{"params": [first]}, {"params": rest, "lr": 0.05}], lr=0.1)
    adp = AdaptiveDataParallel(model, opt, init_batch_size=M, report=False)
    seen = _capture_global_norms(adp, model)
    for step in range(2, 8):
        x, y = _data(step)
        opt.zero_grad()
        loss_fn(adp(x[mine]), y[mine]).backward()
        opt.step()
    assert adp.gns.updates == 6 and adp.lr_factors[0] != 1.0
    for given, truth in seen:
        assert given == pytest.approx(truth, rel=1e-5)
    _assert_same_on_every_rank(adp.gns._state, _flat(model))

    # 4) A statistics interval: unmeasured steps (plain and accumulating) still average the
    # gradients exactly; measured ones see the true global norms; ranks stay identical.
    model = _model()
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    adp = AdaptiveDataParallel(
        model, opt, scaling_rule=LinearScale(), init_batch_size=M, report=False, stats_interval=2
    )
    seen = _capture_global_norms(adp, model)
    for step in range(8, 12):
        x, y = _data(step)
        opt.zero_grad()
        if step % 3 == 0:  # one accumulating step in the mix, on an unmeasured step (9)
            own = x[rank * 2 * M : (rank + 1) * 2 * M], y[rank * 2 * M : (rank + 1) * 2 * M]
            with adp.no_sync():
                loss_fn(adp(own[0][:M]), own[1][:M]).backward()
            loss_fn(adp(own[0][M:]), own[1][M:]).backward()
            xs, ys, factor = x, y, 4.0
        else:
            xs, ys, factor = x[: WORLD * M], y[: WORLD * M], 2.0
            loss_fn(adp(xs[mine]), ys[mine]).backward()
        opt.step()
        sgd_reference_step(ref, xs, ys, 0.1 * factor)
    torch.testing.assert_close(_flat(model), _flat(ref))
    assert adp.gns.updates == 2 and len(seen) == 2  # steps 0 and 2 of this wrapper
    for given, truth in seen:
        assert given == pytest.approx(truth, rel=1e-5)
    _assert_same_on_every_rank(adp.gns._state, _flat(model))


@pytest.mark.slow
def test_two_gloo_replicas(tmp_path: Path) -> None:
    run_gloo_ranks(_checks, WORLD, tmp_path)
