"""Per-GPU-type throughput models (issue 33): the worker fits its model from the steps of the
type it runs on, reports the type with it, the controller keeps the last model per type, and
the scheduler's per-type speed is the ratio of the fitted step times."""

from __future__ import annotations

import pytest
import torch

from adl.client_lib.parallel import device_gpu_type
from adl.client_lib.profile import Profile
from adl.client_lib.reporter import build_hints
from adl.controller.status_hints import remember_type_model
from adl.models import AdaptiveJobStatus
from adl.sched.goodput import PerfParams, step_time
from adl.sched.hints import type_speed_from_models

SLOW = PerfParams(
    alpha_c=0.02, beta_c=0.002, alpha_n=0.05, beta_n=0.01, alpha_r=0.01, beta_r=0.002, gamma=2.0
)
#: the same job on a GPU twice as fast at compute (sync unchanged)
FAST = SLOW._replace(alpha_c=0.01, beta_c=0.001)
T4, A100 = "Tesla-T4", "NVIDIA-A100-SXM4-80GB"
CONFIGS = [(1, 1, 16), (1, 1, 64), (1, 2, 32), (1, 4, 32), (2, 4, 32)]


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def measure(profile: Profile, clock: Clock, truth: PerfParams) -> None:
    for cfg in CONFIGS:
        nodes, replicas, bsz = cfg
        compute = float(step_time(truth, nodes, 1, bsz))
        step = float(step_time(truth, nodes, replicas, bsz))
        for _ in range(6):
            for micro in range(2):  # one accumulation micro-step, then a synchronizing one
                profile.tick(cfg, micro == 1)
                clock.now += step if micro == 1 else compute


def test_each_types_fit_recovers_that_types_parameters_and_their_speed_ratio() -> None:
    clock = Clock()
    on_t4 = Profile(warmup_intervals=1, clock=clock, gpu_type=T4)
    measure(on_t4, clock, SLOW)
    # the scheduler moves the job: it restarts on an A100 from its checkpoint
    on_a100 = Profile(warmup_intervals=1, clock=clock, gpu_type=A100)
    on_a100.load_state_dict(on_t4.state_dict())
    assert on_a100.observations() is None  # the T4's steps do not count as the A100's
    measure(on_a100, clock, FAST)
    for profile, truth in ((on_t4, SLOW), (on_a100, FAST)):
        fitted = profile.perf_params()
        assert fitted is not None
        for nodes, replicas, bsz in [(1, 1, 48), (1, 3, 32)]:
            got = float(step_time(fitted, nodes, replicas, bsz))
            assert got == pytest.approx(float(step_time(truth, nodes, replicas, bsz)), rel=0.05)

    # each report names its type; the status keeps the last model of each
    status = AdaptiveJobStatus()
    t4_hints = build_hints(init_batch_size=32, perf=on_t4.perf_params(), gpu_type=T4)
    remember_type_model(status, t4_hints)
    a100_hints = build_hints(
        init_batch_size=32, perf=on_a100.perf_params(), gpu_type="NVIDIA A100-SXM4-80GB"
    )
    assert a100_hints.gpu_type == A100  # torch's name, written as the node label writes it
    remember_type_model(status, a100_hints)
    assert list(status.type_models) == [T4, A100]
    speed = type_speed_from_models(a100_hints, status.type_models)
    assert speed[A100] == 1.0
    assert speed[T4] == pytest.approx(0.5, rel=0.05)  # half as fast as where it runs now
    assert "H100" not in speed  # never measured: the policy's estimate, 1.0

    # back on a T4, its T4 measurements are restored, and the A100's kept aside
    back = Profile(warmup_intervals=1, clock=clock, gpu_type=T4)
    back.load_state_dict(on_a100.state_dict())
    restored, saved = back.observations(), on_t4.observations()
    assert restored is not None and saved is not None
    assert restored.step_time.tolist() == saved.step_time.tolist()
    assert A100 in back.state_dict()["other_types"]


def test_a_checkpoint_from_before_types_counts_as_the_current_types() -> None:
    clock = Clock()
    old = Profile(warmup_intervals=1, clock=clock)
    measure(old, clock, SLOW)
    state = {"times": old.state_dict()["times"]}  # as written before types were recorded
    now = Profile(gpu_type=T4)
    now.load_state_dict(state)
    assert now.observations() is not None


def test_the_status_keeps_at_most_sixteen_types_dropping_the_longest_unmeasured() -> None:
    status = AdaptiveJobStatus()
    for i in range(18):
        remember_type_model(status, build_hints(init_batch_size=8, perf=SLOW, gpu_type=f"gpu-{i}"))
    assert len(status.type_models) == 16
    assert "gpu-0" not in status.type_models and "gpu-17" in status.type_models


def test_a_cpu_has_no_gpu_type(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ADL_GPU_TYPE", raising=False)
    assert device_gpu_type(torch.device("cpu")) == ""
    assert build_hints(init_batch_size=8).gpu_type == ""


def test_a_cpu_standing_in_for_a_gpu_reports_the_type_it_is_told(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the cluster tests' kubelet sets it from the node's label; written as the label writes it
    monkeypatch.setenv("ADL_GPU_TYPE", "NVIDIA A100-SXM4-80GB")
    assert device_gpu_type(torch.device("cpu")) == "NVIDIA-A100-SXM4-80GB"
