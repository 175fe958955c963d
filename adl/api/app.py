"""The FastAPI service workers talk to; both backends mount ``create_app(store)``.

- ``PUT /v1/jobs/{ns}/{name}/hints``: a job's report (bearer token of that job)
- ``GET /v1/jobs/{ns}/{name}/hints``: the last report (same token)
- ``GET /v1/jobs/{ns}/{name}/group``: rendezvous/discovery of the current worker group
- ``PUT /v1/jobs/{ns}/{name}/heartbeat``: a rank's liveness and step count (same token), for
  hung-rank detection (``adl.controller.liveness``)
- ``/healthz`` (process alive), ``/readyz`` (store answers), ``/metrics`` (Prometheus; or on
  an app of its own, ``create_metrics_app``, served on another port)
- ``/openapi.json`` and ``/docs`` (FastAPI's own), only with ``docs=True``

Nothing but the job routes asks for a token, so what else is served is kept small: the
metrics name every job of every tenant, and the schema lists every route.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import Depends, FastAPI, Header, HTTPException, Path, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from adl.api.auth import bearer_token, check
from adl.api.limits import BodyLimit
from adl.api.metrics import CONTENT_TYPE, AdlMetrics
from adl.api.store import ApiStore, UnknownJob, call
from adl.models import GroupInfo, Heartbeat, Hints

log = logging.getLogger(__name__)

#: Largest request body accepted: a report is a few kilobytes.
MAX_BODY_BYTES = 1 << 20

#: Kubernetes names: lowercase alphanumerics and '-', at most 63 characters.
NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"

Namespace = Annotated[str, Path(pattern=NAME_PATTERN, description="job namespace")]
Name = Annotated[str, Path(pattern=NAME_PATTERN, description="job name")]


async def authorized_job(
    request: Request,
    namespace: Namespace,
    name: Name,
    authorization: Annotated[str | None, Header()] = None,
) -> str:
    """The job key, once the bearer token is known to belong to that job (401/403 if not)."""
    store: ApiStore = request.app.state.store
    job = f"{namespace}/{name}"
    token = bearer_token(authorization)
    owner = await call(store.token_owner, token, job) if token is not None else None
    error = check(job, token, owner)
    if error is not None:
        raise error.exception()
    return job


Job = Annotated[str, Depends(authorized_job)]


def _metrics_route(
    app: FastAPI, store: ApiStore, m: AdlMetrics, token: Callable[[], str | None] | None = None
) -> None:
    @app.get("/metrics", tags=["health"], response_class=Response)
    async def metrics_endpoint(authorization: Annotated[str | None, Header()] = None) -> Response:
        """Prometheus text exposition (job gauges are read from the store at scrape time).
        Where a metrics ``token`` is set, only a scrape bearing it gets the families that name
        jobs; any other gets the same figures without names."""
        named = True
        if token is not None:
            expected, given = token(), bearer_token(authorization)
            named = bool(expected and given and hmac.compare_digest(expected, given))
        m.set_jobs(await call(store.list_jobs))
        return Response(content=m.render(named=named), media_type=CONTENT_TYPE)


def create_metrics_app(store: ApiStore, metrics: AdlMetrics) -> FastAPI:
    """Only ``/metrics``, for a port of its own (the worker API's app then leaves it out),
    so a NetworkPolicy can open it to Prometheus without opening the workers' port."""
    app = FastAPI(title="adl metrics", openapi_url=None, docs_url=None, redoc_url=None)
    app.state.store, app.state.metrics = store, metrics
    _metrics_route(app, store, metrics)
    return app


def create_app(
    store: ApiStore,
    *,
    metrics: AdlMetrics | None = None,
    title: str = "adl",
    docs: bool = False,
    serve_metrics: bool = True,
    metrics_token: Callable[[], str | None] | None = None,
) -> FastAPI:
    """A service over ``store``. ``metrics`` (kept by the caller to record round latencies)
    defaults to a fresh registry; it is also reachable as ``app.state.metrics``. ``docs``
    serves ``/docs``, ``/redoc`` and ``/openapi.json``; ``serve_metrics=False`` leaves
    ``/metrics`` to a ``create_metrics_app`` on another port; ``metrics_token`` (read per
    scrape) keeps the families that name jobs to scrapes bearing it."""
    app = FastAPI(
        title=title,
        summary="adl control-plane API: job hints, rendezvous, health and metrics",
        version="1",
        # no schema means no /docs or /redoc either (they render it)
        openapi_url="/openapi.json" if docs else None,
    )
    app.state.store = store
    app.state.metrics = metrics if metrics is not None else AdlMetrics()
    m: AdlMetrics = app.state.metrics

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        """422 with what was wrong where; the rejected input is not echoed (a NaN in it made
        FastAPI's own handler fail to render the answer: a 500 instead of the 422)."""
        errors = [{k: v for k, v in e.items() if k not in ("input", "ctx")} for e in exc.errors()]
        return JSONResponse(status_code=422, content={"detail": errors})

    @app.exception_handler(Exception)
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        """A JSON 500 like every other answer; the details go to the server log only."""
        return JSONResponse(
            status_code=500, content={"detail": "internal error (see the server's log)"}
        )

    app.add_middleware(BodyLimit, limit=MAX_BODY_BYTES)  # inside the counting below

    @app.middleware("http")
    async def count_reports(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        """Every answer to a report, by status code (401, 403, 413 and 422 included)."""
        if request.method != "PUT" or not request.url.path.endswith("/hints"):
            return await call_next(request)
        try:
            response = await call_next(request)
        except Exception:
            m.hints_reports.labels(code="500").inc()
            raise
        m.hints_reports.labels(code=str(response.status_code)).inc()
        return response

    def _gone(job: str) -> HTTPException:
        return HTTPException(status_code=404, detail=f"job {job} not found")

    @app.put(
        "/v1/jobs/{namespace}/{name}/hints",
        status_code=204,
        responses={401: {}, 403: {}, 404: {}, 422: {}},
        tags=["jobs"],
    )
    async def put_hints(job: Job, hints: Hints) -> Response:
        """Record the job's latest report for the scheduler."""
        try:
            await call(store.put_hints, job, hints)
        except UnknownJob:
            raise _gone(job) from None
        return Response(status_code=204)

    @app.get(
        "/v1/jobs/{namespace}/{name}/hints",
        response_model=Hints,
        response_model_by_alias=True,
        response_model_exclude_none=True,
        responses={204: {}, 401: {}, 403: {}, 404: {}},
        tags=["jobs"],
    )
    async def get_hints(job: Job) -> Hints | Response:
        """The last report (204 before the first one)."""
        try:
            hints = await call(store.get_hints, job)
        except UnknownJob:
            raise _gone(job) from None
        return Response(status_code=204) if hints is None else hints

    @app.put(
        "/v1/jobs/{namespace}/{name}/heartbeat",
        status_code=204,
        responses={401: {}, 403: {}, 404: {}, 422: {}},
        tags=["jobs"],
    )
    async def put_heartbeat(job: Job, beat: Heartbeat) -> Response:
        """Record that a rank of the job is alive and how far it got."""
        try:
            await call(store.put_heartbeat, job, beat)
        except UnknownJob:
            raise _gone(job) from None
        return Response(status_code=204)

    @app.get(
        "/v1/jobs/{namespace}/{name}/group",
        response_model=GroupInfo,
        response_model_by_alias=True,
        responses={401: {}, 403: {}, 404: {}},
        tags=["jobs"],
    )
    async def get_group(job: Job) -> GroupInfo:
        """Where the job's current worker group meets; 404 before its first group."""
        try:
            info = await call(store.group_info, job)
        except UnknownJob:
            raise _gone(job) from None
        if info is None:
            raise HTTPException(status_code=404, detail=f"job {job} has no worker group yet")
        return info

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        """Liveness: the process serves requests."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], responses={503: {}})
    async def readyz() -> Response:
        """Readiness: the backing store answers."""
        try:
            ok = bool(await call(store.ready))
        except Exception:  # a broken store is "not ready", never a 500
            # the error may carry the backend's internals (API server headers, the service
            # account's name): the log gets it, an unauthenticated caller does not
            log.warning("readiness: the state store failed", exc_info=True)
            return JSONResponse(
                {"status": "unavailable", "detail": "the state store did not answer"},
                status_code=503,
            )
        if not ok:
            return JSONResponse({"status": "unavailable"}, status_code=503)
        return JSONResponse({"status": "ready"})

    if serve_metrics:
        _metrics_route(app, store, m, metrics_token)
    return app
