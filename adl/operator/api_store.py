"""The API service's store on Kubernetes: the AdaptiveJob objects themselves.

Hints go to ``status.hints`` with what the status shows of them (the operator's own status
writes leave the report alone, and a report wakes no reconcile), the ranks' heartbeats to the
operator's in-memory ``ProgressBook`` (hung-rank detection), tokens are checked against the
SHA-256 kept in the job's ``adl.dev/token-sha256`` annotation (the token itself lives only in
the job's Secret and the workers' mount), rendezvous facts come from the status and the pod
naming scheme. ``serve`` runs the API beside kopf in the operator process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any

from kubernetes.client.exceptions import ApiException

from adl.api.auth import find_owner, token_digest
from adl.api.store import JobSnapshot, UnknownJob
from adl.contract import JobKey
from adl.controller.liveness import ProgressBook
from adl.controller.status_hints import HINTS_FIELDS, reflect_hints
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, GroupInfo, Heartbeat, Hints
from adl.operator import pods as P
from adl.operator.scheduling import job_key
from adl.operator.store import Conflict, KubeStore

log = logging.getLogger(__name__)


def _status(body: dict[str, Any]) -> AdaptiveJobStatus:
    return AdaptiveJobStatus.from_object(body)


#: how long a token checked against its job's hash is taken without reading the job again: each
#: rank's heartbeat (every few seconds) would otherwise cost one GET of the job on the API
#: server. The bound on what it lets through: a job deleted and created again under the same
#: name takes the old job's token for at most this long.
TOKEN_CACHE_S = 10.0
#: jobs remembered at most (past it the memory starts over: one more GET per job)
TOKEN_CACHE_JOBS = 10_000


#: reads of the job a hints report makes at most when its status keeps changing under it
HINTS_WRITE_TRIES = 3


def _shown(body: dict[str, Any], hints: Hints, now: datetime) -> dict[str, Any]:
    """The status fields that show ``hints`` (``reflect_hints``) for the job ``body`` once it
    reported them, as a merge patch (explicit nulls clear what no longer applies); none for a
    status the models refuse (hand-edited): the report is stored all the same."""
    try:
        status = _status(body)
    except ValueError:
        log.warning("%s: status unreadable, the report is stored alone", job_key(body))
        return {}
    status.hints = hints
    reflect_hints(status, now)
    return status.model_dump(mode="json", by_alias=True, include=set(HINTS_FIELDS))


def _token_hash(body: dict[str, Any]) -> str:
    return str((body["metadata"].get("annotations") or {}).get(P.ANNOTATION_TOKEN_HASH) or "")


class OperatorApiStore:
    """``adl.api.store.ApiStore`` over the Kubernetes API (async: calls run in threads)."""

    def __init__(
        self,
        store: KubeStore,
        namespaces: list[str] | None = None,
        progress: ProgressBook | None = None,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.store = store
        self._clock = clock
        self._now = now  # the wall clock of ``finishingSince``
        #: job -> (the token digest its hash matched, until when that is taken unread)
        self._verified: dict[str, tuple[str, float]] = {}
        self.namespaces = namespaces or []
        #: the operator's (``OperatorConfig.progress``): heartbeats stay in this process's
        #: memory, never in the job's status (one write per rank every few seconds)
        self.progress = progress if progress is not None else ProgressBook()

    def _split(self, job: str) -> tuple[str, str]:
        key = JobKey.parse(job)
        return key.namespace, key.name

    async def _jobs(self) -> list[dict[str, Any]]:
        if not self.namespaces:
            return await asyncio.to_thread(self.store.list_jobs, None)
        out: list[dict[str, Any]] = []
        for ns in self.namespaces:
            out += await asyncio.to_thread(self.store.list_jobs, ns)
        return out

    async def _job(self, job: str) -> dict[str, Any]:
        ns, name = self._split(job)
        body = await asyncio.to_thread(self.store.get_job, ns, name)
        if body is None:
            raise UnknownJob(job)
        return body

    async def token_owner(self, token: str, job: str) -> str | None:
        digest = token_digest(token)
        now = self._clock()
        known = self._verified.get(job)
        if known is not None and known[0] == digest and now < known[1]:
            return job  # checked against the job's hash within TOKEN_CACHE_S
        with contextlib.suppress(UnknownJob):  # the common case: one GET, no list
            if find_owner([(job, _token_hash(await self._job(job)))], digest) == job:
                if len(self._verified) >= TOKEN_CACHE_JOBS:
                    self._verified.clear()
                self._verified[job] = (digest, now + TOKEN_CACHE_S)
                return job
        # Only to tell another job's token (403) from no job's (401).
        return find_owner(((job_key(b), _token_hash(b)) for b in await self._jobs()), digest)

    async def put_hints(self, job: str, hints: Hints) -> None:
        """Store the report with what the status shows of it (batch size, goodput, since when
        the job says its work is done: ``reflect_hints``), in one patch made against the
        status it was computed from. The operator reconciles nothing on a report
        (``adl.operator.job_causes``), so the shown fields are written here, not by a step."""
        ns, name = self._split(job)
        # explicit nulls: fields the job stopped reporting are cleared, not merged
        report = hints.model_dump(mode="json", by_alias=True)
        try:
            for _ in range(HINTS_WRITE_TRIES):
                body = await self._job(job)
                version = body["metadata"].get("resourceVersion")
                patch = {"hints": report, **_shown(body, hints, self._now())}
                with contextlib.suppress(Conflict):  # the status changed since: read it again
                    await asyncio.to_thread(self.store.patch_job_status, ns, name, patch, version)
                    return
            # a status that keeps changing: the report alone (the next report or step shows it)
            await asyncio.to_thread(self.store.patch_job_status, ns, name, {"hints": report}, None)
        except ApiException as exc:
            if exc.status == 404:
                raise UnknownJob(job) from exc
            raise

    async def put_heartbeat(self, job: str, beat: Heartbeat) -> None:
        # the token check read the job: it exists
        self.progress.record(job, beat)

    async def get_hints(self, job: str) -> Hints | None:
        return _status(await self._job(job)).hints

    async def group_info(self, job: str) -> GroupInfo | None:
        body = await self._job(job)
        st = _status(body)
        if st.group == 0:
            return None
        ref = P.JobRef.from_body(
            {**body, "metadata": {**body["metadata"], "namespace": self._split(job)[0]}}
        )
        return GroupInfo(
            job=job,
            group=st.group,
            phase=st.phase,
            master_addr=P.master_addr(ref, st.group),
            master_port=P.MASTER_PORT,
            world_size=len(st.allocation),
            num_nodes=len(P.node_slots(st.allocation)),
            allocation=list(st.allocation),
        )

    async def list_jobs(self) -> Iterable[JobSnapshot]:
        out = []
        for body in await self._jobs():
            try:
                gpus = AdaptiveJobSpec.model_validate(body.get("spec") or {}).gpus_per_replica
            except ValueError:
                gpus = 0
            try:
                status = _status(body)
            except ValueError:  # a hand-edited status the models refuse: one job, not /metrics
                log.warning("%s: status unreadable, left out of the metrics", job_key(body))
                continue
            out.append(JobSnapshot(job_key(body), status, gpus))
        return out

    async def ready(self) -> bool:
        await self._jobs()
        return True


async def serve(
    port: int,
    namespaces: list[str] | None = None,
    stop: asyncio.Event | None = None,
    started: asyncio.Event | None = None,
    metrics: Any = None,
    *,
    metrics_port: int | None = None,
    docs: bool = False,
    host: str = "0.0.0.0",
    progress: ProgressBook | None = None,
) -> None:
    """Serve the API on ``port`` in the running loop (next to kopf) until ``stop`` is set;
    ``started`` is set once it listens. ``metrics``: the ``AdlMetrics`` the operator's rounds
    also write to (a fresh set when None). With ``metrics_port``, ``/metrics`` is served there
    and not on ``port`` (the chart's NetworkPolicy opens the two ports to different peers);
    ``docs`` serves ``/docs`` and ``/openapi.json``. ``host``: all interfaces in a pod (the
    workers reach the pod's IP); tests pass 127.0.0.1. ``progress``: the operator's book of
    the ranks' heartbeats (a fresh one when None).

    kopf owns SIGTERM/SIGINT in the operator process: uvicorn's own signal capture would
    replace kopf's handler (or be replaced by it), leaving one of the two running forever
    after a pod termination. So uvicorn installs none and stops when the operator does."""
    import uvicorn

    from adl.api.app import create_app, create_metrics_app
    from adl.api.metrics import AdlMetrics

    listening: list[int] = []  # servers started so far; ``started`` waits for all of them

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            listening.append(1)
            if started is not None and len(listening) == len(configs):
                started.set()

        async def on_tick(self, counter: int) -> bool:
            # polled by uvicorn's main loop: no extra task, which kopf would cancel
            return (stop is not None and stop.is_set()) or await super().on_tick(counter)

    metrics = metrics if metrics is not None else AdlMetrics()
    api_store = OperatorApiStore(KubeStore(), namespaces, progress)
    separate = metrics_port is not None
    app = create_app(api_store, metrics=metrics, docs=docs, serve_metrics=not separate)
    configs = [uvicorn.Config(app, host=host, port=port, log_level="info")]
    if metrics_port is not None:
        only = create_metrics_app(api_store, metrics)
        # no logging config of its own: a second one would reset the uvicorn loggers the
        # first set up; and no access line per scrape
        quiet = uvicorn.Config(
            only, host=host, port=metrics_port, log_config=None, log_level=None, access_log=False
        )
        configs.append(quiet)
    if stop is None:  # alone in its process: uvicorn's usual signal handling
        await asyncio.gather(*(uvicorn.Server(c).serve() for c in configs))
    else:
        await asyncio.gather(*(Server(c).serve() for c in configs))
