"""The worker API fuzzed from its own OpenAPI document (schemathesis, in process over ASGI:
nothing listens on any port): no request, valid or not, gets a 500. A job's accepted report
reaches ``/metrics`` through a store that merges it into the job's status the way the local
backend does, so the scrape is fuzzed with every report the API lets in."""

from __future__ import annotations

import atexit
import warnings
from collections.abc import Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from adl.api import create_app
from adl.api.auth import generate_token
from adl.models import AdaptiveJobStatus, Hints, Phase
from tests.memory_store import MemoryStore

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

JOB = "ns/a"
TOKEN = generate_token()


#: one running job; its last report shows in the status that /metrics reads, as on the backends
STORE = MemoryStore(
    {JOB: AdaptiveJobStatus(phase=Phase.RUNNING, group=1, replicas=2, allocation=["n", "n"])},
    {JOB: TOKEN},
    merge_reports=True,
)
APP = create_app(STORE, docs=True)  # the document to fuzz from: the same routes, plus the docs
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


def _close_asgi_portal() -> None:
    """Close schemathesis' ASGI portal now instead of at interpreter exit. Loading the schema
    (at collection, before any test runs) starts it, and its exit handler waits on the portal's
    thread: a test that forks this process (the local backend's warm start runs a forked rank's
    exit handlers) would wait in the child for a thread that does not exist there, for ever.
    The tests below start it again on demand; the fixture closes it after them."""
    from schemathesis.python import asgi

    shutdown = getattr(asgi, "_shutdown", None)
    if callable(shutdown):
        shutdown()
        atexit.unregister(shutdown)


_close_asgi_portal()


@pytest.fixture(autouse=True, scope="module")
def _asgi_portal_closed() -> Iterator[None]:
    yield
    _close_asgi_portal()


FUZZ = settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))


@schema.parametrize()
@FUZZ
def test_no_request_gets_a_500(case: schemathesis.Case) -> None:
    response = case.call()
    assert response.status_code < 500, (case.method, case.path, response.text)


@schema.include(method="PUT", path_regex="hints").parametrize()
@FUZZ
def test_every_report_of_the_jobs_own_token_is_stored_or_refused_and_metrics_survive(
    case: schemathesis.Case,
) -> None:
    # the job's own path and token: the body is what gets fuzzed, and what the API lets in
    # reaches the store, then the scrape
    if case.method.upper() != "PUT":  # the coverage phase also tries other methods
        return
    case.path_parameters = {"namespace": "ns", "name": "a"}
    response = case.call(headers={"Authorization": f"Bearer {TOKEN}"})
    code = response.status_code
    assert code == 204 or 400 <= code < 500, response.text  # stored, or refused: never a 500
    if code == 204:
        assert STORE.hints[JOB] == Hints.model_validate(case.body)
    with TestClient(APP) as client:
        scrape = client.get("/metrics")
    assert scrape.status_code == 200, scrape.text
