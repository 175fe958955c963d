"""AdaptiveShardedDataParallel over real FSDP2 and gloo, two processes: the norms the noise
estimate receives, per optimizer group, against an unsharded reference computed on the side."""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard

from adl.client_lib.sharded import AdaptiveShardedDataParallel, job_mesh
from tests.unit.client_lib.client_kit import run_gloo_ranks

WORLD = 2
DIM = 10
M = 5  # samples per micro-batch per replica


def _data(step: int, rank: int, micro: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 * step + 10 * rank + micro)
    x = torch.randn(M, DIM, generator=gen)
    return x, x[:, :1] * 2 + torch.randn(M, 1, generator=gen)


def _group_sq(model: nn.Module) -> list[float]:
    """Squared gradient norms of (weights, biases): the optimizer's two groups."""
    out = [0.0, 0.0]
    for name, p in model.named_parameters():
        out[name.endswith("bias")] += float(p.grad.double().square().sum())
    return out


def _reference(ref: nn.Module, step: int, rank: int, accum: int) -> tuple[list[float], list[float]]:
    """(mean over replicas of the local gradient's norms, the averaged gradient's norms)."""
    ref.zero_grad()
    for micro in range(accum):
        x, y = _data(step, rank, micro)
        (nn.functional.mse_loss(ref(x), y) / accum).backward()
    local = torch.tensor(_group_sq(ref), dtype=torch.float64)
    dist.all_reduce(local)
    grads = [p.grad.clone() for p in ref.parameters()]
    for g in grads:
        dist.all_reduce(g)
        g /= WORLD
    for p, g in zip(ref.parameters(), grads, strict=True):
        p.grad = g
    return (local / WORLD).tolist(), _group_sq(ref)


def _checks(rank: int) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(DIM, 17), nn.Tanh(), nn.Linear(17, 1))
    ref = copy.deepcopy(model)
    with pytest.raises(TypeError, match="fully_shard"):
        AdaptiveShardedDataParallel(model, torch.optim.SGD(model.parameters(), lr=0.0))
    mesh = job_mesh("cpu")
    for layer in (model[0], model[2]):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    weights = [p for n, p in model.named_parameters() if not n.endswith("bias")]
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    # lr 0: the parameters stay those of the reference, so its gradients are the truth
    opt = torch.optim.SGD([{"params": weights}, {"params": biases}], lr=0.0, momentum=0.9)
    with pytest.raises(ValueError, match="GradScaler"):
        AdaptiveShardedDataParallel(model, opt, grad_scaler=torch.amp.GradScaler("cpu"))
    adp = AdaptiveShardedDataParallel(model, opt, init_batch_size=WORLD * M, report=False)
    seen: list[tuple[list[float], list[float], float, float]] = []
    update = adp.gns.update

    def spy(local_sq, local_bsz, global_sq, global_bsz, **kw):  # type: ignore[no-untyped-def]
        local = [kw.get("local_scale", 1.0) * v for v in local_sq.tolist()]
        glob = [kw.get("global_scale", 1.0) * v for v in global_sq.tolist()]
        seen.append((local, glob, local_bsz, global_bsz))
        update(local_sq, local_bsz, global_sq, global_bsz, **kw)

    adp.gns.update = spy  # type: ignore[method-assign]
    for step, accum in enumerate((1, 2, 1, 3)):
        for micro in range(accum):
            x, y = _data(step, rank, micro)
            sync = contextlib.nullcontext() if micro == accum - 1 else adp.no_sync()
            with sync:
                nn.functional.mse_loss(adp(x), y).backward()
        opt.step()
        opt.zero_grad()
        adp.settle()
        local, glob, local_bsz, global_bsz = seen[-1]
        want_local, want_global = _reference(ref, step, rank, accum)
        assert (local_bsz, global_bsz) == (accum * M, WORLD * accum * M)
        assert local == pytest.approx(want_local, rel=1e-5), step
        assert glob == pytest.approx(want_global, rel=1e-5), step
    assert len(seen) == 4
    # Memory: parameters, gradients and one momentum buffer per parameter, measured.
    param_bytes = sum(p.numel() * 4 for p in ref.parameters())
    need = adp.memory_need()
    assert need.state_bytes == 3 * param_bytes
    assert need.working_bytes == 2 * (17 * DIM + 17) * 4  # the larger layer, twice


@pytest.mark.slow
def test_sharded_norms_per_group_equal_the_unsharded_truth(tmp_path: Path) -> None:
    run_gloo_ranks(_checks, WORLD, tmp_path)
