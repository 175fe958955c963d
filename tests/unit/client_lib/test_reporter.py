"""Hints reporter against a real HTTP server on 127.0.0.1 (and against none at all)."""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from adl.client_lib.reporter import (
    INTERVAL_ENV,
    HintsReporter,
    build_hints,
    current_batch,
    hints_url,
    report_delays,
    report_interval,
)
from adl.models import Hints
from adl.sched.goodput import BatchBounds, GradParams, PerfParams
from tests.waiting import wait_for

PERF = PerfParams(0.01, 0.001, 0.05, 0.01, 0.02, 0.002, 1.5)


class _Recorder(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict[str, Any]] = []
        self.fail_next = 0
        self.fail_status = 503
        self.fail_body = b""


class _Handler(BaseHTTPRequestHandler):
    server: _Recorder

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.requests.append(
            {"path": self.path, "auth": self.headers.get("Authorization"), "body": json.loads(body)}
        )
        status, answer = 200, b""
        if self.server.fail_next > 0:
            self.server.fail_next -= 1
            status, answer = self.server.fail_status, self.server.fail_body
        self.send_response(status)
        self.send_header("Content-Length", str(len(answer)))
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Recorder]:
    srv = _Recorder()
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()
    thread.join()


def _url(srv: _Recorder) -> str:
    host, port = srv.server_address[:2]
    return f"http://{host!s}:{port}"


def _hints() -> Hints:
    return build_hints(
        init_batch_size=32,
        bounds=BatchBounds(32, 1024, (16, 256)),
        perf=PERF,
        grad=GradParams(sqr=0.5, var=2.0),
        progress=12.5,
        max_profiled_replicas=2,
        batch_size=64,
        local_bsz=32,
        accum_steps=0,
    )


def test_build_hints_carries_every_field_to_the_wire() -> None:
    wire = _hints().wire()
    assert wire["initBatchSize"] == 32
    assert wire["maxBatchSize"] == 1024
    assert wire["localBszBounds"] == [16, 256]
    assert wire["gradientAccumulation"] is True
    assert wire["perfParams"]["alphaN"] == 0.05
    assert wire["gradParams"] == {"sqr": 0.5, "var": 2.0}
    assert wire["progress"] == 12.5
    assert Hints.model_validate(wire) == _hints()


def test_statistics_of_a_diverged_run_are_left_out_not_fatal() -> None:
    nan = float("nan")
    hints = build_hints(
        init_batch_size=32,
        perf=PerfParams(0.01, 0.001, nan, 0.01, 0.01, 0.001, 1.5),
        grad=GradParams(sqr=nan, var=2.0),
        progress=12.5,
        total_progress=float("inf"),
        goodput=nan,
    )
    assert (hints.perf_params, hints.grad_params, hints.goodput) == (None, None, None)
    assert hints.total_progress is None and hints.progress == 12.5


def test_statistics_out_of_the_models_bounds_are_left_out_not_fatal() -> None:
    """The API refuses numbers the scheduler cannot use; the library must not build a report
    that fails to validate (that would stop every later report of the run) but leave the
    unusable statistic out, as for a diverged run."""
    hints = build_hints(
        init_batch_size=32,
        perf=PerfParams(0.01, 5000.0, 0.0, 0.0, 0.0, 0.0, 1.0),  # over an hour per sample
        grad=GradParams(sqr=1.0, var=1e35),
        progress=1e15,
        total_progress=1e16,
        goodput=1e12,
        epoch=10**9,
    )
    assert (hints.perf_params, hints.grad_params, hints.goodput, hints.epoch) == (None,) * 4
    assert hints.total_progress is None and hints.progress == 1e12  # clamped at the bound


def test_hints_url() -> None:
    assert hints_url("http://api:8080/", "team-a/resnet") == (
        "http://api:8080/v1/jobs/team-a/resnet/hints"
    )
    with pytest.raises(ValueError):
        hints_url("http://api", "no-namespace")


def test_report_sends_bearer_token_and_body(server: _Recorder, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    url = hints_url(_url(server), "ns1/job1")
    reporter = HintsReporter(_hints, url, token_file=token)
    assert reporter.report_once() is True
    [req] = server.requests
    assert req["path"] == "/v1/jobs/ns1/job1/hints"
    assert req["auth"] == "Bearer s3cret"
    assert req["body"] == _hints().wire()
    token.write_text("rotated")  # a rotated token is picked up on the next report
    assert reporter.report_once() is True
    assert server.requests[-1]["auth"] == "Bearer rotated"


def test_server_errors_are_retried(server: _Recorder) -> None:
    server.fail_next = 2
    reporter = HintsReporter(_hints, _url(server) + "/v1/jobs/a/b/hints", backoff_s=0.01)
    assert reporter.report_once() is True
    assert len(server.requests) == 3
    server.fail_next = 10
    assert reporter.report_once() is False  # three attempts, then give up until next time
    assert (reporter.sent, reporter.failed) == (1, 1)


def test_a_refused_report_is_not_retried_and_says_why(
    server: _Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    server.fail_next, server.fail_status = 10, 422
    server.fail_body = json.dumps({"detail": [{"loc": ["body", "goodput"], "msg": "bad"}]}).encode()
    reporter = HintsReporter(_hints, _url(server) + "/v1/jobs/a/b/hints", backoff_s=0.01)
    with caplog.at_level("WARNING"):
        assert reporter.report_once() is False
    assert len(server.requests) == 1  # refused once: the same report would be refused again
    assert "HTTP 422" in caplog.text and "goodput" in caplog.text


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_dead_server_does_not_raise(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_dead_port()}/v1/jobs/a/b/hints"
    reporter = HintsReporter(
        _hints, url, token_file=tmp_path / "missing", timeout_s=0.5, backoff_s=0.01
    )
    assert reporter.report_once() is False
    assert reporter.failed == 1


def test_failing_provider_does_not_raise() -> None:
    def broken() -> Hints:
        raise RuntimeError("boom")

    assert HintsReporter(broken, "http://127.0.0.1:1/x").report_once() is False
    assert HintsReporter(lambda: None, "http://127.0.0.1:1/x").report_once() is False


def test_background_thread_reports_periodically_and_stops(server: _Recorder) -> None:
    reporter = HintsReporter(_hints, _url(server) + "/v1/jobs/a/b/hints", interval_s=0.05)
    before = set(threading.enumerate())
    reporter.start()
    (thread,) = set(threading.enumerate()) - before
    wait_for(lambda: len(server.requests) >= 3, 5.0, "three reports")
    reporter.stop()
    count = len(server.requests)
    # nothing after stop(): it returns once the reporting thread has ended
    assert not thread.is_alive()
    assert len(server.requests) == count
    reporter.stop(flush=True)
    assert len(server.requests) == count + 1


def test_background_thread_survives_a_dead_server() -> None:
    url = f"http://127.0.0.1:{_dead_port()}/v1/jobs/a/b/hints"
    reporter = HintsReporter(_hints, url, interval_s=0.02, timeout_s=0.2, backoff_s=0.01)
    reporter.start()
    wait_for(lambda: reporter.failed >= 2, 5.0, "two failed reports")
    reporter.stop()
    assert reporter.failed >= 2


def test_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in ("ADL_API_URL", "ADL_JOB", "ADL_RANK", "ADL_TOKEN_FILE"):
        monkeypatch.delenv(var, raising=False)
    assert HintsReporter.from_env(_hints) is None  # standalone: nothing to report to
    monkeypatch.setenv("ADL_API_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("ADL_JOB", "ns/job")
    monkeypatch.setenv("ADL_TOKEN_FILE", str(tmp_path / "t"))
    monkeypatch.setenv("ADL_RANK", "1")
    assert HintsReporter.from_env(_hints) is None  # only rank 0 reports
    monkeypatch.setenv("ADL_RANK", "0")
    reporter = HintsReporter.from_env(_hints)
    assert reporter is not None
    assert reporter.url == "http://127.0.0.1:9/v1/jobs/ns/job/hints"
    assert reporter.interval_s == 30.0
    assert reporter.token_file == tmp_path / "t"


# ------------------------------------------------------------------ when reports go out


def test_delays_start_short_and_double_up_to_the_steady_interval() -> None:
    assert list(itertools.islice(report_delays(30.0), 7)) == [2, 4, 8, 16, 30, 30, 30]
    assert list(itertools.islice(report_delays(5.0), 4)) == [2, 4, 5, 5]
    assert list(itertools.islice(report_delays(1.0), 3)) == [1, 1, 1]  # never above the steady
    assert list(itertools.islice(report_delays(10.0, first_gap_s=3.0), 3)) == [3, 6, 10]


@pytest.mark.parametrize(
    ("value", "want"), [(None, 30.0), ("", 30.0), ("5", 5.0), ("1", 1.0), ("3600", 3600.0)]
)
def test_steady_interval_comes_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str | None, want: float
) -> None:
    if value is None:
        monkeypatch.delenv(INTERVAL_ENV, raising=False)
    else:
        monkeypatch.setenv(INTERVAL_ENV, value)
    assert report_interval() == want
    assert report_interval(7) == 7.0  # an explicit value wins over the environment


@pytest.mark.parametrize("value", ["0.5", "0", "-3", "3601", "nan", "inf", "soon"])
def test_an_interval_out_of_bounds_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv(INTERVAL_ENV, value)
    with pytest.raises(ValueError, match=INTERVAL_ENV):
        report_interval()
    for var, v in (("ADL_API_URL", "http://127.0.0.1:9"), ("ADL_JOB", "ns/j"), ("ADL_RANK", "0")):
        monkeypatch.setenv(var, v)
    with pytest.raises(ValueError, match=INTERVAL_ENV):  # the job stops at start, not silently
        HintsReporter.from_env(_hints)
    monkeypatch.setenv(INTERVAL_ENV, "12")
    reporter = HintsReporter.from_env(_hints)
    assert reporter is not None and reporter.interval_s == 12.0


def test_first_report_as_soon_as_the_model_is_fitted_then_backing_off(server: _Recorder) -> None:
    fitted = threading.Event()
    built = 0

    def provider() -> Hints:
        nonlocal built
        built += 1
        if fitted.is_set():
            return _hints()
        return build_hints(init_batch_size=32, progress=0.1)  # no throughput model yet

    # A steady interval of an hour: every report this test sees is an early one.
    reporter = HintsReporter(
        provider, _url(server) + "/v1/jobs/a/b/hints", interval_s=3600, first_gap_s=0.1,
        poll_s=0.01,
    )  # fmt: skip
    reporter.start()
    try:
        wait_for(lambda: built >= 5)
        assert server.requests == []  # nothing worth telling the scheduler yet
        fitted.set()
        # four reports (the first and three early ones) long before the hour is up
        wait_for(lambda: len(server.requests) >= 4)
    finally:
        reporter.stop()
    assert all(r["body"]["perfParams"] is not None for r in server.requests)


def test_gaps_between_early_reports_double(server: _Recorder) -> None:
    times: list[float] = []

    def provider() -> Hints:
        times.append(time.monotonic())
        return _hints()

    reporter = HintsReporter(
        provider, _url(server) + "/v1/jobs/a/b/hints", interval_s=0.4, first_gap_s=0.1,
        poll_s=0.01,
    )  # fmt: skip
    reporter.start()
    try:
        wait_for(lambda: len(server.requests) >= 5)
    finally:
        reporter.stop()
    gaps = [b - a for a, b in itertools.pairwise(times[:5])]
    # waits never end early, so these lower bounds hold however loaded the machine is
    for gap, least in zip(gaps, (0.1, 0.2, 0.4, 0.4), strict=True):
        assert gap >= least * 0.95, gaps


def test_a_job_whose_model_never_fits_still_reports_after_the_steady_interval(
    server: _Recorder,
) -> None:
    reporter = HintsReporter(
        lambda: build_hints(init_batch_size=32), _url(server) + "/v1/jobs/a/b/hints",
        interval_s=1.0, poll_s=0.01,
    )  # fmt: skip
    started = time.monotonic()
    reporter.start()
    try:
        wait_for(lambda: len(server.requests) >= 1)
    finally:
        reporter.stop()
    assert time.monotonic() - started >= 1.0  # not before the steady interval
    assert server.requests[0]["body"]["initBatchSize"] == 32


# ------------------------------------------------------------------ the batch in the status


def test_the_batch_reported_is_the_loaders_configuration() -> None:
    # loader at 128 on one replica, the step measured was the epoch's 29-sample tail
    assert current_batch(1, (128, 0), 29, 1) == (128, 128, 0)
    assert current_batch(4, (64, 3), 64, 2) == (1024, 64, 3)  # not a step caught halfway
    assert current_batch(2, (None, None), 32, 2) == (128, 32, 1)  # no loader: the step
    assert current_batch(2, (None, 0), None, 0) == (None, None, None)  # nothing yet


def test_a_changed_batch_is_reported_at_once(server: _Recorder) -> None:
    config = [(64, 0)]
    reporter = HintsReporter(
        _hints, _url(server) + "/v1/jobs/a/b/hints", interval_s=3600, first_gap_s=3600,
        poll_s=0.01, watch=lambda: config[0],
    )  # fmt: skip
    reporter.start()
    try:
        wait_for(lambda: len(server.requests) == 1)  # the first report; the next is an hour away
        config[0] = (128, 0)  # the loader picked another batch at an epoch boundary
        wait_for(lambda: len(server.requests) == 2)
        built = len(server.requests)
    finally:
        reporter.stop()
    assert built == 2


def test_a_memory_minimum_is_reported_and_bounded() -> None:
    assert build_hints(init_batch_size=32, min_replicas=3).wire()["minReplicas"] == 3
    assert build_hints(init_batch_size=32).min_replicas is None  # a replicated model
    assert build_hints(init_batch_size=32, min_replicas=10**6).min_replicas == 4096
