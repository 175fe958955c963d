"""A degenerate gradient estimate (sqr == 0, or not finite) must not drive the batch choice.

With sqr == 0 the AdaScale gain equals the scale, so every batch looks equally efficient and
goodput always picks the largest batch. That happens while the estimate is still noise (a
negative estimate is clamped at zero): the in-job loader, the hints and the scheduler all treat
it as "no estimate yet" instead, which keeps the batch at B0 within the bounds."""

from __future__ import annotations

import math

import pytest

from adl.client_lib.reporter import build_hints
from adl.models import GradParamsModel, Hints, PerfParamsModel
from adl.sched.goodput import BatchBounds, BatchChoice, GradParams, PerfParams
from adl.sched.hints import goodput_from_hints

PERF = PerfParams(0.01, 0.002, 0.05, 0.01, 0.02, 0.002, 1.5)
BOUNDS = BatchBounds(64, 1024, (32, 128), gradient_accumulation=True)
DEGENERATE = [(0.0, 2.0), (0.0, 0.0), (math.nan, 1.0), (1.0, math.inf), (-1.0, 2.0)]


@pytest.mark.parametrize(("sqr", "var"), DEGENERATE)
def test_degenerate_estimates_are_not_usable(sqr: float, var: float) -> None:
    assert not GradParams(sqr, var).usable


def test_a_real_estimate_is_usable() -> None:
    assert GradParams(0.5, 2.0).usable and GradParams(1e-12, 0.0).usable


def test_hints_leave_a_zero_estimate_out() -> None:
    hints = build_hints(init_batch_size=64, bounds=BOUNDS, perf=PERF, grad=GradParams(0.0, 3.0))
    assert hints.grad_params is None
    kept = build_hints(init_batch_size=64, bounds=BOUNDS, perf=PERF, grad=GradParams(0.5, 3.0))
    assert kept.grad_params is not None and kept.grad_params.sqr == 0.5


def _hints(grad: GradParamsModel | None) -> Hints:
    return Hints(
        init_batch_size=64,
        max_batch_size=1024,
        local_bsz_bounds=(32, 128),
        gradient_accumulation=True,
        perf_params=PerfParamsModel(**PERF._asdict()),
        grad_params=grad,
    )


def test_the_scheduler_treats_a_reported_zero_as_no_estimate() -> None:
    # what an older worker reported (the Adadelta job: gradParams.sqr 0.0)
    zero = goodput_from_hints(_hints(GradParamsModel(sqr=0.0, var=5.0)))
    unknown = goodput_from_hints(_hints(None))
    assert zero is not None and unknown is not None
    for replicas in (1, 2, 4):
        got, want = zero.optimize(1, replicas), unknown.optimize(1, replicas)
        assert batch(got, replicas) == batch(want, replicas)
        assert float(got.goodput[0]) == pytest.approx(float(want.goodput[0]))
    # and it does not pick the largest batch, as the zero taken at face value would
    face_value = goodput_from_hints(_hints(GradParamsModel(sqr=1e-300, var=5.0)))
    assert face_value is not None
    assert batch(face_value.optimize(1, 1), 1) > batch(zero.optimize(1, 1), 1)


def batch(choice: BatchChoice, replicas: int) -> int:
    return replicas * int(choice.local_bsz[0]) * (int(choice.accum_steps[0]) + 1)
