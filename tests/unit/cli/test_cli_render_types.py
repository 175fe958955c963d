"""``adl describe`` shows the job's measured speed on each GPU type (issue 33: the per-type
model and its uncertainty visible to the user)."""

from __future__ import annotations

from datetime import UTC, datetime

from adl.cli.render import describe_text, type_speeds_text
from adl.jobs_api import JobView
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, Hints, Phase
from adl.sched.hints import type_speed_from_models
from tests.unit.controller.test_rounds import HINTS

T4, A100 = "Tesla-T4", "NVIDIA-A100-SXM4-80GB"
SPEC = AdaptiveJobSpec.model_validate(
    {"template": {"spec": {"containers": [{"name": "t", "command": ["python", "t.py"]}]}}}
)


def _status(hints: Hints | None, **models: object) -> AdaptiveJobStatus:
    return AdaptiveJobStatus(phase=Phase.RUNNING, replicas=1, hints=hints, type_models=models)


def test_describe_lists_each_measured_type_fastest_first_relative_to_the_current() -> None:
    assert HINTS.perf_params is not None
    on_a100 = HINTS.model_copy(update={"gpu_type": A100})
    # on the T4 each micro-batch takes 2.5x the A100's compute time
    t4 = HINTS.perf_params.model_copy(
        update={
            "alpha_c": HINTS.perf_params.alpha_c * 2.5,
            "beta_c": HINTS.perf_params.beta_c * 2.5,
        }
    )
    st = _status(on_a100, **{A100: HINTS.perf_params, T4: t4})
    text = type_speeds_text(st)
    assert text is not None
    # the figures are the ones the round uses
    speeds = type_speed_from_models(on_a100, st.type_models)
    assert speeds[A100] == 1.0 and abs(speeds[T4] - 0.4) < 1e-9
    assert text.startswith(f"{A100} 1.00 (current), {T4} 0.40; other types not measured yet")
    view = JobView("j", "default", SPEC, st, datetime(2026, 1, 1, tzinfo=UTC))
    assert f"GPU types:    {A100} 1.00 (current), {T4} 0.40" in describe_text(view)


def test_no_line_before_the_job_reported_a_gpu_type() -> None:
    assert type_speeds_text(_status(None)) is None
    assert type_speeds_text(_status(HINTS)) is None  # a CPU worker, or GPUs of unknown type
