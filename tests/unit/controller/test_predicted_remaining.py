"""Hidden job lengths predicted in the production round, the same way on every backend.

A job that does not declare its length used to get least-attained-service only outside the
simulator: no backend fed ``JobInfo.expected_remaining_s``. The shared driver now records the
total work of every job that succeeded (once), by kind within its namespace, and the round
hands each job of undeclared length the mean residual work of its kind. Both backends list
finished jobs, so a restarted operator or daemon rebuilds the history from its first round.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pydantic
import pytest
from three_backends import BACKENDS, DriverOn, driver_on

from adl.controller.driver import Driver
from adl.controller.history import CompletedWork, job_kind
from adl.controller.job_record import JobRecord
from adl.controller.memory import MemoryWorkerBackend
from adl.models import (
    MAX_JOB_KIND,
    AdaptiveJobSpec,
    AdaptiveJobStatus,
    GradParamsModel,
    Hints,
    InvalidSpec,
    PerfParamsModel,
    Phase,
    parse_spec,
)
from adl.sched.baselines import TiresiasPolicy
from adl.sched.hints import done_seconds
from adl.sched.policy import AdlPolicy
from adl.sched.types import Allocation, JobInfo, NodeInfo, Policy
from adl.sched.work_history import HistoryConfig, WorkHistory

NOW = datetime(2026, 1, 1, tzinfo=UTC)
IMAGE_TEMPLATE = {"spec": {"containers": [{"name": "t", "image": "i", "command": ["python"]}]}}


def spec(kind: str | None = "bert", **extra: Any) -> AdaptiveJobSpec:
    return AdaptiveJobSpec(
        template=IMAGE_TEMPLATE, min_replicas=1, max_replicas=1, job_kind=kind, **extra
    )


def hints(progress: float, total: float | None = None) -> Hints:
    return Hints(
        init_batch_size=32,
        max_batch_size=512,
        local_bsz_bounds=(16, 128),
        gradient_accumulation=True,
        perf_params=PerfParamsModel(
            alpha_c=0.1, beta_c=0.01, alpha_n=0.5, beta_n=0.1, alpha_r=0.1, beta_r=0.01, gamma=1.5
        ),
        grad_params=GradParamsModel(sqr=1.0, var=10.0),
        max_profiled_replicas=1,
        progress=progress,
        total_progress=total,
    )


#: seconds on one GPU per unit of progress under ``hints``' model
SECONDS_PER_STEP = done_seconds(hints(1.0)) or 0.0


def steps(seconds: float) -> float:
    """The progress that is ``seconds`` of work on one GPU."""
    return seconds / SECONDS_PER_STEP


def succeeded(progress: float, minute: int = 0) -> AdaptiveJobStatus:
    return AdaptiveJobStatus(
        phase=Phase.SUCCEEDED,
        hints=hints(progress),
        completion_time=NOW + timedelta(minutes=minute),
    )


def running(h: Hints | None) -> AdaptiveJobStatus:
    return AdaptiveJobStatus(phase=Phase.RUNNING, group=1, replicas=1, allocation=["n1"], hints=h)


# --------------------------------------------------------------------------- the kind


def test_the_kind_is_the_users_else_what_the_trainer_runs() -> None:
    def kind(container: dict[str, Any], **extra: Any) -> str:
        template = {"spec": {"containers": [{"name": "t", **container}]}}
        return job_kind(AdaptiveJobSpec(template=template, **extra))

    assert kind({"image": "ghcr.io/t/bert:1"}, job_kind="bert-large") == "bert-large"
    assert kind({"image": "ghcr.io/t/bert:1"}) == "ghcr.io/t/bert:1"  # its entrypoint runs
    # one base image runs many jobs: the script tells them apart
    base = {"image": "pytorch:2", "command": ["python", "a.py"], "workingDir": "/w"}
    assert kind(base) == "pytorch:2 /w/a.py"
    # the script python runs, as a file under its working directory
    local = {"command": ["python3", "-u", "train.py", "--lr", "1"], "workingDir": "/home/u/p"}
    assert kind(local) == "/home/u/p/train.py"
    assert kind({"command": ["python"], "args": ["-X", "dev", "/abs/t.py"]}) == "/abs/t.py"
    assert kind({"command": ["python", "-m", "pkg.train"], "workingDir": "/w"}) == "pkg.train"
    assert kind({"command": ["./run.sh"], "workingDir": "/w"}) == "/w/run.sh"
    assert kind({"command": ["trainer", "--fast"], "workingDir": "/w"}) == "trainer"  # in PATH


def test_the_local_daemon_kinds_jobs_by_their_command_alone(tmp_path: Path) -> None:
    """The daemon runs container 0's command on this machine and never its image."""
    from adl.local.daemon import Daemon, Settings

    template = {"spec": {"containers": [{"name": "t", "image": "pytorch:2", "command": ["./r"]}]}}
    daemon = Daemon(Settings(home=tmp_path, api=False))
    try:
        assert daemon.driver.completed.kind(AdaptiveJobSpec(template=template)) == "./r"
    finally:
        daemon.store.close()


def test_a_derived_kind_is_bounded_and_long_ones_stay_apart() -> None:
    def of(image: str) -> str:
        template = {"spec": {"containers": [{"name": "t", "image": image}]}}
        return job_kind(AdaptiveJobSpec(template=template))

    a, b = of("r/" + "x" * 400 + ":1"), of("r/" + "x" * 400 + ":2")
    assert len(a) == len(b) == MAX_JOB_KIND and a != b
    assert of("odd\nimage") == "odd?image"  # shown in events: no control characters


@pytest.mark.parametrize("bad", ["", "a" * (MAX_JOB_KIND + 1), "two words", "-lead", "k\n", "é"])
def test_a_users_kind_is_validated(bad: str) -> None:
    with pytest.raises(InvalidSpec, match="jobKind"):
        parse_spec({"template": IMAGE_TEMPLATE, "jobKind": bad})


def test_a_users_kind_may_be_an_image_reference_or_a_name() -> None:
    for good in ("ghcr.io/team/bert:1.2@sha256:ab12", "resnet50_imagenet", "a" * MAX_JOB_KIND):
        assert parse_spec({"template": IMAGE_TEMPLATE, "jobKind": good}).job_kind == good


# --------------------------------------------------------------------------- recording


def test_a_succeeded_job_is_recorded_once_and_a_failed_one_never() -> None:
    completed = CompletedWork()
    jobs = [
        JobRecord("ns/done", spec(), succeeded(steps(500.0)), NOW),
        JobRecord("ns/failed", spec(), AdaptiveJobStatus(phase=Phase.FAILED, hints=hints(9)), NOW),
        JobRecord("ns/live", spec(), running(hints(steps(100.0))), NOW),
    ]
    assert completed.record(jobs) == 1
    assert completed.record(jobs) == 0  # the next round lists it again: not counted twice
    assert completed.history.totals("ns/bert") == pytest.approx((500.0,))
    # a new job under the name of a deleted one is another job
    again = JobRecord("ns/done", spec(), succeeded(steps(700.0)), NOW + timedelta(hours=1))
    assert completed.record([again]) == 1
    assert completed.history.totals("ns/bert") == pytest.approx((500.0, 700.0))


def test_a_job_without_reported_work_teaches_nothing() -> None:
    completed = CompletedWork()
    bare = AdaptiveJobStatus(phase=Phase.SUCCEEDED)  # never reported
    assert completed.record([JobRecord("ns/a", spec(), bare, NOW)]) == 0
    assert completed.history.totals("ns/bert") == ()


def test_a_finished_job_whose_work_cannot_be_computed_is_skipped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One job's broken model must not stop every later round (the round runs after this)."""
    from adl.controller import history

    real = history.done_seconds

    def broken(h: Hints | None, speedup: Any = None) -> float | None:
        if h is not None and h.progress == steps(13.0):
            raise FloatingPointError("overflow in its model")
        return real(h, speedup)

    monkeypatch.setattr(history, "done_seconds", broken)
    completed = CompletedWork()
    jobs = [
        JobRecord("ns/broken", spec(), succeeded(steps(13.0)), NOW),
        JobRecord("ns/fine", spec(), succeeded(steps(500.0)), NOW),
    ]
    assert completed.record(jobs) == 1
    assert completed.history.totals("ns/bert") == pytest.approx((500.0,))
    assert completed.record(jobs) == 0  # not retried (and warned about) every round


def test_a_rebuild_keeps_the_most_recently_completed_jobs() -> None:
    """After a restart the listing comes in any order; the history keeps the most recent jobs
    of a kind, so they are recorded in completion order."""
    completed = CompletedWork(WorkHistory(HistoryConfig(max_per_kind=2)))
    listed = [
        JobRecord("ns/late", spec(), succeeded(steps(300.0), minute=30), NOW),
        JobRecord("ns/early", spec(), succeeded(steps(100.0), minute=10), NOW),
        JobRecord("ns/middle", spec(), succeeded(steps(200.0), minute=20), NOW),
    ]
    completed.record(listed)
    assert completed.history.totals("ns/bert") == pytest.approx((200.0, 300.0))


# --------------------------------------------------------------------------- through the driver


class SeenPolicy:
    """Keeps every job where it is; remembers what it was told about each, per round."""

    def __init__(self) -> None:
        self.rounds: list[dict[str, JobInfo]] = []

    def optimize(
        self, jobs: Sequence[JobInfo], nodes: Sequence[NodeInfo], previous: Mapping[str, list[str]]
    ) -> Allocation:
        self.rounds.append({j.name: j for j in jobs})
        return {j.name: list(previous.get(j.name, [])) for j in jobs}


#: key -> (spec, status): a completed job of kind bert, three running ones, a failed one
DONE_S, RUN_S = 900.0, 300.0
SCENARIO: dict[str, tuple[AdaptiveJobSpec, AdaptiveJobStatus]] = {
    "ns/done": (spec(), succeeded(steps(DONE_S))),
    # failed after more work than the completed one: counted, it would change the prediction
    "ns/failed": (spec(), AdaptiveJobStatus(phase=Phase.FAILED, hints=hints(steps(5000.0)))),
    "ns/hidden": (spec(), running(hints(steps(RUN_S)))),
    "ns/declared": (spec(), running(hints(steps(RUN_S), total=steps(2000.0)))),
    "ns/other-kind": (spec("gpt"), running(hints(steps(RUN_S)))),
    "team/hidden": (spec(), running(hints(steps(RUN_S)))),  # bert, but another namespace
}


@pytest.fixture(params=BACKENDS)
def backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[DriverOn, SeenPolicy]]:
    policy = SeenPolicy()
    with driver_on(request.param, SCENARIO, policy, tmp_path, gpus=8) as on:
        yield on, policy


def _predicted(info: JobInfo) -> tuple[float | None, int]:
    return info.expected_remaining_s, info.predicted_from


def test_every_backend_predicts_a_hidden_length_from_its_completed_jobs(
    backend: tuple[DriverOn, SeenPolicy],
) -> None:
    b, policy = backend
    b.driver.run_round(NOW)
    seen = policy.rounds[-1]
    # seconds on one GPU: the completed job's total less what this one has done
    expected, basis = _predicted(seen["ns/hidden"])
    assert expected == pytest.approx(DONE_S - RUN_S, rel=1e-6) and basis == 1
    assert seen["ns/hidden"].kind == "bert"
    assert _predicted(seen["ns/declared"]) == (None, 0)  # its own length is known
    assert seen["ns/declared"].remaining_s == pytest.approx(2000.0 - RUN_S, rel=1e-6)
    assert _predicted(seen["ns/other-kind"]) == (None, 0)  # no gpt job has completed
    assert _predicted(seen["team/hidden"]) == (None, 0)  # kinds are per namespace
    assert b.driver.completed.history.totals("ns/bert") == pytest.approx((DONE_S,), rel=1e-6)
    b.driver.run_round(NOW)
    assert b.driver.completed.history.totals("ns/bert") == pytest.approx((DONE_S,), rel=1e-6)


def test_every_backend_rebuilds_the_history_after_a_restart(
    backend: tuple[DriverOn, SeenPolicy],
) -> None:
    b, policy = backend
    b.driver.run_round(NOW)
    before = _predicted(policy.rounds[-1]["ns/hidden"])
    restarted = b.restart()
    assert restarted is not b.driver and restarted.completed.history.totals("ns/bert") == ()
    restarted.run_round(NOW)  # its first round lists the finished jobs again
    assert _predicted(policy.rounds[-1]["ns/hidden"]) == before
    assert before[0] is not None
    assert restarted.completed.history.totals("ns/bert") == pytest.approx((DONE_S,), rel=1e-6)


# --------------------------------------------------------------------------- the policy's choice


def _contest(history_s: float, first: str) -> MemoryWorkerBackend:
    """One GPU; two queued jobs of undeclared length, submitted together: ``ns/known``, of a
    kind seen complete after ``history_s`` seconds of work, and ``ns/unknown``, of a kind never
    seen (LAS only). ``first`` is the one a tie would favour (the policy breaks ties by
    submission order), so that only the prediction can give the GPU to the other."""
    order = {first: NOW, ({"ns/known", "ns/unknown"} - {first}).pop(): NOW + timedelta(seconds=1)}
    jobs = [
        JobRecord("ns/done", spec("short"), succeeded(steps(history_s)), NOW),
        JobRecord("ns/unknown", spec("never-seen"), AdaptiveJobStatus(), order["ns/unknown"]),
        JobRecord("ns/known", spec("short"), AdaptiveJobStatus(), order["ns/known"]),
    ]
    return MemoryWorkerBackend(jobs, [NodeInfo("n1", 1)])


def test_a_job_of_a_kind_known_to_be_short_goes_before_a_las_only_one() -> None:
    backend = _contest(history_s=120.0, first="ns/unknown")
    Driver(backend, AdlPolicy()).run_round(NOW + timedelta(seconds=1))
    assert backend.jobs["ns/known"].desired == ["n1"]
    assert backend.jobs["ns/unknown"].desired == []
    (started,) = [e.message for k, e in backend.events if k == "ns/known"]
    assert "remaining work predicted from 1 completed job of kind short" in started
    assert all("predicted" not in e.message for k, e in backend.events if k != "ns/known")


@pytest.mark.parametrize(
    "policy",
    [AdlPolicy(use_predicted_remaining=0), TiresiasPolicy()],
    ids=["adl-predictions-off", "tiresias"],
)
def test_no_event_names_a_prediction_the_policy_did_not_use(policy: Policy) -> None:
    backend = _contest(history_s=120.0, first="ns/known")
    Driver(backend, policy).run_round(NOW + timedelta(seconds=1))
    assert backend.jobs["ns/known"].desired == ["n1"]
    assert backend.events
    assert all("predicted" not in e.message for _, e in backend.events)


def test_a_job_of_a_kind_known_to_be_long_waits_behind_a_las_only_one() -> None:
    # far longer than least-attained-service assumes of a job that has just arrived
    backend = _contest(history_s=100 * 3600.0, first="ns/known")
    Driver(backend, AdlPolicy()).run_round(NOW + timedelta(seconds=1))
    assert backend.jobs["ns/unknown"].desired == ["n1"]
    assert backend.jobs["ns/known"].desired == []


def test_the_spec_field_round_trips_the_wire_form() -> None:
    s = spec("bert")
    assert s.wire()["jobKind"] == "bert"
    assert AdaptiveJobSpec.model_validate(s.wire()).job_kind == "bert"
    with pytest.raises(pydantic.ValidationError):
        AdaptiveJobSpec.model_validate({**s.wire(), "jobKind": "x y"})
