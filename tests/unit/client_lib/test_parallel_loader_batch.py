"""The batch the wrapper measures and reports is the training loader's, whatever the tensors'
layout or whichever loader ran last; and the wrapper behaves like the model it wraps."""

from __future__ import annotations

import dataclasses
import io
import itertools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

import adl
from adl.client_lib.context import JobContext
from adl.client_lib.profile import Profile

SEQ = 35  # the sequence length: dim 0 of a sequence-first batch, whatever the batch size


class Tokens(torch.utils.data.Dataset[torch.Tensor]):
    """Fixed-length token sequences (one sample: SEQ + 1 token ids)."""

    def __init__(self, n: int, vocab: int = 50, seed: int = 0) -> None:
        gen = torch.Generator().manual_seed(seed)
        self.data = torch.randint(0, vocab, (n, SEQ + 1), generator=gen)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.data[i]


def sequence_first(samples: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, SEQ+1] -> inputs and targets laid out [SEQ, B], as RNN language models take them."""
    batch = torch.stack(samples).t().contiguous()
    return batch[:-1], batch[1:]


class TinyLM(nn.Module):
    """An LSTM language model over [SEQ, B] inputs, with a method scripts call on the model."""

    def __init__(self, vocab: int = 50, hidden: int = 8) -> None:
        super().__init__()
        self.vocab, self.hidden = vocab, hidden
        self.embed = nn.Embedding(vocab, hidden)
        self.rnn = nn.LSTM(hidden, hidden)
        self.out = nn.Linear(hidden, vocab)

    def init_hidden(self, bsz: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.zeros(bsz, self.hidden)

    @staticmethod
    def zeros(bsz: int, hidden: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.zeros(1, bsz, hidden), torch.zeros(1, bsz, hidden)

    def forward(self, x: torch.Tensor, hidden: Any) -> tuple[torch.Tensor, Any]:
        y, hidden = self.rnn(self.embed(x), hidden)
        return self.out(y), hidden


def _train(
    model: adl.AdaptiveDataParallel,
    loader: adl.AdaptiveDataLoader,
    opt: torch.optim.Optimizer,
    on_forward: Callable[[torch.Tensor], None] = lambda x: None,
) -> None:
    for x, y in loader:
        on_forward(x)
        out, _ = model(x, TinyLM.zeros(x.shape[1]))
        nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1)).backward()
        opt.step()
        opt.zero_grad()


def _job(
    batch: int = 20, n: int = 200
) -> tuple[adl.AdaptiveDataParallel, adl.AdaptiveDataLoader, torch.optim.Optimizer]:
    torch.manual_seed(0)
    loader = adl.AdaptiveDataLoader(Tokens(n), batch_size=batch, collate_fn=sequence_first)
    net = TinyLM()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    return adl.AdaptiveDataParallel(net, opt, report=False), loader, opt


def test_a_sequence_first_batch_is_profiled_at_the_loaders_batch_size(
    make_context: Callable[..., JobContext],
) -> None:
    make_context()
    model, loader, opt = _job(batch=20)
    _train(model, loader, opt)
    obs = model.profile.observations()
    assert obs is not None
    # dim 0 of these batches is the sequence length (35): the profile must not see it
    assert set(obs.local_bsz.tolist()) == {20.0}


def test_an_autoscaled_sequence_first_batch_settles_instead_of_flipping(
    make_context: Callable[..., JobContext],
) -> None:
    """Step time grows with the real batch (a clock advanced by each forward); profiled against
    dim 0 (always 35) every size looked alike, and the choice flipped 20 -> 40 -> 20 -> 40
    between epochs at one replica. Profiled at the loader's sizes, it changes and then stays."""
    make_context()
    model, loader, opt = _job(batch=20, n=480)
    loader.autoscale_batch_size(160, local_bsz_bounds=(10, 160))
    now = [0.0]
    model.profile = Profile(clock=lambda: now[0])

    def cost(x: torch.Tensor) -> None:
        now[0] += 0.05 + 0.001 * x.shape[1]  # a fixed cost per step: larger batches pay

    chosen: list[int] = []
    for _ in adl.remaining_epochs_until(10):
        _train(model, loader, opt, on_forward=cost)
        chosen.append(loader.current_local_bsz)
    obs = model.profile.observations()
    assert obs is not None and 35.0 not in obs.local_bsz.tolist()
    changes = [b for a, b in itertools.pairwise(chosen) if a != b]
    assert len(changes) == len(set(changes)), f"the batch flipped back: {chosen}"


def test_the_job_batch_is_the_training_loaders_after_an_eval_pass(
    make_context: Callable[..., JobContext],
) -> None:
    """An evaluation loader run after training does not become the job's batch size."""
    make_context()
    model, loader, opt = _job(batch=20)
    evaluation = adl.AdaptiveDataLoader(
        Tokens(30, seed=1), batch_size=10, collate_fn=sequence_first
    )
    for _ in adl.remaining_epochs_until(2):
        _train(model, loader, opt)
        model.eval()
        with torch.no_grad():
            for x, _y in evaluation:
                model(x, TinyLM.zeros(x.shape[1]))
        model.train()
        hints = model.hints()
        assert hints is not None
        assert (hints.batch_size, hints.local_bsz, hints.accum_steps) == (20, 20, 0)


def test_the_job_batch_is_the_training_loaders_when_eval_is_built_and_run_first(
    make_context: Callable[..., JobContext],
) -> None:
    make_context()
    evaluation = adl.AdaptiveDataLoader(
        Tokens(30, seed=1), batch_size=10, collate_fn=sequence_first
    )
    model, loader, opt = _job(batch=20)
    with torch.no_grad():
        for x, _y in evaluation:
            model.eval()
            model(x, TinyLM.zeros(x.shape[1]))
    model.train()
    _train(model, loader, opt)
    hints = model.hints()
    assert hints is not None and (hints.batch_size, hints.local_bsz) == (20, 20)
    assert model.init_batch_size == 20


def test_the_wrapper_forwards_the_models_methods_and_attributes(
    make_context: Callable[..., JobContext],
) -> None:
    make_context()
    model, _, _ = _job()
    hidden = model.init_hidden(4)
    assert hidden[0].shape == (1, 4, 8)
    assert model.vocab == 50 and isinstance(model.rnn, nn.LSTM)
    # the wrapper's own names are still its own
    assert model.init_batch_size == 20 and callable(model.hints)
    try:
        model.no_such_attribute  # noqa: B018
    except AttributeError as err:
        assert "no_such_attribute" in str(err)
    else:
        raise AssertionError("a missing attribute must raise AttributeError")


def test_saving_the_wrapper_saves_the_model_it_wraps(
    make_context: Callable[..., JobContext],
) -> None:
    """``torch.save(model, f)`` as scripts write it (word_language_model's best model)."""
    make_context()
    model, loader, opt = _job()
    _train(model, loader, opt)
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    assert type(loaded) is TinyLM
    for (name, a), (_, b) in zip(
        model.state_dict().items(), loaded.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name


def test_the_reported_batch_is_the_loaders_exact_b0_at_a_world_size_that_does_not_divide_it(
    make_context: Callable[..., JobContext],
) -> None:
    """AdaptiveTrainer's loader takes exactly B0 = 16 at 3 replicas (6 + 5 + 5): the job's batch
    size is 16, not 3 x 6 (rank 0 of 3, seen through its context; the loader splits by it)."""
    ctx = make_context()
    ctx.env = dataclasses.replace(ctx.env, rank=0, world_size=3)
    model, _, opt = _job(batch=16)
    loader = adl.AdaptiveDataLoader(Tokens(48), batch_size=16, collate_fn=sequence_first)
    loader.exact_batch = True
    for x, y in loader:
        assert x.shape[1] == 6  # rank 0's share
        out, _ = model(x, TinyLM.zeros(x.shape[1]))
        nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1)).backward()
        opt.step()
        opt.zero_grad()
        break
    hints = model.hints()
    assert hints is not None and (hints.batch_size, hints.local_bsz) == (16, 6)
