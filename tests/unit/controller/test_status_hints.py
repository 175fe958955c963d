"""The status shows the goodput of the job's own model on every backend: the in-job library
reports a throughput and noise model, never a goodput figure, so a status that copied
``hints.goodput`` showed nothing on Kubernetes (``kubectl get aj``'s Goodput column)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from adl.controller.actions import SetStatus
from adl.controller.lifecycle import ObservedWorkers, ReplicaPhase, ReplicaState, step
from adl.controller.status_hints import current_goodput
from adl.local.store import StoredJob
from adl.models import (
    AdaptiveJobSpec,
    AdaptiveJobStatus,
    GradParamsModel,
    Hints,
    PerfParamsModel,
    Phase,
)

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
SPEC = AdaptiveJobSpec.model_validate(
    {"template": {"spec": {"containers": [{"name": "t", "command": ["python", "t.py"]}]}}}
)
#: what AdaptiveDataParallel reports: a model and the batch it trains at, no goodput
REPORT = Hints(
    init_batch_size=32,
    max_batch_size=512,
    local_bsz_bounds=(16, 128),
    perf_params=PerfParamsModel(
        alpha_c=0.01, beta_c=0.001, alpha_n=0.05, beta_n=0.01, alpha_r=0.01, beta_r=0.001, gamma=1.5
    ),
    grad_params=GradParamsModel(sqr=1.0, var=10.0),
    batch_size=96,
    local_bsz=16,
    accum_steps=0,
)


def _running(allocation: list[str]) -> AdaptiveJobStatus:
    return AdaptiveJobStatus(
        phase=Phase.RUNNING, group=1, allocation=allocation, replicas=len(allocation), hints=REPORT
    )


@pytest.mark.parametrize("allocation", [["n0"] * 6, ["n0"] * 3 + ["n1"] * 3])
def test_the_kubernetes_status_shows_the_goodput_of_the_reported_model(
    allocation: list[str],
) -> None:
    assert REPORT.goodput is None
    workers = ObservedWorkers(
        tuple(ReplicaState(1, r, ReplicaPhase.RUNNING, ready=True) for r in range(6))
    )
    actions = step("ns/j", SPEC, _running(allocation), workers, allocation, NOW)
    status = next(a.status for a in actions if isinstance(a, SetStatus))
    nodes = len(set(allocation))
    want = current_goodput(REPORT, 6, nodes)
    assert want is not None and want > 0
    assert status.goodput == pytest.approx(want) and status.batch_size == 96


def test_both_backends_show_the_same_goodput_for_the_same_report() -> None:
    allocation = ["n0"] * 6
    workers = ObservedWorkers(
        tuple(ReplicaState(1, r, ReplicaPhase.RUNNING, ready=True) for r in range(6))
    )
    actions = step("ns/j", SPEC, _running(allocation), workers, allocation, NOW)
    kube = next(a.status for a in actions if isinstance(a, SetStatus))
    local = StoredJob(
        key="ns/j", namespace="ns", name="j", seq=1, created=0.0, spec=SPEC,
        status=_running(allocation).model_copy(update={"hints": None}), token="t", hints=REPORT,
    ).status_with_hints()  # fmt: skip
    assert kube.goodput == pytest.approx(local.goodput) and kube.goodput is not None
