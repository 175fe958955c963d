"""kopf handlers: a worker-pod event, or an AdaptiveJob change that is a cause
(``adl.operator.job_causes``: not a hints report), reconciles the job; a per-job timer keeps
time-based work moving (backoff expiry, starting jobs rechecked); one loop of the operator's
(``round_loop``, started and stopped with kopf) runs the cluster-wide scheduling round when it
is due. All go through the shared driver (``adl.controller.driver``) over the Kubernetes
backend (``adl.operator.backend``), in a worker thread: the kubernetes client blocks, and the
optimization must not stall kopf's event loop. Run with ``python -m adl.operator`` (which also
serves the API) or ``kopf run -m adl.operator.handlers``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import kopf
import urllib3
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from adl.controller.actions import SetStatus
from adl.controller.driver import Driver
from adl.controller.job_record import JobRecord
from adl.controller.liveness import ProgressBook, judge
from adl.controller.rounds import RoundResult
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, Condition, Phase
from adl.operator import backend as B
from adl.operator import event_posting
from adl.operator import pods as P
from adl.operator.backend import KubeStepContext, KubeWorkerBackend, OperatorConfig, status_patch
from adl.operator.crd import GROUP, PLURAL, VERSION
from adl.operator.disruption import describe, leaving_reason
from adl.operator.job_causes import cause_digest
from adl.operator.kueue import FlavorError
from adl.operator.kueue_sync import admitted_pool, ensure_workload
from adl.operator.observe import classify_all
from adl.operator.pods import NodePool
from adl.operator.retries import API_RETRIES
from adl.operator.scheduling import desired_allocation
from adl.operator.store import KUBE_URL_ENV, Conflict, KubeStore
from adl.operator.timestamps import parse_time
from adl.sched.types import Policy

__all__ = ["DEFAULT_CONFIG", "OperatorConfig", "Runtime", "cluster_round", "reconcile_job"]

log = logging.getLogger("adl.operator")

#: what an operator started without a config in its memo runs with (``kopf run -m
#: adl.operator.handlers``); ``python -m adl.operator`` passes its own
DEFAULT_CONFIG = OperatorConfig()


@dataclass
class RoundStats:
    last: float = 0.0
    #: a forced round found one running (which may have read the jobs before the change that
    #: asked for it), or one failed: the round loop runs one regardless of the interval
    due: bool = False
    #: set when a round becomes due: the loop waits on it between rounds
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def ask(self) -> None:
        """A round as soon as the loop can run one."""
        self.due = True
        self.wake.set()


class Runtime:
    """Per-run state kept in kopf's memo: the config, the backend and its driver, one lock per
    job, the round."""

    def __init__(
        self,
        store: KubeStore,
        policy: Policy | None,
        config: OperatorConfig | None = None,
        events: B.EventSink = B.post_kopf_event,
    ) -> None:
        self.config = config or DEFAULT_CONFIG
        self.backend = KubeWorkerBackend(store, self.config, events)
        policy = policy if policy is not None else self.config.policy_factory()
        self.driver = Driver(self.backend, policy, self.config.timing, on_round=self._on_round)
        self.locks: dict[str, asyncio.Lock] = {}
        self.round_lock = asyncio.Lock()
        self.rounds = RoundStats()
        self.exiting = False
        self.reconciled: dict[str, float] = {}  # job key -> monotonic time of the last reconcile
        #: job key -> the causes (``job_causes.cause_digest``) of its last event reacted to
        self.causes: dict[str, str] = {}
        #: the jobs seen and not being deleted: the loop runs no periodic round without one
        self.jobs: set[str] = set()
        #: the round loop (``round_loop``), from kopf's start-up to its clean-up
        self.round_task: asyncio.Task[None] | None = None
        #: kopf's event poster, captured in the first job handler for the round loop's task
        #: (``adl.operator.event_posting``)
        self.event_poster: event_posting.Poster | None = None
        #: node -> why it is about to go away, for the nodes seen so marked (each mark acted on
        #: once: ``on_node_event``)
        self.leaving: dict[str, str] = {}

    @property
    def store(self) -> KubeStore:
        return self.backend.store

    @store.setter
    def store(self, store: KubeStore) -> None:
        self.backend.store = store

    @property
    def policy(self) -> Policy:
        return self.driver.policy

    @policy.setter
    def policy(self, policy: Policy) -> None:
        self.driver.policy = policy

    def lock(self, key: str) -> asyncio.Lock:
        return self.locks.setdefault(key, asyncio.Lock())

    def _on_round(self, result: RoundResult) -> None:
        if self.config.metrics is not None:
            self.config.metrics.observe_round(result.duration_s)


def _now() -> datetime:
    return datetime.now(UTC)


def _status_of(body: dict[str, Any]) -> AdaptiveJobStatus:
    return AdaptiveJobStatus.from_object(body)


async def _fail_invalid(rt: Runtime, body: dict[str, Any], error: ValidationError) -> None:
    status = _status_of(body)
    if status.phase == Phase.FAILED:
        return
    message = "; ".join(
        f"{'.'.join(str(x) for x in e['loc']) or 'spec'}: {e['msg']}" for e in error.errors()
    )
    status.phase, status.reason, status.message = Phase.FAILED, "InvalidSpec", message
    status.conditions = [
        Condition(
            type="Failed",
            status="True",
            reason="InvalidSpec",
            message=message,
            last_transition_time=_now(),
        )
    ]
    meta = body["metadata"]
    await asyncio.to_thread(
        rt.store.patch_job_status, meta["namespace"], meta["name"], status_patch(status), None
    )
    rt.backend.events(body, "Warning", "InvalidSpec", message)


async def reconcile_job(rt: Runtime, namespace: str | None, name: str) -> None:
    """Reconcile the job; when that finished or suspended it, hand its GPUs out at once (a
    round now) rather than leave them idle until the next round interval."""
    if await _reconcile_job(rt, namespace, name):
        await cluster_round(rt, force=True)


async def _reconcile_job(rt: Runtime, namespace: str | None, name: str) -> bool:
    """Read the job, step it through the driver; retried on conflicts. Returns whether this
    step gave GPUs back (a job holding some finished or was suspended)."""
    namespace = namespace or ""
    key = f"{namespace}/{name}"
    async with rt.lock(key):
        rt.reconciled[key] = time.monotonic()
        for _ in range(5):
            body = await asyncio.to_thread(rt.store.get_job, namespace, name)
            if body is None or body["metadata"].get("deletionTimestamp"):
                return False
            body["metadata"].setdefault("namespace", namespace)
            try:
                spec = AdaptiveJobSpec.model_validate(body.get("spec") or {})
            except ValidationError as exc:
                await _fail_invalid(rt, body, exc)
                return False
            status = _status_of(body)
            desired = desired_allocation(body)
            created = parse_time(body["metadata"].get("creationTimestamp")) or _now()
            # a job in a Kueue queue runs only as far as Kueue admitted it
            workload, admitted = (
                await asyncio.to_thread(
                    ensure_workload, rt.store, body, spec, rt.config.gpu_resource
                )
                if rt.config.kueue
                else (None, None)
            )
            # its pods go to the admitted flavor's nodes (a flavor that gives none: a failed
            # start that says why)
            pool: NodePool | FlavorError | None = None
            if admitted is not None and admitted.ceiling and admitted.flavors:
                try:
                    pool = await asyncio.to_thread(admitted_pool, rt.store, admitted)
                except FlavorError as exc:
                    pool = exc
            job = JobRecord(
                key,
                spec,
                status,
                created,
                desired,
                ceiling=admitted.ceiling if admitted else None,
                quota_wait=admitted.waiting_message() if admitted else None,
                context=KubeStepContext.read(body, spec, pool, workload),
            )
            try:
                # the driver's step with what this reconcile read, in a worker thread
                actions = await asyncio.to_thread(rt.driver.step_job, job, _now())
            except (Conflict, B.StepAgain):
                # a conflict: read again; a refused pod, a wait for an outside cause begun or
                # over: the next step acts on it (a failed start; the status saying why, or
                # Starting again)
                continue
            return bool(status.allocation) and any(
                isinstance(a, SetStatus) and a.status.phase.sits_out_rounds for a in actions
            )
        log.warning("gave up reconciling %s after repeated conflicts", key)
        return False


# ------------------------------------------------------------------------ the scheduling round


async def cluster_round(rt: Runtime, *, force: bool = False) -> bool:
    """One scheduling round over every job, unless one ran recently (or is running)."""
    if rt.round_lock.locked():
        if force:
            rt.rounds.ask()
        return False
    async with rt.round_lock:
        waited = time.monotonic() - rt.rounds.last
        if not (force or rt.rounds.due) and waited < rt.config.round_interval_s:
            return False
        rt.rounds.last = time.monotonic()
        rt.rounds.due = False
        await asyncio.to_thread(rt.driver.run_round, _now())
        return True


def time_based_work_due(
    body: dict[str, Any], idle_s: float | None, now: datetime, recheck_s: float
) -> bool:
    """Whether the job needs a reconcile although nothing changed: its restart backoff ended,
    or it is Starting, Restarting or waiting for Kueue's admission and nobody looked at it for
    ``recheck_s`` (``idle_s``: seconds since the last reconcile, None for never), so a pod
    stuck Pending reaches its pending timeout, an old group that does not go away (its node is
    down) is reported as WaitingForStop on time, and a queued job's wait states current
    usage."""
    status = body.get("status") or {}
    until = parse_time(status.get("restartAfter"))
    if until is not None and now >= until:
        return True
    phase = status.get("phase")
    if phase == Phase.RESTARTING.value and until is not None:
        return False  # backing off after a failure: nothing to do before it ends
    if status.get("reason") == "WaitingForAdmission":
        # its message states its Kueue queue's usage, which changes without any event of the
        # job's (and Kueue's ClusterQueue status lags its admissions): looked at again
        return idle_s is None or idle_s >= recheck_s
    if phase not in (Phase.STARTING.value, Phase.RESTARTING.value):
        return False
    return idle_s is None or idle_s >= recheck_s


# ------------------------------------------------------------------------ kopf wiring


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """``$ADL_KUBE_URL`` (tests, local development) or kopf's usual in-cluster/kubeconfig."""
    url = os.environ.get(KUBE_URL_ENV)
    if url:
        return kopf.ConnectionInfo(server=url, insecure=True)
    return kopf.login_via_client(**kwargs)


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # Keep kopf's bookkeeping in annotations: the structural status schema would prune it.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=GROUP, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING
    # No CRD/namespace watching (it would need cluster-wide CRD access): the chart installs
    # the CRD before the operator starts.
    settings.scanning.disabled = True
    settings.watching.server_timeout = 300
    # Ride out control-plane outages: every API request kopf makes (the watches' listings,
    # the peering keep-alive, its own patches) retries with backoff and jitter for as long as
    # the server is away, instead of escalating after kopf's default 54 s, which ended the
    # operator. The watches reconnect with a pause, not in a tight loop.
    settings.networking.error_backoffs = API_RETRIES
    settings.watching.reconnect_backoff = 1.0
    # Handlers are short and idempotent: nothing is lost by exiting quickly on shutdown.
    settings.background.instant_exit_timeout = 0.1
    settings.queueing.exit_timeout = 0.5
    config = getattr(memo, "config", None) or DEFAULT_CONFIG
    rt = memo.runtime = Runtime(KubeStore(), None, config)
    rt.round_task = asyncio.create_task(round_loop(rt), name="adl-round-loop")


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    runtime: Runtime | None = getattr(memo, "runtime", None)
    if runtime is None:
        return
    runtime.exiting = True
    task, runtime.round_task = runtime.round_task, None
    if task is not None:
        task.cancel()
        # a round in its worker thread finishes there; the loop stops waiting for it now
        with contextlib.suppress(asyncio.CancelledError):
            await task


@kopf.on.event(GROUP, VERSION, PLURAL)
async def on_job_event(
    type: str, body: kopf.Body, namespace: str | None, name: str, memo: kopf.Memo, **_: Any
) -> None:
    """React to the causes among a job's changes (``adl.operator.job_causes``): a new or
    changed spec, labels or the round's answer, a status written by someone, the first look
    after a start. A change of the quiet status fields alone (a hints report with what the
    status shows of it, written by the API service; the round's accrued service) wakes no
    reconcile and lists no pods.

    Filtered here rather than by kopf's ``on.create``/``on.update``/``on.resume`` with field
    filters: those compare kopf's essence of the job, which leaves out the status and every
    annotation under the operator's prefix, the round's answer (``adl.dev/allocation``)
    among them, so a round's new answer would start no group."""
    rt: Runtime = memo.runtime
    if rt.event_poster is None:  # the round loop posts its events through it
        rt.event_poster = event_posting.capture()
    key = f"{namespace or ''}/{name}"
    if type == "DELETED" or body.get("metadata", {}).get("deletionTimestamp"):
        rt.causes.pop(key, None)
        rt.jobs.discard(key)
        return
    if key not in rt.jobs:
        rt.jobs.add(key)
        rt.rounds.wake.set()  # the loop may be idle for want of a job: it starts its interval
    digest = cause_digest(body)
    if rt.causes.get(key) == digest:
        return  # nothing the operator acts on changed (a hints report, the round's service)
    rt.causes[key] = digest
    try:
        phase = (body.get("status") or {}).get("phase")
        suspended = bool((body.get("spec") or {}).get("suspend"))
        new = desired_allocation(dict(body)) is None and phase not in ("Succeeded", "Failed")
        if not suspended and (new or phase == Phase.SUSPENDED.value):
            # a new or resumed job should not wait a whole round interval; the round comes
            # first, so that its next group starts on a fresh answer
            await cluster_round(rt, force=True)
        await reconcile_job(rt, namespace, name)
    except BaseException:
        # kopf does not retry an event handler: the next change of the job, of whatever
        # kind, tries again (as every change did before the filter)
        rt.causes.pop(key, None)
        raise


@kopf.on.event("", "v1", "pods", labels={P.LABEL_JOB: kopf.PRESENT})
async def on_pod_event(body: kopf.Body, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    job = (body.get("metadata", {}).get("labels") or {}).get(P.LABEL_JOB)
    if job:
        await reconcile_job(memo.runtime, namespace, job)


@kopf.on.event("", "v1", "nodes")
async def on_node_event(type: str, body: kopf.Body, name: str, memo: kopf.Memo, **_: Any) -> None:
    """A node that starts going away (``adl.operator.disruption``: a disruption taint, a
    cordon, its deletion) is acted on at once, not at the next round: a round (the node leaves
    the pool, so each job on it gets an answer without it) and a reconcile of each job with a
    pod there (the lifecycle stops its group gracefully: it checkpoints within the notice, and
    the next group starts on the answer without the node). A node whose mark goes (an
    uncordon) is offered again at the next round, asked for now. Only a change of a node's
    mark does anything: the status updates of every node come here too."""
    rt: Runtime = memo.runtime
    why = None if type == "DELETED" else leaving_reason(body)
    if rt.leaving.get(name) == why:
        return
    if why is None:
        rt.leaving.pop(name, None)
        if type != "DELETED":
            rt.rounds.ask()
        return
    rt.leaving[name] = why
    log.warning("node %s is being disrupted (%s): moving its jobs off it", name, describe(why))
    rt.rounds.ask()
    try:
        found = await asyncio.to_thread(rt.store.jobs_on_node, name, P.LABEL_JOB)
        watched = set(rt.config.namespaces)
        for namespace, job in sorted(found):
            if not watched or namespace in watched:
                await reconcile_job(rt, namespace, job)
    except BaseException:
        # kopf does not retry an event handler: the node's next event (its status is
        # updated while it drains) acts on the mark again; meanwhile the round moves the jobs
        rt.leaving.pop(name, None)
        raise


def api_unavailable(exc: BaseException) -> bool:
    """The API server did not answer, or answered that it cannot serve now (an outage, a
    restart, RBAC still warming up): the work is simply done again a little later."""
    if isinstance(exc, urllib3.exceptions.HTTPError):
        return True
    return isinstance(exc, ApiException) and (
        exc.status in (0, 403, 429) or (exc.status or 0) >= 500
    )


#: a failed round or tick (the API server away) is retried after this long, not kopf's
#: default minute
TICK_BACKOFF_S = 5.0


def round_wait_s(rt: Runtime, now: float) -> float:
    """Seconds until the loop's next round (monotonic ``now``): none when one is due, the
    rest of the round interval otherwise, and ``math.inf`` while the operator knows of no job
    (such a round would only list the cluster; asked-for rounds still run)."""
    if rt.rounds.due:
        return 0.0
    if not rt.jobs:
        return math.inf
    return max(rt.config.round_interval_s - (now - rt.rounds.last), 0.0)


async def round_loop(rt: Runtime) -> None:
    """The cluster-wide scheduling round, for the whole operator: every round interval while
    there are jobs, and at once when one is asked for (``RoundStats.ask``). Forced rounds
    (a new, resumed, finished, suspended, changed or deleted job) run from their handlers
    through the same ``cluster_round``; one that found a round running leaves its round to this
    loop. While the API server is away each try fails quickly with one line in the log and
    the next comes ``TICK_BACKOFF_S`` later; the first after it returns runs the round."""
    while not rt.exiting:
        rt.rounds.wake.clear()  # before the check: an ask() from now on wakes the wait
        wait = round_wait_s(rt, time.monotonic())
        if wait > 0:
            with contextlib.suppress(TimeoutError):
                timeout = None if wait == math.inf else wait
                await asyncio.wait_for(rt.rounds.wake.wait(), timeout)
            continue
        if rt.round_lock.locked():  # a forced round runs: it may be the one that was due
            async with rt.round_lock:
                pass
            continue
        try:
            event_posting.install(rt.event_poster)  # its decisions' events, as a handler's
            await cluster_round(rt)
        except Exception as exc:
            if api_unavailable(exc):
                log.warning(
                    "round: the API server is unavailable (%s); next try in %.0f s",
                    type(exc).__name__,
                    TICK_BACKOFF_S,
                )
            else:
                log.exception("the round failed; next try in %.0f s", TICK_BACKOFF_S)
            rt.rounds.due = True  # as soon as the pause is over
            await asyncio.sleep(TICK_BACKOFF_S)


@kopf.timer(GROUP, VERSION, PLURAL, interval=1.0, idle=None, backoff=TICK_BACKOFF_S)
async def tick(
    body: kopf.Body, namespace: str | None, name: str, memo: kopf.Memo, **_: Any
) -> None:
    """Cheap unless something is due for this job: the end of a restart backoff, or a look
    at a job still starting (whose pods may be stuck without sending events) or with a pod on
    a node that is down. While the API server is away each tick fails quickly with one line
    in the log; the first tick after it returns catches up (the starting and restarting jobs
    rechecked, and a round: ``round_loop``)."""
    rt: Runtime = memo.runtime
    if rt.exiting:
        raise asyncio.CancelledError  # end the timer task now (kopf leaves it running ~5 s)
    try:
        await _tick(rt, body, namespace, name)
    except Exception as exc:
        if not api_unavailable(exc):
            raise
        log.warning(
            "%s/%s: the API server is unavailable (%s); next look in %.0f s",
            namespace,
            name,
            type(exc).__name__,
            TICK_BACKOFF_S,
        )
        rt.rounds.ask()  # a round as soon as it is back
        await asyncio.sleep(TICK_BACKOFF_S)


async def _tick(rt: Runtime, body: kopf.Body, namespace: str | None, name: str) -> None:
    key = f"{namespace}/{name}"
    last = rt.reconciled.get(key)
    idle = None if last is None else time.monotonic() - last
    recheck = rt.config.starting_recheck_s
    # a job with a pod on a node that is down is looked at again until the node is back or
    # lost: its loss must be acted on once the bound passes, events or not
    down = key in rt.backend.on_down_nodes and (idle is None or idle >= recheck)
    if down or time_based_work_due(dict(body), idle, _now(), recheck):
        await reconcile_job(rt, namespace, name)


@kopf.on.delete(GROUP, VERSION, PLURAL)
async def on_delete(
    body: kopf.Body, namespace: str | None, name: str, memo: kopf.Memo, **_: Any
) -> None:
    """Stop the workers gracefully, then hand the job's GPUs out at once (a round now, which
    leaves the deleted job out); Service, Secret and claim go with the owner references."""
    rt: Runtime = memo.runtime
    assert namespace is not None
    key = f"{namespace}/{name}"
    status = _status_of(dict(body))
    async with rt.lock(key):
        try:
            spec = AdaptiveJobSpec.model_validate(dict(body.get("spec") or {}))
        except ValidationError:
            spec = None
        if spec is not None:
            context = KubeStepContext.read(dict(body), spec)
            job = JobRecord(key, spec, status, _now(), desired_allocation(body), context=context)
            await asyncio.to_thread(rt.driver.tear_down, job)
        else:  # an invalid job never ran workers, but clean up whatever is there
            raw = await asyncio.to_thread(rt.store.list_pods, namespace, P.job_selector(name))
            for pod in classify_all(raw):
                await asyncio.to_thread(rt.store.delete_pod, namespace, pod.name, 0)
    rt.locks.pop(key, None)
    rt.reconciled.pop(key, None)
    rt.backend.refused.pop(key, None)
    rt.backend.blocked.pop(key, None)
    rt.causes.pop(key, None)
    rt.jobs.discard(key)
    rt.backend.on_down_nodes.discard(key)
    annotations = body.get("metadata", {}).get("annotations") or {}
    if status.allocation or P.ANNOTATION_ALLOCATION in annotations:
        await round_soon(rt, f"deleting {namespace}/{name}")


@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
async def on_spec_change(namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
    """New bounds, weight or priority may change the best allocation (a waiting job may fit
    now, a running one may grow): a round now rather than at the next interval."""
    await round_soon(memo.runtime, f"the spec change of {namespace}/{name}")


#: how often a running job's heartbeats are looked at for a hang (in memory: no API call)
HANG_CHECK_S = 2.0


def hang_suspected(progress: ProgressBook, body: dict[str, Any], now: datetime) -> bool:
    """Whether the heartbeats of a Running job say its group hangs: a hung group sends no
    pod event, so the timer reconciles it and the lifecycle acts (``liveness.judge``)."""
    status = body.get("status") or {}
    if status.get("phase") != Phase.RUNNING.value:
        return False
    meta = body.get("metadata") or {}
    key = f"{meta.get('namespace') or ''}/{meta.get('name') or ''}"
    group, allocation = status.get("group"), status.get("allocation") or []
    if not isinstance(group, int) or not isinstance(allocation, list):
        return False
    return judge(progress.snapshot(key), group, len(allocation), now) is not None


@kopf.timer(GROUP, VERSION, PLURAL, interval=HANG_CHECK_S, idle=None)
async def hang_check(
    body: kopf.Body, namespace: str | None, name: str, memo: kopf.Memo, **_: Any
) -> None:
    """Reconcile a running job whose ranks' heartbeats say it hangs."""
    rt: Runtime = memo.runtime
    if rt.exiting:
        raise asyncio.CancelledError
    seen = {**dict(body), "metadata": {**dict(body.get("metadata") or {}), "namespace": namespace}}
    if hang_suspected(rt.config.progress, seen, _now()):
        await reconcile_job(rt, namespace, name)


async def round_soon(rt: Runtime, after: str) -> None:
    """A forced round from a kopf handler. A failure must not fail the handler (kopf would
    retry it, and a deletion would keep its finalizer until it succeeds): the round is left to
    the round loop instead."""
    try:
        await cluster_round(rt, force=True)
    except Exception:
        log.exception("the round after %s failed; the round loop runs it again", after)
        rt.rounds.ask()
