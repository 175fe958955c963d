"""The HTTP service over a fake store: every status code, rendezvous, health, metrics."""

from __future__ import annotations

import asyncio
import json
import warnings
from collections.abc import Iterable

import pytest
from prometheus_client.parser import text_string_to_metric_families

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

from adl.api import METRIC_NAMES, AdlMetrics, JobSnapshot, create_app
from adl.api.app import MAX_BODY_BYTES, create_metrics_app
from adl.api.auth import find_owner, generate_token
from adl.models import AdaptiveJobStatus, GroupInfo, Heartbeat, Hints, Phase, RestartCause
from tests.memory_store import MemoryStore

TOKENS = {"ns/a": generate_token(), "ns/b": generate_token()}
HINTS = {"initBatchSize": 32, "maxBatchSize": 256, "batchSize": 64, "goodput": 1.5}


def api_store(kind: type[MemoryStore] = MemoryStore) -> MemoryStore:
    """ns/a running a group of three replicas (two GPUs each) on two nodes; ns/b pending."""
    running = AdaptiveJobStatus(
        phase=Phase.RUNNING,
        group=2,
        allocation=["n0", "n0", "n1"],
        replicas=3,
        restarts={RestartCause.RESIZE: 2, RestartCause.FAILURE: 1},
        batch_size=96,
        goodput=4.25,
        attained_service_s=30.0,
    )
    jobs = {"ns/a": running, "ns/b": AdaptiveJobStatus(phase=Phase.PENDING)}
    return kind(jobs, TOKENS, gpus_per_replica=2)


class AsyncStore(MemoryStore):
    """The kit's store with coroutine methods, like the operator's Kubernetes-backed store."""

    async def token_owner(self, token: str, job: str) -> str | None:  # type: ignore[override]
        return MemoryStore.token_owner(self, token, job)

    async def put_hints(self, job: str, hints: Hints) -> None:  # type: ignore[override]
        MemoryStore.put_hints(self, job, hints)

    async def group_info(self, job: str) -> GroupInfo | None:  # type: ignore[override]
        return MemoryStore.group_info(self, job)

    async def list_jobs(self) -> Iterable[JobSnapshot]:  # type: ignore[override]
        return MemoryStore.list_jobs(self)


def auth(job: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[job]}"}


@pytest.fixture(params=[MemoryStore, AsyncStore], ids=["sync-store", "async-store"])
def store(request: pytest.FixtureRequest) -> MemoryStore:
    return api_store(request.param)


@pytest.fixture
def client(store: MemoryStore) -> TestClient:
    return TestClient(create_app(store))


URL = "/v1/jobs/ns/a/hints"


def test_put_hints_with_own_token(client: TestClient, store: MemoryStore) -> None:
    r = client.put(URL, json=HINTS, headers=auth("ns/a"))
    assert r.status_code == 204, r.text
    assert store.hints["ns/a"] == Hints.model_validate(HINTS)
    got = client.get(URL, headers=auth("ns/a"))
    assert got.status_code == 200 and got.json()["maxBatchSize"] == 256


def test_a_heartbeat_reaches_the_store_only_with_the_jobs_own_token(
    client: TestClient, store: MemoryStore
) -> None:
    url, beat = "/v1/jobs/ns/a/heartbeat", {"group": 2, "rank": 1, "steps": 40, "stepTimeS": 0.5}
    assert client.put(url, json=beat, headers=auth("ns/a")).status_code == 204
    assert store.beats == [("ns/a", Heartbeat.model_validate(beat))]
    assert client.put(url, json=beat, headers=auth("ns/b")).status_code == 403
    assert client.put(url, json=beat).status_code == 401
    too_far = beat | {"stepTimeS": 1e9}
    assert client.put(url, json=too_far, headers=auth("ns/a")).status_code == 422
    store.deleted.add("ns/a")
    assert client.put(url, json=beat, headers=auth("ns/a")).status_code == 404
    assert len(store.beats) == 1


@pytest.mark.parametrize("field", ["progress", "goodput", "totalProgress"])
@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_a_report_with_nan_or_infinity_is_refused(
    client: TestClient, store: MemoryStore, field: str, value: str
) -> None:
    """Kubernetes cannot store them, and a NaN model must not reach the scheduler."""
    body = json.dumps(HINTS)[:-1] + f', "{field}": {value}}}'
    r = client.put(URL, content=body, headers={**auth("ns/a"), "Content-Type": "application/json"})
    assert r.status_code == 422 and field in r.text
    assert "ns/a" not in store.hints


@pytest.mark.parametrize(
    ("headers", "detail"),
    [
        ({}, "missing bearer token"),
        ({"Authorization": "Bearer not-a-token"}, "invalid bearer token"),
        ({"Authorization": f"Basic {TOKENS['ns/a']}"}, "missing bearer token"),
        ({"Authorization": "Bearer "}, "missing bearer token"),
    ],
)
def test_401_without_a_valid_token(client: TestClient, headers: dict[str, str], detail: str):
    r = client.put(URL, json=HINTS, headers=headers)
    assert r.status_code == 401
    assert r.json()["detail"] == detail
    assert r.headers["www-authenticate"] == "Bearer"


def test_403_with_another_jobs_token(client: TestClient, store: MemoryStore) -> None:
    r = client.put(URL, json=HINTS, headers=auth("ns/b"))
    assert r.status_code == 403
    assert "ns/a" in r.json()["detail"]
    assert "ns/a" not in store.hints
    assert client.get("/v1/jobs/ns/a/group", headers=auth("ns/b")).status_code == 403


def test_auth_checked_before_the_body(client: TestClient) -> None:
    """An unauthenticated caller learns nothing about the schema."""
    assert client.put(URL, json={"bogus": 1}).status_code == 401


def test_422_lists_field_errors(client: TestClient) -> None:
    bad = {"initBatchSize": 0, "maxBatchSize": 8, "localBszBounds": [4, 2], "bogus": True}
    r = client.put(URL, json=bad, headers=auth("ns/a"))
    assert r.status_code == 422
    errors = {tuple(e["loc"]): e["msg"] for e in r.json()["detail"]}
    assert "greater than or equal to 1" in errors[("body", "initBatchSize")]
    assert ("body", "bogus") in errors and "Extra inputs" in errors[("body", "bogus")]
    assert any("localBszBounds" in msg for msg in errors.values())


def test_422_cross_field_rule(client: TestClient) -> None:
    r = client.put(URL, json={"initBatchSize": 64, "maxBatchSize": 32}, headers=auth("ns/a"))
    assert r.status_code == 422
    assert "maxBatchSize (32) must be >= initBatchSize (64)" in r.text


def test_422_bad_path(client: TestClient) -> None:
    r = client.put("/v1/jobs/NS_bad/a/hints", json=HINTS, headers=auth("ns/a"))
    assert r.status_code == 422


def test_404_when_the_job_is_gone(client: TestClient, store: MemoryStore) -> None:
    store.deleted.add("ns/a")
    assert client.put(URL, json=HINTS, headers=auth("ns/a")).status_code == 404
    assert client.get(URL, headers=auth("ns/a")).status_code == 404


def test_get_hints_before_any_report(client: TestClient) -> None:
    assert client.get(URL, headers=auth("ns/a")).status_code == 204


def test_group_discovery(client: TestClient) -> None:
    r = client.get("/v1/jobs/ns/a/group", headers=auth("ns/a"))
    assert r.status_code == 200
    assert r.json() == {
        "job": "ns/a", "group": 2, "phase": "Running", "masterAddr": "127.0.0.1",
        "masterPort": 29500, "worldSize": 3, "numNodes": 2, "allocation": ["n0", "n0", "n1"],
    }  # fmt: skip
    none = client.get("/v1/jobs/ns/b/group", headers=auth("ns/b"))
    assert none.status_code == 404 and "no worker group" in none.json()["detail"]
    assert client.get("/v1/jobs/ns/a/group").status_code == 401


def test_health_and_readiness(client: TestClient, store: MemoryStore) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").status_code == 200
    store.healthy = False
    assert client.get("/readyz").status_code == 503
    store.healthy = None
    r = client.get("/readyz")
    # not ready, and the store's own error (internals, on Kubernetes) stays in the log
    assert r.status_code == 503 and r.json()["status"] == "unavailable"
    assert "database is locked" not in r.text
    assert client.get("/healthz").status_code == 200


def test_a_blocking_store_runs_off_the_event_loop() -> None:
    """A SQLite store waiting for a write lock must not stall every other request."""
    seen: list[bool] = []

    class Probe(MemoryStore):
        def put_hints(self, job: str, hints: Hints) -> None:
            try:
                asyncio.get_running_loop()
                seen.append(True)  # called on the loop's thread
            except RuntimeError:
                seen.append(False)
            super().put_hints(job, hints)

    client = TestClient(create_app(api_store(Probe)))
    assert client.put(URL, json=HINTS, headers=auth("ns/a")).status_code == 204
    assert seen == [False]


def test_an_oversized_body_is_refused_before_it_is_parsed(store: MemoryStore) -> None:
    metrics = AdlMetrics()
    client = TestClient(create_app(store, metrics=metrics))
    big = json.dumps({**HINTS, "pad": "x" * MAX_BODY_BYTES}).encode()
    headers = {**auth("ns/a"), "content-type": "application/json"}
    r = client.put(URL, content=big, headers=headers)
    assert r.status_code == 413 and "over" in r.json()["detail"]
    # the same streamed without a length (chunked)
    chunks = iter([big[i : i + 65536] for i in range(0, len(big), 65536)])
    r = client.put(
        URL, content=chunks, headers={**auth("ns/a"), "content-type": "application/json"}
    )
    assert r.status_code == 413
    assert "ns/a" not in store.hints
    # a normal report still goes through, streamed or not
    small = json.dumps(HINTS).encode()
    r = client.put(URL, content=iter([small[:10], small[10:]]), headers=headers)
    assert r.status_code == 204 and store.hints["ns/a"].batch_size == 64


def test_every_answer_to_a_report_is_counted_by_code(store: MemoryStore) -> None:
    metrics = AdlMetrics()
    client = TestClient(create_app(store, metrics=metrics))
    client.put(URL, json=HINTS, headers=auth("ns/a"))  # 204
    client.put(URL, json=HINTS)  # 401
    client.put(URL, json=HINTS, headers=auth("ns/b"))  # 403
    client.put(URL, json={"bogus": 1}, headers=auth("ns/a"))  # 422
    client.get(URL, headers=auth("ns/a"))  # not a report
    s = _samples(client.get("/metrics").text)
    counts = {dict(k[1])["code"]: v for k, v in s.items() if k[0] == "adl_hints_reports_total"}
    assert counts == {"204": 1, "401": 1, "403": 1, "422": 1}


def test_a_store_failure_is_a_json_500_without_details(store: MemoryStore) -> None:
    def broken(job: str) -> GroupInfo | None:
        raise RuntimeError("secret internals")

    store.group_info = broken  # type: ignore[method-assign]
    client = TestClient(create_app(store), raise_server_exceptions=False)
    r = client.get("/v1/jobs/ns/a/group", headers=auth("ns/a"))
    assert r.status_code == 500 and "secret internals" not in r.text
    assert r.json()["detail"].startswith("internal error")


def test_docs_and_openapi_are_off_by_default(client: TestClient) -> None:
    # unauthenticated, they would list every route to anyone who reaches the port
    for path in ("/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"):
        assert client.get(path).status_code == 404, path


def test_openapi_served_when_enabled(store: MemoryStore) -> None:
    client = TestClient(create_app(store, docs=True))
    assert client.get("/docs").status_code == 200
    spec = client.get("/openapi.json").json()
    paths = spec["paths"]
    assert {"/v1/jobs/{namespace}/{name}/hints", "/v1/jobs/{namespace}/{name}/group"} <= set(paths)
    assert {"/healthz", "/readyz", "/metrics"} <= set(paths)
    assert "Hints" in spec["components"]["schemas"]
    assert "initBatchSize" in spec["components"]["schemas"]["Hints"]["properties"]


def test_metrics_can_be_served_apart_from_the_worker_api(store: MemoryStore) -> None:
    # /metrics names every tenant's jobs: it moves to a port of its own, which the
    # NetworkPolicy opens to Prometheus only, while workers keep the API port
    metrics = AdlMetrics()
    api = TestClient(create_app(store, metrics=metrics, serve_metrics=False))
    assert api.get("/metrics").status_code == 404
    assert api.get("/readyz").status_code == 200
    assert api.put(URL, json=HINTS, headers=auth("ns/a")).status_code == 204
    only = TestClient(create_metrics_app(store, metrics))
    r = only.get("/metrics")
    assert r.status_code == 200
    s = _samples(r.text)
    # the same registry: the report counted by the API shows on the metrics port
    assert s[("adl_hints_reports_total", (("code", "204"),))] == 1
    assert any(name == "adl_job_goodput" for name, _ in s)
    for path in ("/readyz", "/healthz", URL, "/docs", "/openapi.json"):
        assert only.get(path).status_code == 404, path


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics(store: MemoryStore) -> None:
    metrics = AdlMetrics()
    client = TestClient(create_app(store, metrics=metrics))
    client.put(URL, json=HINTS, headers=auth("ns/a"))
    for seconds in (0.002, 0.03, 0.4):
        metrics.observe_round(seconds)
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    s = _samples(r.text)
    a = (("name", "a"), ("namespace", "ns"))
    assert s[("adl_jobs", (("phase", "Running"),))] == 1
    assert s[("adl_jobs", (("phase", "Pending"),))] == 1
    assert s[("adl_jobs", (("phase", "Failed"),))] == 0
    assert s[("adl_job_replicas", a)] == 3
    assert s[("adl_job_gpus", a)] == 6
    assert s[("adl_job_restarts_total", (("cause", "resize"), *a))] == 2
    assert s[("adl_job_restarts_total", (("cause", "failure"), *a))] == 1
    assert s[("adl_job_goodput", a)] == 4.25
    assert s[("adl_job_batch_size", a)] == 96
    assert s[("adl_job_attained_service_seconds", a)] == 30
    assert s[("adl_round_latency_seconds_count", ())] == 3
    assert s[("adl_round_latency_seconds_bucket", (("le", "0.05"),))] == 2
    assert s[("adl_rounds_total", ())] == 3
    assert s[("adl_hints_reports_total", (("code", "204"),))] == 1
    names = {name for name, _ in s}
    for family in METRIC_NAMES:
        assert any(n == family or n.startswith(family + "_") for n in names), family


def test_each_app_has_its_own_registry() -> None:
    one, two = AdlMetrics(), AdlMetrics()
    one.observe_round(1.0)
    c1 = TestClient(create_app(api_store(), metrics=one))
    c2 = TestClient(create_app(api_store(), metrics=two))
    assert _samples(c1.get("/metrics").text)[("adl_rounds_total", ())] == 1
    assert _samples(c2.get("/metrics").text)[("adl_rounds_total", ())] == 0


def test_tokens_are_unique_and_owner_lookup_is_exact() -> None:
    tokens = {generate_token() for _ in range(100)}
    assert len(tokens) == 100 and all(len(t) >= 40 for t in tokens)
    table = [("ns/a", "abc"), ("ns/b", "abd")]
    assert find_owner(table, "abd") == "ns/b"
    assert find_owner(table, "ab") is None
    assert find_owner(table, "") is None


def test_the_job_a_request_names_wins_a_duplicate_token() -> None:
    table = [("ns/a", "same"), ("ns/b", "same"), ("ns/c", "other")]
    assert find_owner(table, "same", prefer="ns/a") == "ns/a"
    assert find_owner(table, "same", prefer="ns/b") == "ns/b"
    assert find_owner(table, "same", prefer="ns/c") == "ns/b"  # 403 for ns/c


def test_with_a_metrics_token_only_its_bearer_gets_the_families_that_name_jobs(
    store: MemoryStore,
) -> None:
    """The local daemon's API listens on loopback, where every local user reaches it: with a
    metrics token, a scrape without it (or with a job's token) gets the same figures without
    job names; with it, everything. Without a token set (the operator, whose metrics port a
    NetworkPolicy guards), every scrape gets everything."""
    guarded = TestClient(create_app(store, metrics_token=lambda: "m-token"))
    guarded.put(URL, json=HINTS, headers=auth("ns/a"))
    for headers in ({}, {"Authorization": "Bearer wrong"}, auth("ns/a")):
        text = guarded.get("/metrics", headers=headers).text
        s = _samples(text)
        assert s[("adl_jobs", (("phase", "Running"),))] == 1
        assert 'name="a"' not in text and "adl_job_replicas" not in text
        assert ("adl_hints_reports_total", (("code", "204"),)) in s
    named = guarded.get("/metrics", headers={"Authorization": "Bearer m-token"}).text
    assert _samples(named)[("adl_job_replicas", (("name", "a"), ("namespace", "ns")))] == 3
    open_app = TestClient(create_app(store))
    assert 'name="a"' in open_app.get("/metrics").text
