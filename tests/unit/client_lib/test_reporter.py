"""Hints reporter against a real HTTP server on 127.0.0.1 (and against none at all)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from adl.client_lib.reporter import HintsReporter, build_hints, hints_url
from adl.models import Hints
from adl.sched.goodput import BatchBounds, GradParams, PerfParams

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
    reporter.start()
    deadline = time.monotonic() + 5.0
    while len(server.requests) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    reporter.stop()
    count = len(server.requests)
    assert count >= 3
    time.sleep(0.15)
    assert len(server.requests) == count  # nothing after stop()
    reporter.stop(flush=True)
    assert len(server.requests) == count + 1


def test_background_thread_survives_a_dead_server() -> None:
    url = f"http://127.0.0.1:{_dead_port()}/v1/jobs/a/b/hints"
    reporter = HintsReporter(_hints, url, interval_s=0.02, timeout_s=0.2, backoff_s=0.01)
    reporter.start()
    deadline = time.monotonic() + 5.0
    while reporter.failed < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
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
