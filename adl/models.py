"""Pydantic models shared by every part of adl: one source of truth for validation, the HTTP API
schema and the CRD schema. Field names are snake_case in Python and camelCase on the wire."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from adl.contract import GPU_TYPE_PATTERN, MAX_GPU_TYPE_LEN, MAX_GPU_TYPES


class _Model(BaseModel):
    # No NaN or infinity anywhere: Kubernetes rejects them in JSON (a 500 for the worker), and
    # one diverged job's NaN model must not reach the scheduler through the local store.
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_assignment=True,
        allow_inf_nan=False,
    )

    def wire(self) -> dict[str, Any]:
        """The camelCase JSON-compatible form used in CRDs and HTTP bodies."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


# --------------------------------------------------------------------------- hints (job -> sched)


#: Bounds on what a job may report. Every number a job sends reaches numpy in the scheduling
#: round, in ``ls``/``top`` and in ``/metrics``: one job's absurd but schema-valid report (a
#: micro-batch range up to 1e20) used to stop scheduling for every job. The limits are far
#: beyond any real job and small enough that the goodput arithmetic stays finite.
#: the largest batch (global or per replica) in samples: 16.7 M
MAX_BATCH_SIZE = 2**24
#: the most replicas a job may have (as in the spec)
MAX_REPLICAS = 4096
#: the most accumulation steps per optimizer step
MAX_ACCUM_STEPS = 4096
#: seconds: the largest throughput-model coefficient (an hour per micro-batch or per sync)
MAX_PERF_S = 3600.0
#: seconds: the shortest micro-batch the throughput model may predict (alphaC + betaC)
MIN_MICRO_BATCH_S = 1e-9
#: the largest gradient statistic (squared norm or variance; float32 overflows near 3.4e38)
MAX_GRAD_STAT = 1e30
#: scale-invariant steps: the largest progress or total a job may report
MAX_PROGRESS = 1e12
#: scale-invariant steps per second: the largest goodput a job may report
MAX_GOODPUT = 1e9
#: the largest epoch number a job may report
MAX_EPOCH = 10**7


#: a micro-batch size (samples per replica per forward/backward)
MicroBatch = Annotated[int, Field(ge=1, le=MAX_BATCH_SIZE)]


#: A GPU type as node labels write it (``nvidia.com/gpu.product``: ``NVIDIA-A100-SXM4-80GB``).
GpuType = Annotated[str, Field(min_length=1, max_length=MAX_GPU_TYPE_LEN, pattern=GPU_TYPE_PATTERN)]


class PerfParamsModel(_Model):
    """Fitted throughput-model parameters (see adl.sched.goodput)."""

    alpha_c: float = Field(ge=0, le=MAX_PERF_S, description="seconds per micro-batch, fixed part")
    beta_c: float = Field(ge=0, le=MAX_PERF_S, description="seconds per sample of a micro-batch")
    alpha_n: float = Field(ge=0, le=MAX_PERF_S, description="seconds per sync across nodes")
    beta_n: float = Field(
        ge=0, le=MAX_PERF_S, description="seconds per sync across nodes, per replica beyond 2"
    )
    alpha_r: float = Field(ge=0, le=MAX_PERF_S, description="seconds per sync within a node")
    beta_r: float = Field(
        ge=0, le=MAX_PERF_S, description="seconds per sync within a node, per replica beyond 2"
    )
    gamma: float = Field(ge=1, le=10, description="compute/sync overlap exponent")

    @model_validator(mode="after")
    def _takes_time(self) -> PerfParamsModel:
        # a micro-batch of no time makes goodput infinite and every speedup NaN
        if self.alpha_c + self.beta_c < MIN_MICRO_BATCH_S:
            raise ValueError(
                f"alphaC + betaC must be >= {MIN_MICRO_BATCH_S:g} s (a micro-batch takes time)"
            )
        return self


class GradParamsModel(_Model):
    """Gradient statistics: squared norm of the true gradient, noise variance at B0."""

    sqr: float = Field(ge=0, le=MAX_GRAD_STAT, description="squared norm of the true gradient")
    var: float = Field(ge=0, le=MAX_GRAD_STAT, description="gradient noise variance at B0")


#: the largest restart cost a job may report (seconds)
MAX_RESTART_COST_S = 86400.0


class Hints(_Model):
    """What a running job reports to the scheduler (at most every ~30 s)."""

    init_batch_size: int = Field(
        ge=1, le=MAX_BATCH_SIZE, description="B0: the batch size the user chose (samples)"
    )
    max_batch_size: int | None = Field(
        default=None, ge=1, le=MAX_BATCH_SIZE, description="largest global batch (samples)"
    )
    local_bsz_bounds: tuple[MicroBatch, MicroBatch] | None = Field(
        default=None, description="micro-batch range per replica [lo, hi] (samples)"
    )
    gradient_accumulation: bool = False
    perf_params: PerfParamsModel | None = None
    grad_params: GradParamsModel | None = None
    max_profiled_replicas: int = Field(
        default=0, ge=0, le=MAX_REPLICAS, description="most replicas the job has measured"
    )
    progress: float = Field(
        default=0.0, ge=0, le=MAX_PROGRESS, description="scale-invariant steps done"
    )
    total_progress: float | None = Field(
        default=None,
        ge=0,
        le=MAX_PROGRESS,
        description="scale-invariant steps for the whole run, when declared",
    )
    batch_size: int | None = Field(
        default=None, ge=1, le=MAX_BATCH_SIZE, description="current global batch (samples)"
    )
    local_bsz: int | None = Field(
        default=None, ge=1, le=MAX_BATCH_SIZE, description="current micro-batch per replica"
    )
    accum_steps: int | None = Field(
        default=None, ge=0, le=MAX_ACCUM_STEPS, description="current accumulation steps"
    )
    goodput: float | None = Field(
        default=None, ge=0, le=MAX_GOODPUT, description="scale-invariant steps per second"
    )
    epoch: int | None = Field(default=None, ge=0, le=MAX_EPOCH)
    #: seconds a restart costs the job, measured by the library (a day at most)
    restart_cost_s: float | None = Field(
        default=None, ge=0, le=MAX_RESTART_COST_S, description="seconds a restart costs the job"
    )
    #: fewest replicas the job's sharded model, gradients and optimizer state fit in (declared
    #: by the user or derived from their bytes and the device memory); the scheduler never runs
    #: the job on fewer
    min_replicas: int | None = Field(
        default=None, ge=1, le=MAX_REPLICAS, description="fewest replicas the job fits in memory"
    )
    #: the GPU type the model above was measured on, as a node label writes it ("" on CPU or
    #: unknown); the controller keeps the last model of each type (``status.typeModels``)
    gpu_type: str = Field(
        default="",
        max_length=MAX_GPU_TYPE_LEN,
        pattern=r"^$|" + GPU_TYPE_PATTERN,
        description="GPU type the throughput model was measured on",
    )

    @field_validator("local_bsz_bounds")
    @classmethod
    def _bounds_ordered(cls, v: tuple[int, int] | None) -> tuple[int, int] | None:
        if v is not None and not 1 <= v[0] <= v[1]:
            raise ValueError(f"localBszBounds must satisfy 1 <= lo <= hi, got {list(v)}")
        return v

    @property
    def work_done(self) -> bool:
        """The job reported all of its declared work done (it is saving and exiting)."""
        return self.total_progress is not None and self.progress >= self.total_progress

    @model_validator(mode="after")
    def _batch_range(self) -> Hints:
        if self.max_batch_size is not None and self.max_batch_size < self.init_batch_size:
            raise ValueError(
                f"maxBatchSize ({self.max_batch_size}) must be >= initBatchSize "
                f"({self.init_batch_size})"
            )
        return self


# --------------------------------------------------------------------------- AdaptiveJob


#: The largest object adl accepts (a manifest, a spec): what the Kubernetes API server stores
#: in etcd (about 1.5 MiB). A 1 KB YAML alias bomb once became a 147 MB spec.
MAX_OBJECT_BYTES = 1536 * 1024


def oversized(value: Any, limit: int = MAX_OBJECT_BYTES) -> bool:
    """Whether ``value`` (parsed JSON or YAML) would serialize to more than ``limit`` bytes,
    every shared reference (YAML alias) expanded. The walk stops as soon as the count passes
    ``limit``, so its time is bounded whatever the aliases, cycles included."""
    size, stack = 0, [value]
    while stack:
        v = stack.pop()
        size += 2  # brackets, quotes or separators: every node counts, so cycles end too
        if isinstance(v, dict):
            size += len(v)
            for k, x in v.items():
                size += len(str(k)) + 3
                stack.append(x)
        elif isinstance(v, list | tuple):
            size += len(v)
            stack.extend(v)
        elif isinstance(v, str):
            size += len(v)
        else:
            size += 8  # numbers, booleans, null
        if size > limit:
            return True
    return False


def limit_text(limit: int = MAX_OBJECT_BYTES) -> str:
    return f"{limit / 2**20:g} MiB" if limit >= 2**20 else f"{limit} bytes"


#: A non-negative Kubernetes quantity (apimachinery's grammar: number, then a binary or decimal
#: SI suffix or a decimal exponent).
QUANTITY_PATTERN = (
    r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE][+-]?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)


class CheckpointSpec(_Model):
    """Where checkpoints live: an existing claim, or a claim made from a storage class."""

    # Kubernetes object names: never empty (an empty one passed the "not both" check here
    # but not the CRD's has() rule, so the CLI and the API server disagreed)
    claim_name: str | None = Field(default=None, min_length=1, max_length=253)
    storage_class: str | None = Field(default=None, min_length=1, max_length=253)
    # Checked here (and so in the CRD) because the API server refuses a claim of any other
    # size only when the operator creates it, long after the job was accepted.
    size: str = Field(
        default="10Gi",
        max_length=64,
        pattern=QUANTITY_PATTERN,
        description="a Kubernetes quantity, e.g. 10Gi",
    )

    @model_validator(mode="after")
    def _one_source(self) -> CheckpointSpec:
        if self.claim_name and self.storage_class:
            raise ValueError("checkpoint: set claimName or storageClass, not both")
        return self


#: the longest ``spec.jobKind``
MAX_JOB_KIND = 253
#: what ``spec.jobKind`` may hold: letters, digits and the punctuation of image references and
#: file paths (``ghcr.io/team/bert:1.2``, ``resnet50-imagenet``). It is shown in events and
#: log lines, so no spaces or control characters.
JOB_KIND_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:/@+=-]*$"


class AdaptiveJobSpec(_Model):
    """The user's request: a range of replicas, not a number."""

    template: dict[str, Any] = Field(
        description="PodTemplateSpec; container 0 is the trainer",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )
    min_replicas: int = Field(default=1, ge=0, le=4096)
    max_replicas: int = Field(default=16, ge=1, le=4096)
    gpus_per_replica: int = Field(default=1, ge=0, le=16)
    preemptible: bool = True
    priority: int = Field(
        default=0, ge=-1000, le=1000, description="strict tiers: higher ones get GPUs first"
    )
    weight: float = Field(
        default=1.0, gt=0, le=1000, description="value of the job's speedup within its tier"
    )
    suspend: bool = False
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    max_restarts: int = Field(default=3, ge=0, le=1000, description="failure budget")
    termination_grace_period_seconds: int = Field(default=60, ge=1, le=3600)
    gpu_types: list[GpuType] = Field(
        default=[],  # not a factory: the CRD's schema states the default (pydantic copies it)
        max_length=MAX_GPU_TYPES,
        description="GPU types the job may run on, as the nodes' type label names them (e.g. "
        "NVIDIA-A100-SXM4-80GB); empty: any. All of a job's replicas are of one type",
    )
    job_kind: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_JOB_KIND,
        # checked by ``_job_kind_chars`` (a readable message); the API server checks this
        json_schema_extra={"pattern": JOB_KIND_PATTERN},
        description="groups similar jobs: a job that does not declare its length gets its "
        "remaining work predicted from completed jobs of the same kind in its namespace "
        "(default: the trainer's image, else the script or program its command runs)",
    )

    @field_validator("template", mode="before")
    @classmethod
    def _bounded(cls, v: Any, info: ValidationInfo) -> Any:
        # before anything copies it: the walk stops at the limit, a copy would not
        if not (info.context or {}).get("stored") and oversized(v):
            raise ValueError(
                f"template is larger than {limit_text()} (the limit of a Kubernetes object),"
                " counting every YAML alias expanded"
            )
        return v

    @field_validator("template")
    @classmethod
    def _has_trainer(cls, v: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        containers = (v.get("spec") or {}).get("containers") or []
        if not containers:
            raise ValueError("template.spec.containers must hold at least the trainer container")
        trainer = containers[0]
        if not isinstance(trainer, dict) or not (trainer.get("command") or trainer.get("image")):
            raise ValueError("template.spec.containers[0] needs a command or an image")
        if (info.context or {}).get("stored"):
            return v  # a job accepted by an earlier version: readable, whatever it runs
        for key in ("command", "args"):  # a string here would be run letter by letter
            value = trainer.get(key)
            if value is not None and not (
                isinstance(value, list) and all(isinstance(x, str) for x in value)
            ):
                raise ValueError(
                    f"template.spec.containers[0].{key} must be a list of strings,"
                    f" e.g. [python, train.py], got {value!r}"
                )
        return v

    @field_validator("job_kind")
    @classmethod
    def _job_kind_chars(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(JOB_KIND_PATTERN, v):
            raise ValueError(
                "jobKind must start with a letter or digit and hold only letters, digits and"
                f" . _ : / @ + = - (got {v!r})"
            )
        return v

    @model_validator(mode="after")
    def _replica_range(self) -> AdaptiveJobSpec:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"minReplicas ({self.min_replicas}) must be <= maxReplicas ({self.max_replicas})"
            )
        return self

    @property
    def trainer(self) -> dict[str, Any]:
        return dict(self.template["spec"]["containers"][0])


class Phase(StrEnum):
    PENDING = "Pending"
    STARTING = "Starting"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUSPENDED = "Suspended"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"

    @property
    def finished(self) -> bool:
        return self in (Phase.SUCCEEDED, Phase.FAILED)

    @property
    def sits_out_rounds(self) -> bool:
        """Finished or suspended: the job holds no GPUs and is offered none."""
        return self.finished or self == Phase.SUSPENDED


class RestartCause(StrEnum):
    RESIZE = "resize"
    FAILURE = "failure"
    PREEMPTION = "preemption"


class Condition(_Model):
    type: str
    status: str = Field(pattern="^(True|False|Unknown)$")
    reason: str = ""
    message: str = ""
    last_transition_time: datetime | None = None


class AdaptiveJobStatus(_Model):
    """Observed state, written only by the control plane (and hints by the API)."""

    @classmethod
    def from_object(cls, body: Mapping[str, Any]) -> AdaptiveJobStatus:
        """The status of an AdaptiveJob object as adl wrote it: keys adl does not know (a
        framework's, or a newer version's) are ignored rather than refused."""
        raw = body.get("status") or {}
        known = {f.alias or n for n, f in cls.model_fields.items()}
        data = {k: v for k, v in raw.items() if k in known}
        try:
            return cls.model_validate(data)
        except ValidationError as err:
            # a report stored under looser rules (before the bounds): dropped, the job reports
            # again within seconds, rather than make every read of the job fail
            if "hints" not in data or any(e["loc"][:1] != ("hints",) for e in err.errors()):
                raise
            return cls.model_validate({k: v for k, v in data.items() if k != "hints"})

    phase: Phase = Phase.PENDING
    reason: str = ""
    message: str = ""
    conditions: list[Condition] = Field(default_factory=list)
    allocation: list[str] = Field(default_factory=list, description="node per replica")
    group: int = Field(default=0, ge=0, description="+1 per (re)start of the worker group")
    replicas: int = Field(default=0, ge=0)
    ready_replicas: int = Field(default=0, ge=0)
    restarts: dict[RestartCause, int] = Field(default_factory=dict)
    restart_after: datetime | None = Field(
        default=None, description="after a failure, the next group starts no earlier (backoff)"
    )
    hints: Hints | None = None
    batch_size: int | None = None
    goodput: float | None = None
    admitted: int | None = Field(
        default=None,
        ge=0,
        description="replicas an outside quota manager (Kueue) admits the job: the most it may "
        "run now (0: none yet, or evicted); unset when no quota manager decides",
    )
    attained_service_s: float = Field(default=0.0, ge=0)
    last_checkpoint_time: datetime | None = None
    start_time: datetime | None = None
    completion_time: datetime | None = None
    finishing_since: datetime | None = Field(
        default=None,
        description="when the job first reported all of its declared work done; the scheduler "
        "leaves its GPUs alone for a while so that it can save and exit",
    )
    # keys are checked by ``_type_names`` (a CRD object's additionalProperties take no key rule)
    type_models: dict[str, PerfParamsModel] = Field(
        default_factory=dict,
        max_length=MAX_GPU_TYPES,
        description="the last throughput model the job measured on each GPU type: the "
        "scheduler compares them to choose the type where it runs faster",
    )

    @field_validator("type_models")
    @classmethod
    def _type_names(cls, v: dict[str, PerfParamsModel]) -> dict[str, PerfParamsModel]:
        bad = [k for k in v if len(k) > MAX_GPU_TYPE_LEN or not re.fullmatch(GPU_TYPE_PATTERN, k)]
        if bad:
            raise ValueError(f"typeModels keys must be GPU types as node labels name them: {bad}")
        return v

    def restart_count(self, cause: RestartCause | None = None) -> int:
        if cause is None:
            return sum(self.restarts.values())
        return self.restarts.get(cause, 0)


# --------------------------------------------------------------------------- heartbeats


#: Bounds on a heartbeat (every rank -> the controller; see adl.controller.liveness)
#: the most steps a rank may report (2**53: exact as a float, far beyond any run)
MAX_STEPS = 2**53
#: seconds: the longest step time a rank may report (an hour, as the throughput model's)
MAX_STEP_TIME_S = 3600.0
#: seconds between heartbeats: the bounds a rank's interval is kept within
MIN_HEARTBEAT_INTERVAL_S, MAX_HEARTBEAT_INTERVAL_S = 1.0, 60.0
#: seconds: the bounds of the hang floor a job may ask for (0 turns detection off)
MIN_HANG_TIMEOUT_S, MAX_HANG_TIMEOUT_S = 5.0, 86400.0
#: the bounds of the multiple of its step time a rank may make no progress for
MIN_HANG_STEP_MULTIPLE, MAX_HANG_STEP_MULTIPLE = 2.0, 1000.0


class Heartbeat(_Model):
    """What each rank says, every few seconds, from a background thread: that it is alive and
    how far it got (``PUT /v1/jobs/{ns}/{name}/heartbeat``). A process stopped or stuck in the
    kernel sends nothing, so the rank whose heartbeat is stale is the one a hang names. The
    controller keeps the time a heartbeat arrived by its own clock: no worker time is trusted."""

    group: int = Field(ge=0, le=MAX_STEPS, description="the worker group (ADL_GROUP)")
    rank: int = Field(ge=0, lt=MAX_REPLICAS, description="the rank (ADL_RANK)")
    steps: int = Field(
        ge=0, le=MAX_STEPS, description="step boundaries this process reached (0: not started)"
    )
    step_time_s: float | None = Field(
        default=None, ge=0, le=MAX_STEP_TIME_S, description="this rank's recent step time"
    )
    interval_s: float = Field(
        default=5.0,
        ge=MIN_HEARTBEAT_INTERVAL_S,
        le=MAX_HEARTBEAT_INTERVAL_S,
        description="seconds until its next heartbeat",
    )
    saving: bool = Field(default=False, description="in a checkpoint save (no steps meanwhile)")
    hang_timeout_s: float | None = Field(
        default=None,
        ge=0,
        le=MAX_HANG_TIMEOUT_S,
        description="the job's hang floor in seconds (ADL_HANG_TIMEOUT_S; 0: no detection)",
    )
    hang_step_multiple: float | None = Field(
        default=None,
        ge=MIN_HANG_STEP_MULTIPLE,
        le=MAX_HANG_STEP_MULTIPLE,
        description="step times of no progress before a hang (ADL_HANG_STEP_MULTIPLE)",
    )

    @field_validator("hang_timeout_s")
    @classmethod
    def _floor_or_off(cls, value: float | None) -> float | None:
        if value is not None and value != 0 and value < MIN_HANG_TIMEOUT_S:
            raise ValueError(f"must be 0 (off) or at least {MIN_HANG_TIMEOUT_S:g} seconds")
        return value


# --------------------------------------------------------------------------- rendezvous


class GroupInfo(_Model):
    """Where the current worker group of a job meets (served at /v1/jobs/{ns}/{name}/group).

    A worker whose ADL_GROUP is older than ``group`` belongs to a group being replaced."""

    job: str = Field(description="namespace/name")
    group: int = Field(ge=0)
    phase: Phase
    master_addr: str = ""
    master_port: int = Field(default=0, ge=0, le=65535)
    world_size: int = Field(default=0, ge=0)
    num_nodes: int = Field(default=0, ge=0)
    allocation: list[str] = Field(default_factory=list, description="node per replica")


# --------------------------------------------------------------------------- error messages

_BOUNDS = {
    "greater_than_equal": (">=", "ge"),
    "greater_than": (">", "gt"),
    "less_than_equal": ("<=", "le"),
    "less_than": ("<", "lt"),
}


def _field_names(model: type[BaseModel], loc: tuple[str | int, ...]) -> list[str]:
    """camelCase names of the fields allowed where ``loc`` points (for "did you mean")."""
    for part in loc[:-1]:
        field = model.model_fields.get(str(part)) or next(
            (f for f in model.model_fields.values() if f.alias == part), None
        )
        sub = field.annotation if field is not None else None
        if not (isinstance(sub, type) and issubclass(sub, BaseModel)):
            return []
        model = sub
    return [f.alias or n for n, f in model.model_fields.items()]


def explain(exc: ValidationError, model: type[BaseModel], root: str = "spec") -> list[str]:
    """One readable line per problem, with camelCase paths from ``root``:
    ``spec.maxRestarts: must be >= 0 (got -1)``, ``spec.minReplica: unknown field (did you mean
    minReplicas?)``, ``spec: minReplicas (5) must be <= maxReplicas (2)``."""
    lines = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        path = ".".join([root, *(to_camel(p) if isinstance(p, str) else f"[{p}]" for p in loc)])
        path = path.replace(".[", "[")
        kind, ctx = err["type"], err.get("ctx") or {}
        if kind in _BOUNDS and _BOUNDS[kind][1] in ctx:
            op, key = _BOUNDS[kind]
            bound = ctx[key]
            shown = f"{bound:g}" if isinstance(bound, float) else str(bound)
            text = f"must be {op} {shown} (got {err['input']!r})"
        elif kind == "missing":
            text = "required"
        elif kind == "extra_forbidden":
            allowed = _field_names(model, loc)
            close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
            text = "unknown field" + (f" (did you mean {close[0]}?)" if close else "")
            if not close and allowed:
                text += f" (allowed: {', '.join(allowed)})"
        elif kind == "value_error":
            text = err["msg"].removeprefix("Value error, ")
        else:
            text = f"{err['msg']} (got {err['input']!r})"
        lines.append(f"{path}: {text}")
    return lines


class InvalidSpec(ValueError):
    """A user's AdaptiveJob spec with every problem listed (CLI and API show ``str(exc)``)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("invalid AdaptiveJob spec:\n  " + "\n  ".join(problems))
        self.problems = problems


def parse_spec(data: dict[str, Any]) -> AdaptiveJobSpec:
    """Validate user input into a spec, raising ``InvalidSpec`` with readable problems."""
    try:
        return AdaptiveJobSpec.model_validate(data)
    except ValidationError as exc:
        raise InvalidSpec(explain(exc, AdaptiveJobSpec)) from None
