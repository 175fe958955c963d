"""kopf handlers: every AdaptiveJob or worker-pod event reconciles the job (the pure step in
``adl.operator.reconcile``), and a per-job timer keeps time-based work moving (backoff expiry)
and runs the cluster-wide scheduling round when it is due, with the optimization in a worker
thread. Run with ``python -m adl.operator`` (which also serves the API) or
``kopf run -m adl.operator.handlers``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

import kopf
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from adl.controller.actions import Action, CreateGroup, DeleteGroup, EmitEvent, SetStatus
from adl.controller.lifecycle import Timing, starting_message, step, teardown
from adl.controller.rounds import run_round as plan_round
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, Condition, Phase
from adl.operator import pods as P
from adl.operator.crd import GROUP, PLURAL, VERSION
from adl.operator.observe import (
    PodPhase,
    PodState,
    classify_all,
    finished_leftovers,
    observed_workers,
    pod_indices,
)
from adl.operator.scheduling import desired_allocation, job_records, nodes_from_objects
from adl.operator.store import KUBE_URL_ENV, Conflict, KubeStore
from adl.operator.timestamps import parse_time
from adl.sched.types import Policy

ANNOTATION_TOKEN_HASH = P.ANNOTATION_TOKEN_HASH
log = logging.getLogger("adl.operator")


def _default_policy() -> Policy:
    from adl.sched.policy import AdlPolicy  # type: ignore[import-not-found,unused-ignore]

    policy: Policy = AdlPolicy()
    return policy


@dataclass
class OperatorConfig:
    """Settings of one operator process (set by ``python -m adl.operator`` or by tests)."""

    api_url: str = "http://adl.adl-system.svc:8080"
    round_interval_s: float = 30.0
    gpu_resource: str = P.GPU_RESOURCE
    node_selector: dict[str, str] = field(default_factory=dict)
    namespaces: list[str] = field(default_factory=list)  # empty: all namespaces
    policy_factory: Callable[[], Policy] = _default_policy
    metrics: Any = None  # adl.api.metrics.AdlMetrics of the API served beside the operator
    timing: Timing = field(default_factory=Timing)
    #: how often a Starting job is re-read without any event: a pod stuck Pending (e.g.
    #: Unschedulable) sends no further events, yet must fail once the pending timeout passes
    starting_recheck_s: float = 10.0


CONFIG = OperatorConfig()


def configure(**changes: Any) -> OperatorConfig:
    for key, value in changes.items():
        if not hasattr(CONFIG, key):
            raise TypeError(f"unknown operator setting {key!r}")
        setattr(CONFIG, key, value)
    return CONFIG


@dataclass
class RoundStats:
    durations_s: list[float] = field(default_factory=list)
    last: float = 0.0
    #: a forced round found one running (which may have read the jobs before the change that
    #: asked for it): the next tick runs one regardless of the interval
    due: bool = False


#: answers to a pod create that no retry will change: invalid (400, 422) or forbidden (403:
#: a ResourceQuota, an admission webhook, RBAC)
REFUSED_STATUSES = (400, 403, 422)


class _Refused(Exception):
    """A pod of the group was refused; the reconcile starts over to act on it."""


class Runtime:
    """Per-run state kept in kopf's memo: the API client, one lock per job, the round."""

    def __init__(self, store: KubeStore, policy: Policy) -> None:
        self.store = store
        self.policy = policy
        self.locks: dict[str, asyncio.Lock] = {}
        self.round_lock = asyncio.Lock()
        self.rounds = RoundStats()
        self.exiting = False
        self.reconciled: dict[str, float] = {}  # job key -> monotonic time of the last reconcile
        #: job key -> the pod of its current group that the cluster refused to create, seen by
        #: the controller as a failed start (kept in memory: after an operator restart the
        #: create is simply tried, and refused, once more)
        self.refused: dict[str, PodState] = {}
        #: job key -> what of a deleted job of the same name it waits for (said once)
        self.waiting: dict[str, str] = {}

    def lock(self, key: str) -> asyncio.Lock:
        return self.locks.setdefault(key, asyncio.Lock())


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _now() -> datetime:
    return datetime.now(UTC)


def _status_of(body: dict[str, Any]) -> AdaptiveJobStatus:
    """The status as adl wrote it (foreign keys, e.g. a framework's, are ignored)."""
    raw = dict(body.get("status") or {})
    known = {f.alias or name for name, f in AdaptiveJobStatus.model_fields.items()}
    return AdaptiveJobStatus.model_validate({k: v for k, v in raw.items() if k in known})


def status_patch(status: AdaptiveJobStatus) -> dict[str, Any]:
    """The merge patch that sets ``status``. Explicit nulls clear fields that became unset;
    ``hints`` is left out because the API service owns it."""
    body: dict[str, Any] = status.model_dump(mode="json", by_alias=True, exclude={"hints"})
    return body


def _event(body: dict[str, Any], type_: str, reason: str, message: str) -> None:
    kopf.event(cast(Any, body), type=type_, reason=reason, message=message[:1000])


# ------------------------------------------------------------------------ executing actions


#: the status reason of a job that waits for a deleted namesake's pods and objects to go
WAITING_FOR_PREVIOUS_JOB = "WaitingForPreviousJob"


class _Leftovers(Exception):
    """A child object of the job's name belongs to a deleted job of the same name."""


def _owned_elsewhere(job: P.JobRef, obj: dict[str, Any]) -> bool:
    """Owned by another AdaptiveJob (a deleted one of the same name), not by ``job``."""
    owners = (obj.get("metadata") or {}).get("ownerReferences") or []
    uids = {o.get("uid") for o in owners if o.get("kind") == P.KIND}
    return bool(uids) and job.uid not in uids


def _require_own(job: P.JobRef, obj: dict[str, Any] | None, kind: str) -> None:
    """Refuse to use a child of a deleted namespace-mate of the same name: the garbage
    collector is about to delete it (it would vanish from under the new job), and its token
    is not the new job's to inherit."""
    if obj is not None and _owned_elsewhere(job, obj):
        name = (obj.get("metadata") or {}).get("name", "")
        raise _Leftovers(
            f"{kind} {name} still belongs to a deleted job of the same name; "
            "the pods start once Kubernetes has removed it"
        )


def _split_pods(
    job: P.JobRef, pods: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[str]]:
    """The job's pods, and the names of those of a deleted job of the same name (same labels,
    another owner; still saving their checkpoint): no group may start beside them."""
    own = [p for p in pods if not _owned_elsewhere(job, p)]
    foreign = [str(p["metadata"].get("name", "")) for p in pods if _owned_elsewhere(job, p)]
    return own, foreign


async def _ensure_resources(rt: Runtime, job: P.JobRef, spec: AdaptiveJobSpec, body: Any) -> None:
    store = rt.store
    if not await asyncio.to_thread(store.create, P.build_service(job)):
        service = await asyncio.to_thread(
            store.get_service, job.namespace, P.service_name(job.name)
        )
        _require_own(job, service, "Service")
    # The Secret holds the token; the job carries only its hash, which the API checks.
    secret = await asyncio.to_thread(store.get_secret, job.namespace, P.token_secret_name(job.name))
    _require_own(job, secret, "Secret")
    token = P.token_from_secret(secret) if secret is not None else None
    if token is None:
        token = secrets.token_urlsafe(32)
        await asyncio.to_thread(store.create, P.build_token_secret(job, token))
    digest = token_digest(token)
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    if annotations.get(ANNOTATION_TOKEN_HASH) != digest:
        await asyncio.to_thread(
            store.patch_job_annotations, job.namespace, job.name, {ANNOTATION_TOKEN_HASH: digest}
        )
    pvc = P.build_pvc(job, spec)
    claim = P.checkpoint_claim(job, spec)
    existing = await asyncio.to_thread(store.get_pvc, job.namespace, claim)
    if pvc is not None:
        _require_own(job, existing, "PersistentVolumeClaim")
    if pvc is not None and existing is None:
        await asyncio.to_thread(store.create, pvc)
    elif pvc is None and existing is None:
        _event(
            body, "Warning", "CheckpointClaimNotFound", f"PersistentVolumeClaim {claim} not found"
        )


async def _execute(
    rt: Runtime,
    body: dict[str, Any],
    spec: AdaptiveJobSpec,
    pods: list[PodState],
    actions: list[Action],
    foreign: Sequence[str] = (),
) -> None:
    """Carry out the controller's actions with Kubernetes objects, in order. ``foreign``: pods
    of a deleted job of the same name, which no new group may start beside."""
    job = P.JobRef.from_body(body)
    for action in actions:
        if isinstance(action, SetStatus):
            await asyncio.to_thread(
                rt.store.patch_job_status,
                job.namespace,
                job.name,
                status_patch(action.status),
                body["metadata"].get("resourceVersion"),
            )
        elif isinstance(action, CreateGroup):
            if foreign:
                raise _Leftovers(
                    f"pod {foreign[0]} of a deleted job of the same name is still stopping"
                )
            await _ensure_resources(rt, job, spec, body)
            alloc = list(action.allocation)
            slots = P.node_slots(alloc)
            for index in pod_indices(alloc, action.ranks):
                node, count = slots[index]
                env = P.worker_env(job, action.group, alloc, index, CONFIG.api_url)
                try:
                    manifest = P.build_pod(
                        job,
                        spec,
                        group=action.group,
                        index=index,
                        node=node,
                        replicas=count,
                        env=env,
                        resource=CONFIG.gpu_resource,
                    )
                    await asyncio.to_thread(rt.store.create, manifest)
                except (ValueError, ApiException) as exc:
                    refused = _refused_pod(job, action.group, index, exc)
                    if refused is None:
                        raise
                    rt.refused[f"{job.namespace}/{job.name}"] = refused
                    raise _Refused from exc
        elif isinstance(action, DeleteGroup):
            for pod in pods:
                if pod.group == action.group and not pod.deleting:
                    await asyncio.to_thread(
                        rt.store.delete_pod, job.namespace, pod.name, action.grace_s
                    )
        elif isinstance(action, EmitEvent):
            _event(body, action.type, action.reason, action.message)


def _refused_pod(job: P.JobRef, group: int, index: int, exc: Exception) -> PodState | None:
    """The failed start a refused pod create stands for; None for errors worth retrying."""
    if isinstance(exc, ApiException):
        if exc.status not in REFUSED_STATUSES:
            return None
        detail = exc.reason or ""
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            detail = json.loads(str(exc.body)).get("message") or detail
        reason, message = "PodRejected", f"the cluster refused pod {index}: {detail}"
    else:
        reason, message = "InvalidPod", f"pod {index} cannot be built: {exc}"
    name = P.pod_name(job.name, group, index)
    return PodState(name, group, index, PodPhase.FAILED, reason=reason, message=message)


def _with_refused(rt: Runtime, key: str, group: int, pods: list[PodState]) -> list[PodState]:
    """``pods`` plus the current group's refused pod, if any (older groups' are forgotten)."""
    refused = rt.refused.get(key)
    if refused is None:
        return pods
    if refused.group != group:
        del rt.refused[key]
        return pods
    if any(p.group == group and p.index == refused.index for p in pods):
        return pods
    return [*pods, refused]


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
    _event(body, "Warning", "InvalidSpec", message)


async def reconcile_job(rt: Runtime, namespace: str | None, name: str) -> None:
    """Reconcile the job; when that finished or suspended it, hand its GPUs out at once (a
    round now) rather than leave them idle until the next round interval."""
    if await _reconcile_job(rt, namespace, name):
        await run_round(rt, force=True)


async def _reconcile_job(rt: Runtime, namespace: str | None, name: str) -> bool:
    """Read the job and its pods, compute the step, execute it; retried on conflicts.
    Returns whether this step gave GPUs back (a job holding some finished or was suspended)."""
    namespace = namespace or ""
    async with rt.lock(f"{namespace}/{name}"):
        rt.reconciled[f"{namespace}/{name}"] = time.monotonic()
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
            raw_pods = await asyncio.to_thread(rt.store.list_pods, namespace, P.job_selector(name))
            raw_pods, foreign = _split_pods(P.JobRef.from_body(body), raw_pods)
            status = _status_of(body)
            key = f"{namespace}/{name}"
            pods = _with_refused(rt, key, status.group, classify_all(raw_pods))
            observed = observed_workers(pods, status.group, status.allocation)
            desired = desired_allocation(body)
            actions = step(key, spec, status, observed, desired, _now(), CONFIG.timing)
            try:
                await _execute(rt, body, spec, pods, actions, foreign)
            except (Conflict, _Refused):
                continue
            except _Leftovers as exc:  # the next look at a starting job tries again
                if rt.waiting.get(key) != str(exc):  # say so once per thing waited for
                    rt.waiting[key] = str(exc)
                    log.info("%s: %s", key, exc)
                    _event(body, "Warning", "PreviousJobResources", str(exc))
                    # and in the status, where `adl describe` and `kubectl get aj` look
                    waiting = {"reason": WAITING_FOR_PREVIOUS_JOB, "message": str(exc)}
                    await asyncio.to_thread(
                        rt.store.patch_job_status, namespace, name, waiting, None
                    )
                return False
            rt.waiting.pop(key, None)
            written = [a.status for a in actions if isinstance(a, SetStatus)]
            now_says = (written[-1] if written else status).reason
            created = any(isinstance(a, CreateGroup) for a in actions)
            if created and now_says == WAITING_FOR_PREVIOUS_JOB:
                # the wait is over (also when it ended while no operator was running): the
                # group's pods exist now, and the status says so again
                said = {
                    "reason": "Starting",
                    "message": starting_message(status.group, status.allocation),
                }
                await asyncio.to_thread(rt.store.patch_job_status, namespace, name, said, None)
            for pod in finished_leftovers(pods, status.group):
                await asyncio.to_thread(rt.store.delete_pod, namespace, pod.name, 0)
            suspended = any(
                isinstance(a, SetStatus) and a.status.phase == Phase.SUSPENDED for a in actions
            )
            if suspended and desired:
                # The answer it ran on is history: a resume must start on a fresh one (a round
                # that read the job before the resume may still be writing), not on these GPUs.
                await asyncio.to_thread(
                    rt.store.patch_job_annotations,
                    namespace,
                    name,
                    {P.ANNOTATION_ALLOCATION: json.dumps([])},
                )
            return bool(status.allocation) and any(
                isinstance(a, SetStatus) and a.status.phase.sits_out_rounds for a in actions
            )
        log.warning("gave up reconciling %s/%s after repeated conflicts", namespace, name)
        return False


# ------------------------------------------------------------------------ the scheduling round


async def run_round(rt: Runtime, *, force: bool = False) -> bool:
    """One scheduling round over every job, unless one ran recently (or is running)."""
    if rt.round_lock.locked():
        rt.rounds.due = rt.rounds.due or force
        return False
    async with rt.round_lock:
        waited = time.monotonic() - rt.rounds.last
        if not (force or rt.rounds.due) and waited < CONFIG.round_interval_s:
            return False
        rt.rounds.last = time.monotonic()
        rt.rounds.due = False
        store = rt.store
        if CONFIG.namespaces:
            jobs = []
            for ns in CONFIG.namespaces:
                jobs += await asyncio.to_thread(store.list_jobs, ns)
        else:
            jobs = await asyncio.to_thread(store.list_jobs, None)
        node_objs = await asyncio.to_thread(store.list_nodes)
        all_pods = await asyncio.to_thread(store.list_all_pods)
        nodes = nodes_from_objects(
            node_objs, all_pods, resource=CONFIG.gpu_resource, selector=CONFIG.node_selector
        )
        records = job_records(jobs)
        result = await asyncio.to_thread(plan_round, rt.policy, records, nodes, _now())
        rt.rounds.durations_s.append(result.duration_s)
        if CONFIG.metrics is not None:
            CONFIG.metrics.observe_round(result.duration_s)
        for key, alloc in result.changed.items():
            ns, name = key.split("/", 1)
            try:
                await asyncio.to_thread(
                    store.patch_job_annotations,
                    ns,
                    name,
                    {P.ANNOTATION_ALLOCATION: json.dumps(alloc)},
                )
            except ApiException as exc:
                if exc.status != 404:
                    raise
                # deleted since the round read it: the other jobs still get their answers
                log.info("round: %s is gone, its answer dropped", key)
        return True


def time_based_work_due(
    body: dict[str, Any], idle_s: float | None, now: datetime, recheck_s: float
) -> bool:
    """Whether the job needs a reconcile although nothing changed: its restart backoff ended,
    or it is Starting and nobody looked at it for ``recheck_s`` (``idle_s``: seconds since the
    last reconcile, None for never), so a pod stuck Pending reaches its pending timeout."""
    status = body.get("status") or {}
    until = parse_time(status.get("restartAfter"))
    if until is not None and now >= until:
        return True
    if status.get("phase") != Phase.STARTING.value:
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
    # Handlers are short and idempotent: nothing is lost by exiting quickly on shutdown.
    settings.background.instant_exit_timeout = 0.1
    settings.queueing.exit_timeout = 0.5
    memo.runtime = Runtime(KubeStore(), CONFIG.policy_factory())


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    runtime = getattr(memo, "runtime", None)
    if runtime is not None:
        runtime.exiting = True


@kopf.on.event(GROUP, VERSION, PLURAL)
async def on_job_event(
    type: str, body: kopf.Body, namespace: str | None, name: str, memo: kopf.Memo, **_: Any
) -> None:
    if type == "DELETED" or body.get("metadata", {}).get("deletionTimestamp"):
        return
    rt: Runtime = memo.runtime
    phase = (body.get("status") or {}).get("phase")
    suspended = bool((body.get("spec") or {}).get("suspend"))
    new = desired_allocation(dict(body)) is None and phase not in ("Succeeded", "Failed")
    if not suspended and (new or phase == Phase.SUSPENDED.value):
        # a new or resumed job should not wait a whole round interval; the round comes first,
        # so that its next group starts on a fresh answer
        await run_round(rt, force=True)
    await reconcile_job(rt, namespace, name)


@kopf.on.event("", "v1", "pods", labels={P.LABEL_JOB: kopf.PRESENT})
async def on_pod_event(body: kopf.Body, namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    job = (body.get("metadata", {}).get("labels") or {}).get(P.LABEL_JOB)
    if job:
        await reconcile_job(memo.runtime, namespace, job)


@kopf.timer(GROUP, VERSION, PLURAL, interval=1.0, idle=None)
async def tick(
    body: kopf.Body, namespace: str | None, name: str, memo: kopf.Memo, **_: Any
) -> None:
    """Cheap unless something is due: the round, the end of a restart backoff, or a look at
    a job still starting (whose pods may be stuck without sending events)."""
    rt: Runtime = memo.runtime
    if rt.exiting:
        raise asyncio.CancelledError  # end the timer task now (kopf leaves it running ~5 s)
    await run_round(rt)
    last = rt.reconciled.get(f"{namespace}/{name}")
    idle = None if last is None else time.monotonic() - last
    if time_based_work_due(dict(body), idle, _now(), CONFIG.starting_recheck_s):
        await reconcile_job(rt, namespace, name)


@kopf.on.delete(GROUP, VERSION, PLURAL)
async def on_delete(
    body: kopf.Body, namespace: str | None, name: str, memo: kopf.Memo, **_: Any
) -> None:
    """Stop the workers gracefully, then hand the job's GPUs out at once (a round now, which
    leaves the deleted job out); Service, Secret and claim go with the owner references."""
    rt: Runtime = memo.runtime
    assert namespace is not None
    status = _status_of(dict(body))
    async with rt.lock(f"{namespace}/{name}"):
        raw = await asyncio.to_thread(rt.store.list_pods, namespace, P.job_selector(name))
        pods = classify_all(raw)
        try:
            spec = AdaptiveJobSpec.model_validate(dict(body.get("spec") or {}))
        except ValidationError:
            spec = None
        if spec is not None:
            observed = observed_workers(pods, status.group, status.allocation)
            actions = teardown(f"{namespace}/{name}", spec, observed)
            await _execute(rt, dict(body), spec, pods, list(actions))
        else:  # an invalid job never ran workers, but clean up whatever is there
            for pod in pods:
                await asyncio.to_thread(rt.store.delete_pod, namespace, pod.name, 0)
    rt.locks.pop(f"{namespace}/{name}", None)
    rt.reconciled.pop(f"{namespace}/{name}", None)
    rt.refused.pop(f"{namespace}/{name}", None)
    rt.waiting.pop(f"{namespace}/{name}", None)
    annotations = body.get("metadata", {}).get("annotations") or {}
    if status.allocation or P.ANNOTATION_ALLOCATION in annotations:
        await round_soon(rt, f"deleting {namespace}/{name}")


@kopf.on.update(GROUP, VERSION, PLURAL, field="spec")
async def on_spec_change(namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
    """New bounds, weight or priority may change the best allocation (a waiting job may fit
    now, a running one may grow): a round now rather than at the next interval."""
    await round_soon(memo.runtime, f"the spec change of {namespace}/{name}")


async def round_soon(rt: Runtime, after: str) -> None:
    """A forced round from a kopf handler. A failure must not fail the handler (kopf would
    retry it, and a deletion would keep its finalizer until it succeeds): the round is left to
    the next tick instead."""
    try:
        await run_round(rt, force=True)
    except Exception:
        log.exception("the round after %s failed; it runs again at the next tick", after)
        rt.rounds.due = True
