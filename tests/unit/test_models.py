"""Model validation: bad input is rejected with messages a user can act on."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from adl.models import (
    AdaptiveJobSpec,
    AdaptiveJobStatus,
    GroupInfo,
    Hints,
    InvalidSpec,
    Phase,
    RestartCause,
    explain,
    parse_spec,
)

TEMPLATE = {"spec": {"containers": [{"name": "trainer", "command": ["python", "train.py"]}]}}


def problems(**fields: Any) -> list[str]:
    with pytest.raises(InvalidSpec) as info:
        parse_spec({"template": TEMPLATE} | fields)
    return info.value.problems


def test_valid_spec_defaults_and_wire_form() -> None:
    spec = parse_spec({"template": TEMPLATE, "maxReplicas": 4})
    assert (spec.min_replicas, spec.max_replicas, spec.gpus_per_replica) == (1, 4, 1)
    assert spec.max_restarts == 3 and spec.trainer["command"] == ["python", "train.py"]
    wire = spec.wire()
    assert wire["maxReplicas"] == 4 and "max_replicas" not in wire
    assert AdaptiveJobSpec.model_validate(wire) == spec


def test_snake_case_accepted_too() -> None:
    assert parse_spec({"template": TEMPLATE, "max_replicas": 2}).max_replicas == 2


def test_min_greater_than_max() -> None:
    assert problems(minReplicas=5, maxReplicas=2) == [
        "spec: minReplicas (5) must be <= maxReplicas (2)"
    ]


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("maxRestarts", -1, "spec.maxRestarts: must be >= 0 (got -1)"),
        ("minReplicas", -2, "spec.minReplicas: must be >= 0 (got -2)"),
        ("gpusPerReplica", -1, "spec.gpusPerReplica: must be >= 0 (got -1)"),
        ("weight", 0, "spec.weight: must be > 0 (got 0)"),
        ("maxReplicas", 5000, "spec.maxReplicas: must be <= 4096 (got 5000)"),
        ("terminationGracePeriodSeconds", 0, "spec.terminationGracePeriodSeconds: must be >= 1"),
    ],
)
def test_out_of_range_values(field: str, value: Any, expected: str) -> None:
    (line,) = problems(**{field: value})
    assert line.startswith(expected)


def test_unknown_field_suggests_the_right_name() -> None:
    assert problems(maxReplica=3) == ["spec.maxReplica: unknown field (did you mean maxReplicas?)"]
    (line,) = problems(checkpoint={"storageClas": "fast"})
    assert line == "spec.checkpoint.storageClas: unknown field (did you mean storageClass?)"
    (line,) = problems(zzz=1)
    assert line.startswith("spec.zzz: unknown field (allowed: template, minReplicas")


def test_missing_template_command_and_image() -> None:
    with pytest.raises(InvalidSpec) as info:
        parse_spec({"maxReplicas": 2})
    assert info.value.problems == ["spec.template: required"]
    no_cmd = {"spec": {"containers": [{"name": "trainer"}]}}
    with pytest.raises(InvalidSpec) as info:
        parse_spec({"template": no_cmd})
    assert info.value.problems == [
        "spec.template: template.spec.containers[0] needs a command or an image"
    ]
    with pytest.raises(InvalidSpec) as info:
        parse_spec({"template": {"spec": {"containers": []}}})
    assert "at least the trainer container" in info.value.problems[0]
    image_only = {"spec": {"containers": [{"name": "t", "image": "train:1"}]}}
    assert parse_spec({"template": image_only}).trainer["image"] == "train:1"


def test_checkpoint_sources_are_exclusive() -> None:
    (line,) = problems(checkpoint={"claimName": "a", "storageClass": "b"})
    assert line == "spec.checkpoint: checkpoint: set claimName or storageClass, not both"


def test_every_problem_is_reported_at_once() -> None:
    lines = problems(maxRestarts=-1, weight=-3, bogus=True)
    assert len(lines) == 3
    text = str(InvalidSpec(lines))
    assert text.startswith("invalid AdaptiveJob spec:") and "spec.bogus" in text


PERF = {"alphaC": 0.1, "betaC": 0.01, "alphaN": 0, "betaN": 0, "alphaR": 0, "betaR": 0, "gamma": 1}


def test_hints_validation() -> None:
    with pytest.raises(ValidationError) as info:
        Hints.model_validate({"initBatchSize": 64, "maxBatchSize": 32})
    assert "maxBatchSize (32) must be >= initBatchSize (64)" in str(info.value)
    with pytest.raises(ValidationError) as info:
        Hints.model_validate({"initBatchSize": 8, "localBszBounds": [0, 4], "progress": -1})
    lines = explain(info.value, Hints, root="hints")
    assert "hints.progress: must be >= 0 (got -1)" in lines
    assert "hints.localBszBounds[0]: must be >= 1 (got 0)" in lines
    with pytest.raises(ValidationError) as info:
        Hints.model_validate({"initBatchSize": 8, "localBszBounds": [8, 4]})
    (line,) = explain(info.value, Hints, root="hints")
    assert line.startswith("hints.localBszBounds: localBszBounds must satisfy")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("initBatchSize", 2**24 + 1),
        ("maxBatchSize", 10**20),
        ("localBszBounds", [1, 10**20]),
        ("batchSize", 2**24 + 1),
        ("localBsz", 2**24 + 1),
        ("accumSteps", 4097),
        ("maxProfiledReplicas", 4097),
        ("progress", 1e13),
        ("totalProgress", 1e13),
        ("goodput", 1e10),
        ("epoch", 10**8),
        ("restartCostS", 86401.0),
        ("perfParams", {**PERF, "betaC": 3601.0}),
        ("perfParams", {**PERF, "alphaC": 0.0, "betaC": 0.0}),
        ("gradParams", {"sqr": 1e31, "var": 1.0}),
        ("gradParams", {"sqr": 1.0, "var": 1e31}),
    ],
)
def test_every_number_a_job_reports_is_bounded(field: str, value: object) -> None:
    """A report the scheduler's arithmetic cannot handle is refused at the door (422), never
    stored: one job's absurd numbers used to fail every round for every job."""
    ok = {"initBatchSize": 8, "maxBatchSize": 2**24, "perfParams": PERF}
    Hints.model_validate(ok)
    with pytest.raises(ValidationError) as info:
        Hints.model_validate({**ok, field: value})
    assert all(line.startswith(f"hints.{field}") for line in explain(info.value, Hints, "hints"))


def test_a_stored_status_with_a_report_from_before_the_bounds_stays_readable() -> None:
    body = {"status": {"phase": "Running", "hints": {"initBatchSize": 8, "epoch": 10**12}}}
    st = AdaptiveJobStatus.from_object(body)
    assert st.phase == Phase.RUNNING and st.hints is None
    with pytest.raises(ValidationError):  # anything else wrong is still an error
        AdaptiveJobStatus.from_object({"status": {"phase": "Running", "replicas": -1}})


def test_status_round_trip_and_restart_counts() -> None:
    st = AdaptiveJobStatus(
        phase=Phase.RESTARTING, restarts={RestartCause.RESIZE: 2, RestartCause.FAILURE: 1}
    )
    assert st.restart_count() == 3 and st.restart_count(RestartCause.PREEMPTION) == 0
    back = AdaptiveJobStatus.model_validate(st.wire())
    assert back == st and st.wire()["restarts"] == {"resize": 2, "failure": 1}
    assert Phase.FAILED.finished and not Phase.RESTARTING.finished


def test_group_info_wire_names() -> None:
    info = GroupInfo(job="ns/a", group=3, phase=Phase.RUNNING, master_port=29500, world_size=2)
    assert info.wire()["masterPort"] == 29500 and info.wire()["worldSize"] == 2
    with pytest.raises(ValidationError):
        GroupInfo(job="ns/a", group=-1, phase=Phase.RUNNING)
