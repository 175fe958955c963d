"""The worker API fuzzed from its own OpenAPI document (schemathesis, in process over ASGI:
nothing listens on any port): no request, valid or not, gets a 500. A job's accepted report
reaches ``/metrics`` through a store that merges it into the job's status the way the local
backend does, so the scrape is fuzzed with every report the API lets in."""

from __future__ import annotations

import atexit
import warnings
from collections.abc import Iterable, Iterator

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from adl.api import JobSnapshot, UnknownJob, create_app
from adl.api.auth import find_owner, generate_token
from adl.controller.status_hints import current_goodput
from adl.models import AdaptiveJobStatus, GroupInfo, Heartbeat, Hints, Phase

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

JOB = "ns/a"
TOKEN = generate_token()


class MemoryStore:
    """One running job; its last report merged into its status as the local store does."""

    def __init__(self) -> None:
        self.hints: dict[str, Hints] = {}
        self.beats: list[Heartbeat] = []

    def token_owner(self, token: str, job: str) -> str | None:
        return find_owner([(JOB, TOKEN)], token, prefer=job)

    def put_hints(self, job: str, hints: Hints) -> None:
        if job != JOB:
            raise UnknownJob(job)
        self.hints[job] = hints

    def put_heartbeat(self, job: str, beat: Heartbeat) -> None:
        if job != JOB:
            raise UnknownJob(job)
        self.beats.append(beat)

    def get_hints(self, job: str) -> Hints | None:
        if job != JOB:
            raise UnknownJob(job)
        return self.hints.get(job)

    def group_info(self, job: str) -> GroupInfo | None:
        if job != JOB:
            raise UnknownJob(job)
        return GroupInfo(job=job, group=1, phase=Phase.RUNNING, world_size=2, allocation=["n", "n"])

    def list_jobs(self) -> Iterable[JobSnapshot]:
        h = self.hints.get(JOB)
        st = AdaptiveJobStatus(phase=Phase.RUNNING, group=1, replicas=2, allocation=["n", "n"])
        if h is not None:
            st.hints, st.batch_size = h, h.batch_size
            st.goodput = current_goodput(h, st.replicas)
        return [JobSnapshot(JOB, st, gpus_per_replica=1)]

    def ready(self) -> bool:
        return True


STORE = MemoryStore()
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
