"""``python -m adl.operator``: the operator process of the Helm chart's Deployment.

One asyncio loop runs kopf (handlers, scheduling round, peering, liveness endpoint) and, when
the API service is available, the worker-facing HTTP API beside it, so the round's metrics and
the hints writes live in one process.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import re
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from adl.contract import LABEL_GPU_PRODUCT
from adl.operator.capacity_pods import CAPACITY_TYPE_LABEL, PLACEHOLDER_IMAGE
from adl.sched.capacity import CapacityRule

if TYPE_CHECKING:
    from adl.operator.tenancy import Ceilings
    from adl.sched.types import Policy

log = logging.getLogger("adl.operator")

#: a Kubernetes label key: an optional DNS-subdomain prefix and ``/``, then a name of 63
#: characters at most (the chart's values schema checks ``scheduler.gpuTypeLabel`` alike)
LABEL_KEY_PATTERN = (
    r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
)

#: The API service: (port, namespaces, stop, started, metrics, *, metrics_port, docs) ->
#: coroutine serving it until ``stop`` is set, setting ``started`` once it listens
#: (``adl.operator.api_store.serve``).
ApiServer = Callable[..., Awaitable[None]]


@dataclass
class Options:
    port: int = 8080
    health_port: int = 8081
    api_url: str = "http://adl.adl-system.svc:8080"
    round_interval: float = 30.0
    gpu_resource: str = "nvidia.com/gpu"
    #: the node label naming each node's GPU type (GPU feature discovery's by default)
    gpu_type_label: str = LABEL_GPU_PRODUCT
    namespaces: list[str] = field(default_factory=list)
    all_namespaces: bool = False
    peering: str | None = None
    priority: int | None = None
    standalone: bool = False
    node_selector: dict[str, str] = field(default_factory=dict)
    policy_knobs: dict[str, float] = field(default_factory=dict)
    #: ``/metrics`` on this port instead of the API's (None: on the API's port)
    metrics_port: int | None = None
    api_docs: bool = False
    #: per-namespace ceilings on spec.priority and preemptible=false (None: none)
    ceilings: Ceilings | None = None
    #: a node NotReady this long is lost: its pods are force-deleted and the job moves on
    node_lost_after: float = 60.0
    #: run jobs labelled with a Kueue queue through Kueue (``adl.operator.kueue``)
    kueue: bool = False
    #: one PodDisruptionBudget per job that refuses evictions of its workers (drains wait for
    #: adl's own checkpointed move; ``adl.operator.pods.build_disruption_budget``)
    disruption_budgets: bool = False
    #: ask an autoscaler for GPUs through placeholder pods (``adl.sched.capacity``); None: off
    capacity: CapacityRule | None = None
    #: the node label whose values ``spot`` / ``on-demand`` name a node's capacity type
    capacity_type_label: str = CAPACITY_TYPE_LABEL
    placeholder_image: str = PLACEHOLDER_IMAGE


def parse_args(argv: Sequence[str] | None = None) -> Options:
    p = argparse.ArgumentParser(prog="python -m adl.operator", description=__doc__)
    p.add_argument("--port", type=int, default=8080, help="API service port")
    p.add_argument("--health-port", type=int, default=8081, help="kopf liveness port")
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve /metrics on this port, not on --port (which the workers reach)",
    )
    p.add_argument(
        "--api-docs",
        action="store_true",
        help="serve /docs and /openapi.json (unauthenticated; off by default)",
    )
    p.add_argument("--api-url", default=Options.api_url, help="URL workers use for the API")
    p.add_argument("--round-interval", type=float, default=30.0, help="seconds between rounds")
    p.add_argument("--gpu-resource", default="nvidia.com/gpu")
    p.add_argument(
        "--gpu-type-label",
        default=LABEL_GPU_PRODUCT,
        metavar="KEY",
        help="the node label that names a node's GPU type (default: GPU feature discovery's "
        f"{LABEL_GPU_PRODUCT}; e.g. node.kubernetes.io/instance-type on clusters without it)",
    )
    p.add_argument(
        "--kueue",
        action="store_true",
        help="jobs labelled kueue.x-k8s.io/queue-name run only as far as Kueue admits them "
        "(each gets a Workload; needs Kueue and the chart's kueue.enabled RBAC)",
    )
    p.add_argument(
        "--node-lost-after",
        type=float,
        default=Options.node_lost_after,
        metavar="SECONDS",
        help="a node NotReady or unreachable this long is lost: the pods of adl jobs on it are "
        "force-deleted and their jobs start again on the remaining nodes from the last "
        "checkpoint (default: %(default)s)",
    )
    p.add_argument(
        "--disruption-budgets",
        action="store_true",
        help="give each job a PodDisruptionBudget that refuses evictions of its workers, so a "
        "drain waits until adl has checkpointed the job and moved it off the node (needs the "
        "chart's scheduler.disruptionBudgets RBAC; docs/autoscalers.md)",
    )
    p.add_argument(
        "--ask-capacity",
        action="store_true",
        help="ask an autoscaler (Karpenter, cluster-autoscaler) for the GPUs the jobs would put "
        "to good use, through pending placeholder pods (docs/autoscalers.md)",
    )
    p.add_argument(
        "--capacity-min-gain",
        type=float,
        default=CapacityRule.min_marginal_speedup,
        metavar="SHARE",
        help="a GPU is asked for only if it adds at least this share of one GPU's throughput "
        "to its job, in (0, 1] (default: %(default)s)",
    )
    p.add_argument(
        "--capacity-max-gpus",
        type=int,
        default=0,
        metavar="N",
        help="never ask for GPUs beyond a cluster of N GPUs (0: no cap; default: %(default)s)",
    )
    p.add_argument(
        "--capacity-node-gpus",
        type=int,
        default=CapacityRule.node_gpus,
        metavar="N",
        help="GPUs of a node the autoscaler adds, for the jobs' speedup across nodes "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--capacity-empty-per-round",
        type=int,
        default=CapacityRule.max_emptied_per_round,
        metavar="N",
        help="with --ask-capacity, hold back from the jobs at most N more nodes a round whose "
        "replicas add less than --capacity-min-gain or fit elsewhere, so that the autoscaler "
        "removes them once empty (0: never; default: %(default)s)",
    )
    p.add_argument(
        "--capacity-empty-low-value",
        action="store_true",
        help="emptying a node may also drop replicas that add less than --capacity-min-gain "
        "(their jobs shrink); off: only idle nodes and replicas that fit elsewhere",
    )
    p.add_argument(
        "--capacity-type-label",
        default=CAPACITY_TYPE_LABEL,
        metavar="KEY",
        help="node label whose values spot/on-demand name the capacity type a placeholder asks "
        "for (default: Karpenter's %(default)s)",
    )
    p.add_argument("--placeholder-image", default=PLACEHOLDER_IMAGE, metavar="IMAGE")
    scope = p.add_mutually_exclusive_group(required=True)
    scope.add_argument("--namespace", action="append", dest="namespaces", default=None)
    scope.add_argument("--all-namespaces", "-A", action="store_true")
    peer = p.add_mutually_exclusive_group()
    peer.add_argument("--peering", default=None, help="kopf peering object name")
    peer.add_argument("--standalone", action="store_true")
    p.add_argument(
        "--priority",
        type=int,
        default=None,
        help="peering priority (default: older replicas first, so a new one waits as standby)",
    )
    p.add_argument("--node-selector", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument(
        "--policy-knob",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an adl policy constant, e.g. srpt_power=0.25 (repeatable; docs/scheduler.md: Knobs)",
    )
    p.add_argument(
        "--max-priority",
        type=int,
        default=None,
        help="ceiling of spec.priority in every namespace (a job above it runs at it)",
    )
    p.add_argument(
        "--deny-non-preemptible",
        action="store_true",
        help="run jobs with preemptible=false as preemptible in every namespace",
    )
    p.add_argument(
        "--namespace-policy",
        action="append",
        default=[],
        metavar="NS=JSON",
        help='a namespace\'s own ceilings, e.g. team-a={"maxPriority": 10, '
        '"allowNonPreemptible": false}; keys left out keep the cluster-wide ones',
    )
    a = p.parse_args(argv)
    from adl.operator.tenancy import Ceilings, NamespacePolicy, check_priority
    from adl.operator.tenancy import parse_namespace_policy as parse_policy

    try:
        default = NamespacePolicy(check_priority(a.max_priority), not a.deny_non_preemptible)
        per_namespace = dict(parse_policy(text, default) for text in a.namespace_policy)
    except ValueError as err:
        p.error(str(err))
    selector = {}
    for item in a.node_selector:
        key, sep, value = item.partition("=")
        if not sep or not key:
            p.error(f"--node-selector expects KEY=VALUE, got {item!r}")
        selector[key] = value
    if a.metrics_port is not None and a.metrics_port in (a.port, a.health_port):
        p.error("--metrics-port must differ from --port and --health-port")
    if a.round_interval <= 0:
        p.error("--round-interval must be positive")
    if not re.fullmatch(LABEL_KEY_PATTERN, a.gpu_type_label):
        p.error(
            f"--gpu-type-label must be a label key like {LABEL_GPU_PRODUCT},"
            f" got {a.gpu_type_label!r}"
        )
    if a.node_lost_after <= 0:
        p.error("--node-lost-after must be positive")
    if not re.fullmatch(LABEL_KEY_PATTERN, a.capacity_type_label):
        p.error(f"--capacity-type-label must be a label key, got {a.capacity_type_label!r}")
    capacity = None
    try:
        rule = CapacityRule(
            a.capacity_min_gain,
            a.capacity_max_gpus,
            a.capacity_node_gpus,
            max_emptied_per_round=a.capacity_empty_per_round,
            drop_low_value=a.capacity_empty_low_value,
        )
    except ValueError as err:
        p.error(f"--capacity-*: {err}")
    if a.ask_capacity:
        capacity = rule
    from adl.sched.policy_knobs import parse_knobs

    try:
        knobs = parse_knobs(a.policy_knob)
    except ValueError as err:
        p.error(str(err))
    return Options(
        port=a.port,
        health_port=a.health_port,
        api_url=a.api_url,
        round_interval=a.round_interval,
        gpu_resource=a.gpu_resource,
        gpu_type_label=a.gpu_type_label,
        namespaces=a.namespaces or [],
        all_namespaces=a.all_namespaces,
        peering=a.peering,
        priority=a.priority,
        standalone=a.standalone or a.peering is None,
        node_selector=selector,
        policy_knobs=knobs,
        metrics_port=a.metrics_port,
        api_docs=a.api_docs,
        ceilings=Ceilings(default, per_namespace),
        node_lost_after=a.node_lost_after,
        kueue=a.kueue,
        disruption_budgets=a.disruption_budgets,
        capacity=capacity,
        capacity_type_label=a.capacity_type_label,
        placeholder_image=a.placeholder_image,
    )


def policy_factory(knobs: Mapping[str, float]) -> Callable[[], Policy]:
    """A factory of the adl policy with these constants (one fresh policy per operator run)."""
    from adl.sched.registry import policy_factory as factory

    return factory("adl", knobs=knobs)


def _metrics() -> Any:
    """The metrics the API serves and the rounds write (the API package is optional)."""
    from adl.api.metrics import AdlMetrics

    return AdlMetrics()


def _api_server() -> ApiServer | None:
    try:
        module = importlib.import_module("adl.operator.api_store")
    except ImportError:
        return None
    server: ApiServer | None = getattr(module, "serve", None)
    return server


def peering_priority(started_at: float) -> int:
    """Priority of a replica started at ``started_at`` (epoch seconds): the oldest wins.

    kopf pauses an operator while a live peer has a higher priority, and pauses *every*
    operator while peers share one; so replicas need distinct priorities, and ranking them by
    age (milliseconds) keeps the active one active when a standby starts."""
    return -int(started_at * 1000)


async def run(opts: Options) -> None:
    import kopf

    from adl.controller.lifecycle import Timing
    from adl.operator.backend import OperatorConfig
    from adl.operator.capacity_pods import PlaceholderSettings
    from adl.operator.tenancy import Ceilings

    api = _api_server()
    metrics = _metrics() if api is not None else None
    config = OperatorConfig(
        api_url=opts.api_url,
        round_interval_s=opts.round_interval,
        gpu_resource=opts.gpu_resource,
        gpu_type_label=opts.gpu_type_label,
        node_selector=dict(opts.node_selector),
        namespaces=tuple(opts.namespaces),
        policy_factory=policy_factory(opts.policy_knobs),
        metrics=metrics,
        ceilings=opts.ceilings or Ceilings(),
        timing=Timing(node_lost_s=opts.node_lost_after),
        kueue=opts.kueue,
        disruption_budgets=opts.disruption_budgets,
        capacity=opts.capacity,
        placeholders=PlaceholderSettings(
            opts.gpu_resource, opts.capacity_type_label, opts.placeholder_image
        ),
    )
    import adl.operator.handlers  # noqa: F401  (registers the handlers with kopf)

    if opts.policy_knobs:
        log.info("adl policy knobs: %s", opts.policy_knobs)
    stop, started = asyncio.Event(), asyncio.Event()
    api_task: asyncio.Task[None] | None = None
    if api is not None:
        # Started (lifespan included) before kopf: kopf cancels every task that appears
        # while it runs, but leaves the ones that existed before it.
        api_task = asyncio.ensure_future(
            api(
                opts.port,
                opts.namespaces,
                stop,
                started,
                metrics,
                metrics_port=opts.metrics_port,
                docs=opts.api_docs,
                progress=config.progress,
            )
        )
        ready = asyncio.ensure_future(started.wait())
        await asyncio.wait({api_task, ready}, return_when=asyncio.FIRST_COMPLETED)
        ready.cancel()
        if api_task.done():
            await api_task  # it failed to start: raise its error
            return
    else:
        log.warning("adl.api is not available: running the operator without the API service")
    try:
        # kopf owns SIGTERM/SIGINT; when it returns, the API service follows
        await kopf.operator(
            clusterwide=opts.all_namespaces,
            namespaces=opts.namespaces,
            standalone=opts.standalone,
            peering_name=opts.peering,
            priority=opts.priority if opts.priority is not None else peering_priority(time.time()),
            liveness_endpoint=f"http://0.0.0.0:{opts.health_port}/healthz",
            memo=kopf.Memo(config=config),  # the handlers' runtime holds it: no global
        )
    finally:
        stop.set()
        if api_task is not None:
            await api_task


def main(argv: Sequence[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # kopf logs every handler and timer success per object at INFO: with a 1 s timer per job
    # that is a line per job per second. Failures (WARNING and up) still show.
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)
    asyncio.run(run(parse_args(argv)))
