"""The Kubernetes implementation of ``adl.controller.backend.WorkerBackend``: workers are pods,
the state store is the AdaptiveJob objects (status subresource, the scheduler's answer in an
annotation), events are Kubernetes Events.

The methods are synchronous (the kubernetes client is): the handlers run the shared driver in a
worker thread. A job's step happens under that job's lock, and its ``JobRecord`` carries what
the reconcile read (``KubeStepContext``: the object, its pods), which the actions need: the
resourceVersion a status write must match, the pods a group delete removes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import secrets
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, cast

import kopf
from kubernetes.client.exceptions import ApiException

from adl.api.auth import token_digest
from adl.contract import LABEL_GPU_PRODUCT, JobKey
from adl.controller.actions import (
    Action,
    CreateGroup,
    DeleteGroup,
    EmitEvent,
    RemoveExited,
    SetStatus,
)
from adl.controller.job_record import JobRecord
from adl.controller.lifecycle import GroupBlocked, ObservedWorkers, Timing
from adl.controller.liveness import ProgressBook
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus, Condition
from adl.operator import pods as P
from adl.operator.capacity_pods import PlaceholderSettings
from adl.operator.capacity_sync import CapacityAsker
from adl.operator.disruption import leaving_reason
from adl.operator.kueue import Admission, FlavorError, flavor_pool, queue_of
from adl.operator.kueue_sync import admissions, flavors_by_name, settle_workload
from adl.operator.node_emptying import nodes_kept_by_others, say_emptied
from adl.operator.observe import (
    PodPhase,
    PodState,
    classify_all,
    node_down_since,
    observed_workers,
    pod_indices,
)
from adl.operator.scheduling import confinements, job_key, job_records, nodes_from_objects
from adl.operator.store import KubeStore
from adl.operator.taints import pod_tolerations
from adl.operator.tenancy import Ceilings, enforce
from adl.sched import registry
from adl.sched.capacity import CapacityAsk, CapacityRule
from adl.sched.emptying import NodeToEmpty
from adl.sched.types import NodeInfo, Policy

log = logging.getLogger("adl.operator")

#: pods that hold their node: a node going down under them matters
_LIVE = (PodPhase.PENDING, PodPhase.RUNNING)
#: answers to a pod create that no retry will change: invalid (400, 422) or forbidden (403:
#: a ResourceQuota, an admission webhook, RBAC)
REFUSED_STATUSES = (400, 403, 422)


@dataclass(frozen=True)
class OperatorConfig:
    """Settings of one operator process, fixed for its run (``python -m adl.operator`` passes
    them to kopf in the memo; the runtime holds them)."""

    api_url: str = "http://adl.adl-system.svc:8080"
    round_interval_s: float = 30.0
    gpu_resource: str = P.GPU_RESOURCE
    #: the node label that names a node's GPU type (``--gpu-type-label``)
    gpu_type_label: str = LABEL_GPU_PRODUCT
    node_selector: Mapping[str, str] = field(default_factory=dict)
    namespaces: Sequence[str] = ()  # empty: all namespaces
    policy_factory: Callable[[], Policy] = field(default_factory=registry.policy_factory)
    metrics: Any = None  # adl.api.metrics.AdlMetrics of the API served beside the operator
    timing: Timing = field(default_factory=Timing)
    #: how often a Starting job is re-read without any event: a pod stuck Pending (e.g.
    #: Unschedulable) sends no further events, yet must fail once the pending timeout passes
    starting_recheck_s: float = 10.0
    #: per-namespace ceilings on spec.priority and preemptible=false (none by default)
    ceilings: Ceilings = field(default_factory=Ceilings)
    #: the ranks' heartbeats: the API served beside the operator writes them, the jobs' steps
    #: read them (hung-rank detection, ``adl.controller.liveness``)
    progress: ProgressBook = field(default_factory=ProgressBook)
    #: jobs in a Kueue queue run as far as Kueue admits them (off: the label is not read)
    kueue: bool = False
    #: each job gets a PodDisruptionBudget refusing evictions of its workers
    disruption_budgets: bool = False
    #: ask an autoscaler for the GPUs the jobs would put to good use (None: off)
    capacity: CapacityRule | None = None
    #: how placeholder pods name the capacity type (spot / on-demand) and what they run
    placeholders: PlaceholderSettings | None = None


class StepAgain(Exception):
    """What the step decided on changed while its actions ran (a pod refused, a wait for an
    outside cause begun or over): the reconcile starts over, and the next step acts on it."""


class Refused(StepAgain):
    """A pod of the group was refused; the reconcile starts over to act on it."""


class WaitOver(StepAgain):
    """The group launched after a wait: the reconcile starts over so that the status says
    Starting again, not the wait."""


class Waiting(StepAgain):
    """The job cannot start its group yet, for a cause outside it. The job waits (status
    reason ``reason``, one Event ``event``: ``lifecycle.GroupBlocked``); the next reconcile
    tries again. Raised out of a step only when the wait is new: the reconcile starts over so
    that the lifecycle says it."""

    reason = "Waiting"
    event = "Waiting"


class Leftovers(Waiting):
    """A child object of the job's name belongs to a deleted job of the same name."""

    reason = "WaitingForPreviousJob"
    event = "PreviousJobResources"


#: status reasons of a job whose object the cluster refused, by the object's kind
REJECTED_REASONS = {
    "Service": "ServiceRejected",
    "Secret": "SecretRejected",
    "PersistentVolumeClaim": "ClaimRejected",
}


class ChildRefused(Waiting):
    """The cluster refused to create the job's Service, token Secret or checkpoint claim (a
    ResourceQuota, a LimitRange, an admission webhook). Unlike a refused pod this is no failed
    start: the job waits, and starts once the cluster admits the object (the quota is raised)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.reason = self.event = REJECTED_REASONS[kind]


def _create_child(store: KubeStore, obj: dict[str, Any]) -> bool:
    """Create one of the job's own objects (False: it exists); a refusal makes the job wait."""
    try:
        return bool(store.create(obj))
    except ApiException as exc:
        if exc.status not in REFUSED_STATUSES:
            raise
        name = obj["metadata"]["name"]
        raise ChildRefused(
            obj["kind"], f"the cluster refused {obj['kind']} {name}: {_api_message(exc)}"
        ) from exc


class NotOwned(Leftovers):
    """The job's token Secret exists but was not made for this job (no ownerReference to it):
    planted by someone who can create Secrets in the namespace. Adopting it would give the
    job a token the planter knows or chose, so the job waits until an admin removes it."""

    reason = event = "TokenSecretNotOwned"


#: where the backend's Kubernetes Events go: (the object's body, type, reason, message)
EventSink = Callable[[Mapping[str, Any], str, str, str], None]


def post_kopf_event(body: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
    """The operator's event sink: kopf posts the Event about ``body`` (its queue is there in
    kopf's per-object tasks; the round loop's task installs it: ``event_posting``)."""
    kopf.event(cast(Any, body), type=type_, reason=reason, message=message[:1000])


def status_patch(status: AdaptiveJobStatus) -> dict[str, Any]:
    """The merge patch that sets ``status``. Explicit nulls clear fields that became unset;
    ``hints`` is left out because the API service owns it."""
    body: dict[str, Any] = status.model_dump(mode="json", by_alias=True, exclude={"hints"})
    return body


def _owned_elsewhere(job: P.JobRef, obj: Mapping[str, Any]) -> bool:
    """Owned by another AdaptiveJob (a deleted one of the same name), not by ``job``."""
    owners = (obj.get("metadata") or {}).get("ownerReferences") or []
    uids = {o.get("uid") for o in owners if o.get("kind") == P.KIND}
    return bool(uids) and job.uid not in uids


def _owned_by(job: P.JobRef, obj: Mapping[str, Any]) -> bool:
    """Carries an ownerReference to this very AdaptiveJob (its uid, which nobody can know
    before the job exists)."""
    owners = (obj.get("metadata") or {}).get("ownerReferences") or []
    return any(o.get("kind") == P.KIND and o.get("uid") == job.uid for o in owners)


def _require_own(job: P.JobRef, obj: Mapping[str, Any] | None, kind: str) -> None:
    """Refuse to use a child of a deleted namespace-mate of the same name: the garbage
    collector is about to delete it (it would vanish from under the new job), and its token
    is not the new job's to inherit."""
    if obj is not None and _owned_elsewhere(job, obj):
        name = (obj.get("metadata") or {}).get("name", "")
        raise Leftovers(
            f"{kind} {name} still belongs to a deleted job of the same name; "
            "the pods start once Kubernetes has removed it"
        )


def split_pods(job: P.JobRef, pods: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The job's pods, and the names of those of a deleted job of the same name (same labels,
    another owner; still saving their checkpoint): no group may start beside them."""
    own = [p for p in pods if not _owned_elsewhere(job, p)]
    foreign = [str(p["metadata"].get("name", "")) for p in pods if _owned_elsewhere(job, p)]
    return own, foreign


def _api_message(exc: ApiException) -> str:
    """The API server's own words for a refusal (its Status message), else the HTTP reason."""
    detail = exc.reason or ""
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        detail = json.loads(str(exc.body)).get("message") or detail
    return str(detail)


def refused_pod(job: P.JobRef, group: int, index: int, exc: Exception) -> PodState | None:
    """The failed start a refused pod create stands for; None for errors worth retrying."""
    if isinstance(exc, ApiException):
        if exc.status not in REFUSED_STATUSES:
            return None
        reason = "PodRejected"
        message = f"the cluster refused pod {index}: {_api_message(exc)}"
    else:
        reason, message = "InvalidPod", f"pod {index} cannot be built: {exc}"
    name = P.pod_name(job.name, group, index)
    return PodState(name, group, index, PodPhase.FAILED, reason=reason, message=message)


@dataclass
class KubeStepContext:
    """What one reconcile of a job read, carried by its ``JobRecord`` (``context``) through
    the driver's step: the object (its resourceVersion guards the status write), the spec,
    and, once ``observe`` listed them, its pods (a group delete removes those)."""

    body: dict[str, Any]
    spec: AdaptiveJobSpec
    pods: list[PodState] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    #: the node pool its pods go to (Kueue: its admitted flavor's), or why there is none
    pool: P.NodePool | None = None
    pool_error: str | None = None
    #: its Kueue Workload as the reconcile read it (None: in no queue, or not created yet)
    workload: dict[str, Any] | None = None

    @classmethod
    def read(
        cls,
        body: dict[str, Any],
        spec: AdaptiveJobSpec,
        pool: P.NodePool | FlavorError | None = None,
        workload: dict[str, Any] | None = None,
    ) -> KubeStepContext:
        """The context of a reconcile that read ``body`` (``pool``: the admitted flavor's
        nodes, or why its flavors give none: each pod create then fails saying so)."""
        if isinstance(pool, FlavorError):
            return cls(body, spec, pool_error=str(pool), workload=workload)
        return cls(body, spec, pool=pool, workload=workload)


def step_context(job: JobRecord) -> KubeStepContext:
    """The Kubernetes context the record carries; a record built without one is a bug of the
    caller (the handlers build every record they step with one)."""
    ctx = job.context
    if not isinstance(ctx, KubeStepContext):
        raise TypeError(f"{job.key}: stepped without a KubeStepContext (got {type(ctx).__name__})")
    return ctx


class KubeWorkerBackend:
    """Pods and AdaptiveJob objects through one ``KubeStore``."""

    def __init__(
        self, store: KubeStore, config: OperatorConfig, events: EventSink = post_kopf_event
    ) -> None:
        self.store = store
        self.config = config
        #: every Event the backend emits goes here (tests pass a recorder: no kopf needed)
        self.events = events
        # What one reconcile read travels with its JobRecord (``KubeStepContext``); what is
        # kept here must outlive a reconcile: the memory below (refused pods, waits, what was
        # said once, jobs on down nodes) is what the next reconciles act on, and the round's
        # listing is what ``round_nodes`` and the round's events reuse.
        #: job key -> the pod of its current group that the cluster refused to create, seen by
        #: the controller as a failed start (kept in memory: after an operator restart the
        #: create is simply tried, and refused, once more)
        self.refused: dict[str, PodState] = {}
        #: job key -> why its current group could not be launched at the last try (a wait for
        #: an outside cause: ``Waiting``), reported by ``observe`` until a launch succeeds.
        #: Kept in memory like ``refused``: it must outlive the reconcile that found it (the
        #: next one says it, the ones after try again), and after an operator restart the
        #: launch is simply tried once more
        self.blocked: dict[str, GroupBlocked] = {}
        self._listed: dict[str, dict[str, Any]] = {}  # the last round's objects, for its events
        #: job key -> what its namespace's ceiling capped, last said (each change said once)
        self.capped: dict[str, str] = {}
        #: jobs with a pod on a node that is down: rechecked on a timer, so that the node's
        #: loss is acted on once it passes the bound even if nothing else happens
        self.on_down_nodes: set[str] = set()
        #: job key -> why its admitted flavors give it no node, last said (said once)
        self.no_pool: dict[str, str] = {}
        #: the Node objects and the jobs' tolerations of the round ``round_jobs`` read, for
        #: ``round_nodes`` (one LIST of nodes a round)
        self._round_nodes: list[dict[str, Any]] | None = None
        #: the round's pod listing (one LIST a round), where the capacity step finds its pods
        self._round_pods: list[dict[str, Any]] = []
        self.capacity = CapacityAsker(
            store,
            config.placeholders or PlaceholderSettings(config.gpu_resource),
            lambda body, kind, reason, message: self.events(body, kind, reason, message),
        )
        self._round_tolerations: list[list[Any]] | None = None

    # ---- one job's step
    def observe(self, job: JobRecord) -> ObservedWorkers:
        """The job's pods, and what its ranks' heartbeats said of their progress."""
        observed = self._observe_pods(job)
        return replace(observed, progress=self.config.progress.snapshot(job.key))

    def _observe_pods(self, job: JobRecord) -> ObservedWorkers:
        ctx = step_context(job)
        ref = P.JobRef.from_body(ctx.body)
        raw = self.store.list_pods(ref.namespace, P.job_selector(ref.name))
        own, ctx.foreign = split_pods(ref, raw)
        ctx.pods = self._with_refused(job.key, job.status.group, classify_all(own))
        down, leaving = self._node_marks(ctx.pods, job)
        if down:
            self.on_down_nodes.add(job.key)
        else:
            self.on_down_nodes.discard(job.key)
        observed = observed_workers(ctx.pods, job.status.group, job.status.allocation, down)
        return replace(observed, nodes_leaving=leaving, blocked=self._blocked(job))

    def _blocked(self, job: JobRecord) -> GroupBlocked | None:
        """The wait of the job's current group, if its last launch found one (older groups'
        forgotten)."""
        blocked = self.blocked.get(job.key)
        if blocked is not None and blocked.group != job.status.group:
            del self.blocked[job.key]
            return None
        return blocked

    def _node_marks(
        self, pods: Sequence[PodState], job: JobRecord
    ) -> tuple[dict[str, datetime], dict[str, str]]:
        """Since when each node that holds a live (or stopping) pod has not been Ready; and why
        each of those nodes, of the job's allocation and of the scheduler's answer is about to
        go away (``adl.operator.disruption``). One read per node: a running job's answer and
        allocation name its pods' nodes."""
        held = {p.node for p in pods if p.node and (p.phase in _LIVE or p.holds)}
        named = held | set(job.status.allocation) | set(job.desired or [])
        down: dict[str, datetime] = {}
        leaving: dict[str, str] = {}
        for name in sorted(named):
            node = self.store.get_node(name)
            if node is None:
                continue
            since = node_down_since(node) if name in held else None
            if since is not None:
                down[name] = since
            why = leaving_reason(node)
            if why is not None:
                leaving[name] = why
        return down, leaving

    def _with_refused(self, key: str, group: int, pods: list[PodState]) -> list[PodState]:
        """``pods`` plus the current group's refused pod, if any (older groups' forgotten)."""
        refused = self.refused.get(key)
        if refused is None:
            return pods
        if refused.group != group:
            del self.refused[key]
            return pods
        if any(p.group == group and p.index == refused.index for p in pods):
            return pods
        return [*pods, refused]

    def set_status(self, job: JobRecord, status: AdaptiveJobStatus) -> None:
        ctx = step_context(job)
        ref = P.JobRef.from_body(ctx.body)
        rv = ctx.body["metadata"].get("resourceVersion")
        self.store.patch_job_status(ref.namespace, ref.name, status_patch(status), rv)

    def create_group(self, job: JobRecord, action: CreateGroup) -> None:
        ctx = step_context(job)
        ref = P.JobRef.from_body(ctx.body)
        try:
            if ctx.foreign:
                raise Leftovers(
                    f"pod {ctx.foreign[0]} of a deleted job of the same name is still stopping"
                )
            self._ensure_resources(ref, ctx)
        except Waiting as exc:
            blocked = GroupBlocked(action.group, exc.reason, exc.event, str(exc))
            if self.blocked.get(job.key) == blocked:
                return  # the wait the step already says: the next reconcile tries again
            self.blocked[job.key] = blocked
            log.info("%s: %s", job.key, exc)
            raise  # a new wait: the reconcile starts over, and the lifecycle says it
        waited = self.blocked.pop(job.key, None) is not None
        alloc = list(action.allocation)
        slots = P.node_slots(alloc)
        for index in pod_indices(alloc, action.ranks):
            node, count = slots[index]
            env = P.worker_env(
                ref, action.group, alloc, index, self.config.api_url, action.scheduled_since
            )
            try:
                if ctx.pool_error is not None:  # a failed start that says why
                    raise ValueError(ctx.pool_error)
                manifest = P.build_pod(
                    ref,
                    ctx.spec,
                    group=action.group,
                    index=index,
                    node=node,
                    replicas=count,
                    env=env,
                    resource=self.config.gpu_resource,
                    pool=ctx.pool,
                )
                self.store.create(manifest)
            except (ValueError, ApiException) as exc:
                refused = refused_pod(ref, action.group, index, exc)
                if refused is None:
                    raise
                self.refused[job.key] = refused
                raise Refused from exc
        if waited:
            raise WaitOver(f"{job.key}: group {action.group} launched after a wait")

    def _ensure_resources(self, job: P.JobRef, ctx: KubeStepContext) -> None:
        store = self.store
        if not _create_child(store, P.build_service(job)):
            _require_own(job, store.get_service(job.namespace, P.service_name(job.name)), "Service")
        if self.config.disruption_budgets:
            # exists already: it was made by this operator for this job (same owner, same spec)
            _create_child(store, P.build_disruption_budget(job))
        # The Secret holds the token; the job carries only its hash, which the API checks.
        secret = store.get_secret(job.namespace, P.token_secret_name(job.name))
        _require_own(job, secret, "Secret")
        if secret is not None and not _owned_by(job, secret):
            raise NotOwned(
                f"Secret {P.token_secret_name(job.name)} exists but was not created by the "
                f"operator for this job (it has no ownerReference to AdaptiveJob {job.name}); "
                "its token is not used. Delete the Secret and the job starts with its own"
            )
        token = P.token_from_secret(secret) if secret is not None else None
        if token is None:
            token = secrets.token_urlsafe(32)
            _create_child(store, P.build_token_secret(job, token))
        digest = token_digest(token)
        annotations = (ctx.body.get("metadata") or {}).get("annotations") or {}
        if annotations.get(P.ANNOTATION_TOKEN_HASH) != digest:
            store.patch_job_annotations(job.namespace, job.name, {P.ANNOTATION_TOKEN_HASH: digest})
        pvc = P.build_pvc(job, ctx.spec)
        claim = P.checkpoint_claim(job, ctx.spec)
        existing = store.get_pvc(job.namespace, claim)
        if pvc is not None:
            _require_own(job, existing, "PersistentVolumeClaim")
        if pvc is not None and existing is None:
            _create_child(store, pvc)
        elif pvc is None and existing is None:
            self.events(
                ctx.body,
                "Warning",
                "CheckpointClaimNotFound",
                f"PersistentVolumeClaim {claim} not found",
            )

    def delete_group(self, job: JobRecord, action: DeleteGroup) -> None:
        ctx = step_context(job)
        ref = P.JobRef.from_body(ctx.body)
        for pod in ctx.pods:
            if pod.group != action.group:
                continue
            if action.lost_nodes:  # the node is gone: remove the object now (grace 0)
                if pod.node in action.lost_nodes:
                    log.warning(
                        "%s: force-deleting pod %s on lost node %s", job.key, pod.name, pod.node
                    )
                    self.store.delete_pod(ref.namespace, pod.name, 0)
            elif not pod.deleting:
                self.store.delete_pod(ref.namespace, pod.name, action.grace_s)

    def remove_exited(self, job: JobRecord, action: RemoveExited) -> None:
        ctx = step_context(job)
        ref = P.JobRef.from_body(ctx.body)
        for pod in ctx.pods:
            if pod.group in action.groups and not pod.deleting and pod.phase not in _LIVE:
                self.store.delete_pod(ref.namespace, pod.name, 0)

    def after_step(self, job: JobRecord, actions: Sequence[Action]) -> None:
        """A job in a Kueue queue: its Workload finished with it, or its quota given back once
        Kueue evicted it and its pods are gone (``kueue_sync.settle_workload``)."""
        ctx = step_context(job)
        written = [a.status for a in actions if isinstance(a, SetStatus)]
        after = written[-1] if written else job.status
        alive = any(p.phase in _LIVE for p in ctx.pods)
        settle_workload(self.store, ctx.workload, after, alive, datetime.now(UTC))

    def emit_event(self, job: JobRecord, event: EmitEvent) -> None:
        # a step's record carries its object; the round's records are of its listing
        ctx = job.context
        body = ctx.body if isinstance(ctx, KubeStepContext) else self._listed.get(job.key)
        if body is not None:
            self.events(body, event.type, event.reason, event.message)

    # ---- the round
    def round_jobs(self) -> list[JobRecord]:
        if self.config.namespaces:
            bodies = []
            for ns in self.config.namespaces:
                bodies += self.store.list_jobs(ns)
        else:
            bodies = self.store.list_jobs(None)
        self._listed = {job_key(b): b for b in bodies}
        records = [self._within_ceilings(r) for r in job_records(bodies)]
        admitted: dict[str, Admission] = {}
        if self.config.kueue:
            admitted = admissions(self.store, bodies)
            records = [self._admitted(r, admitted) for r in records]
        self._round_nodes = self.store.list_nodes()
        return self._confined(records, admitted, self._round_nodes)

    def _admitted(self, record: JobRecord, admitted: Mapping[str, Admission]) -> JobRecord:
        """A job in a Kueue queue as far as Kueue admitted it (none before its Workload is)."""
        body = self._listed[record.key]
        queue = queue_of(body)
        if queue is None:
            return record
        adm = admitted.get(body["metadata"]["uid"]) or Admission(queue=queue, count=0)
        return dataclasses.replace(record, ceiling=adm.ceiling, quota_wait=adm.waiting_message())

    def _confined(
        self,
        records: list[JobRecord],
        admitted: Mapping[str, Admission],
        nodes: Sequence[Mapping[str, Any]],
    ) -> list[JobRecord]:
        """Each job kept to the nodes its pods may land on: those whose taints they tolerate
        and, for a job Kueue admitted on a flavor, that flavor's nodes (its labels, and its
        tolerations added to the job's). A job whose flavors give no pool gets no node."""
        resource = self.config.gpu_resource
        by_key = {
            r.key: admitted.get(self._listed[r.key]["metadata"]["uid"])
            for r in records
            if r.key in self._listed
        }
        flavors = flavors_by_name(self.store, [a for a in by_key.values() if a is not None])
        jobs: dict[str, tuple[list[Any], Mapping[str, str] | None]] = {}
        broken: set[str] = set()
        for r in records:
            if r.status.phase.finished:
                continue
            tolerations = pod_tolerations(
                r.spec.template.get("spec") or {}, resource, r.spec.gpus_per_replica
            )
            adm = by_key.get(r.key)
            labels: Mapping[str, str] | None = None
            if adm is not None and adm.flavors and adm.ceiling:
                try:
                    pool = flavor_pool(adm.flavors, flavors)
                except FlavorError as exc:
                    self._say_once(r.key, f"no node can take it: {exc}")
                    broken.add(r.key)
                    continue
                self.no_pool.pop(r.key, None)
                tolerations += [dict(t) for t in pool.tolerations]
                labels = pool.node_labels
            jobs[r.key] = (tolerations, labels)
        # what the pods of the jobs this round places will tolerate, for round_nodes
        self._round_tolerations = [t for t, _ in jobs.values()]
        confined: dict[str, frozenset[str] | None] = dict(confinements(nodes, jobs))
        confined.update({key: frozenset() for key in broken})
        return [
            dataclasses.replace(r, nodes=confined[r.key]) if confined.get(r.key) is not None else r
            for r in records
        ]

    def _say_once(self, key: str, message: str) -> None:
        if self.no_pool.get(key) != message:
            self.no_pool[key] = message
            log.warning("%s: %s", key, message)
            self.events(self._listed[key], "Warning", "NoNodePool", message)

    def _within_ceilings(self, record: JobRecord) -> JobRecord:
        """The job as its namespace's ceilings let the policy see it; a cap is said once."""
        namespace = JobKey.parse(record.key).namespace
        spec, said = enforce(record.spec, self.config.ceilings.of(namespace), namespace)
        message = "; ".join(said)
        if not said:
            self.capped.pop(record.key, None)
            return record
        if self.capped.get(record.key) != message:
            self.capped[record.key] = message
            log.info("%s: %s", record.key, message)
            self.events(self._listed[record.key], "Warning", "NamespacePolicy", message)
        return dataclasses.replace(record, spec=spec)

    def round_nodes(self) -> list[NodeInfo]:
        """The GPU pool of the round that ``round_jobs`` just read (the same Node objects its
        confinements were drawn from)."""
        nodes, self._round_nodes = self._round_nodes, None
        tolerations, self._round_tolerations = self._round_tolerations, None
        if nodes is None or tolerations is None:  # asked on its own: for the jobs last listed
            self._round_nodes = self.store.list_nodes()
            self._confined(job_records(list(self._listed.values())), {}, self._round_nodes)
            return self.round_nodes()
        self._round_pods = self.store.list_all_pods()
        return nodes_from_objects(
            nodes,
            self._round_pods,
            resource=self.config.gpu_resource,
            selector=self.config.node_selector,
            tolerations=tolerations or [],
            gpu_type_label=self.config.gpu_type_label,
        )

    # ---- asking for capacity (``adl.controller.backend.AsksForCapacity``)
    def capacity_rule(self) -> CapacityRule | None:
        return self.config.capacity

    def ask_capacity(self, asks: Sequence[CapacityAsk]) -> None:
        self.capacity.apply(asks, self._listed, self._round_pods)

    # ---- emptying nodes (``adl.controller.backend.EmptiesNodes``): never a Node write
    def kept_by_others(self) -> Collection[str]:
        """The nodes another pod keeps (the round's pod listing): emptying them frees nothing."""
        return nodes_kept_by_others(self._round_pods)

    def nodes_emptied(self, chosen: Sequence[NodeToEmpty], released: Sequence[str]) -> None:
        say_emptied(chosen, released, self._listed, self.events)

    def set_desired(self, changed: Mapping[str, list[str]]) -> None:
        for key, alloc in changed.items():
            ref = JobKey.parse(key)
            answer = {P.ANNOTATION_ALLOCATION: json.dumps(alloc)}
            self._gone_ok(key, self.store.patch_job_annotations, ref.namespace, ref.name, answer)

    def record_service(self, service: Mapping[str, float]) -> None:
        # a merge patch of one field, without a resourceVersion: a reconcile that read the
        # object before it and writes the whole status then meets a conflict and reads again
        for key, seconds in service.items():
            ref = JobKey.parse(key)
            patch = {"attainedServiceS": seconds}
            self._gone_ok(key, self.store.patch_job_status, ref.namespace, ref.name, patch, None)

    def record_conditions(self, conditions: Mapping[str, list[Condition]]) -> None:
        # a merge patch replaces the list whole; a reconcile that read the object before it
        # writes with its resourceVersion, meets a conflict and reads again (as for service)
        for key, conds in conditions.items():
            ref = JobKey.parse(key)
            patch = {"conditions": [c.model_dump(mode="json", by_alias=True) for c in conds]}
            self._gone_ok(key, self.store.patch_job_status, ref.namespace, ref.name, patch, None)

    @staticmethod
    def _gone_ok(key: str, patch: Callable[..., None], *args: Any) -> None:
        try:
            patch(*args)
        except ApiException as exc:
            if exc.status != 404:
                raise
            # deleted since the round read it: the other jobs still get their answers
            log.info("round: %s is gone, its answer dropped", key)
