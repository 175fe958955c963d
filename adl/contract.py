"""The contract between adl and its worker processes, in one place.

Everything a worker and adl's own processes must agree on by value: the environment variable
names, the exit codes, the Kubernetes label and annotation keys, the API group and version,
and the ``namespace/name`` job key. Other modules import these instead of writing the strings
again, so a name changes in one place.

Bottom layer: standard library only and no adl imports, so the operator, the local daemon,
its shim (which must start in milliseconds) and the in-job library can all use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# ----------------------------------------------------------------------------- exit codes

#: The worker finished training.
EXIT_OK = 0
#: The worker checkpointed and stopped on request (SIGTERM or the stop file): 128 + SIGTERM,
#: what Kubernetes and shells report for a process ended by SIGTERM.
EXIT_STOPPED = 143
#: 128 + SIGKILL: what a shell reports for a process killed after its grace period.
EXIT_KILLED = 137
#: The command was not found (as a shell reports it).
EXIT_NOT_FOUND = 127
#: The command was found but could not be executed (as a shell reports it).
EXIT_NOT_EXECUTABLE = 126
#: Exit codes that are no failure: the worker finished, or stopped cleanly when asked to.
CLEAN_EXITS = frozenset({EXIT_OK, EXIT_STOPPED})


def exit_code(returncode: int) -> int:
    """A shell-style exit code from a ``Popen.returncode``: death by signal N is 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


# --------------------------------------------------------------- worker environment (ADL_*)

#: ``namespace/name`` of the job.
ENV_JOB = "ADL_JOB"
#: The worker group (a new group starts at every restart or resize).
ENV_GROUP = "ADL_GROUP"
ENV_RANK = "ADL_RANK"
ENV_WORLD_SIZE = "ADL_WORLD_SIZE"
ENV_LOCAL_RANK = "ADL_LOCAL_RANK"
ENV_LOCAL_WORLD_SIZE = "ADL_LOCAL_WORLD_SIZE"
ENV_NUM_NODES = "ADL_NUM_NODES"
ENV_NODE_RANK = "ADL_NODE_RANK"
ENV_MASTER_ADDR = "ADL_MASTER_ADDR"
ENV_MASTER_PORT = "ADL_MASTER_PORT"
ENV_CHECKPOINT_DIR = "ADL_CHECKPOINT_DIR"
ENV_API_URL = "ADL_API_URL"
ENV_TOKEN_FILE = "ADL_TOKEN_FILE"
#: The wall time (Unix seconds) since which the job has held its GPUs without a break: the
#: start of this group after a suspend or a wait for GPUs, else that of an earlier group this
#: one replaces in a resize or restart. What a restart costs is never measured across a pause
#: before it (``adl.client_lib.restart_cost``).
ENV_SCHEDULED_SINCE = "ADL_SCHEDULED_SINCE"

#: Every variable the controller stamps on a worker; nothing else tells a worker its place.
WORKER_ENV_VARS = (
    ENV_JOB,
    ENV_GROUP,
    ENV_RANK,
    ENV_WORLD_SIZE,
    ENV_LOCAL_RANK,
    ENV_LOCAL_WORLD_SIZE,
    ENV_NUM_NODES,
    ENV_NODE_RANK,
    ENV_MASTER_ADDR,
    ENV_MASTER_PORT,
    ENV_CHECKPOINT_DIR,
    ENV_API_URL,
    ENV_TOKEN_FILE,
    ENV_SCHEDULED_SINCE,
)

# Optional knobs a worker reads (set by the user, never by the controller).
#: A file whose appearance asks every rank to stop (default: next to the checkpoint folder).
ENV_STOP_FILE = "ADL_STOP_FILE"
#: Seconds a worker gives itself to checkpoint after a stop request before exiting anyway.
ENV_GRACE_PERIOD_S = "ADL_GRACE_PERIOD_S"
#: Seconds between periodic checkpoints (0: none; unset: every 5 minutes, or at most 2% of the
#: training time when a save is slow).
ENV_CHECKPOINT_INTERVAL_S = "ADL_CHECKPOINT_INTERVAL_S"
#: "0" keeps periodic checkpoints synchronous (they are written in the background otherwise)
ENV_CHECKPOINT_ASYNC = "ADL_CHECKPOINT_ASYNC"
#: torch.distributed timeout of the job's process group, in seconds.
ENV_DIST_TIMEOUT_S = "ADL_DIST_TIMEOUT_S"
#: Hung-rank detection: the floor, in seconds, of how long a rank may make no step progress
#: before its group is stopped and restarted from the last checkpoint (0: never; default 45).
ENV_HANG_TIMEOUT_S = "ADL_HANG_TIMEOUT_S"
#: ... and how many of the rank's own step times it may make no progress for, above the floor
#: (default 10).
ENV_HANG_STEP_MULTIPLE = "ADL_HANG_STEP_MULTIPLE"
#: Seconds between the heartbeats every rank sends (its step count and step time; default 5).
ENV_HEARTBEAT_INTERVAL_S = "ADL_HEARTBEAT_INTERVAL_S"
#: A directory for TensorBoard scalars (goodput, batch size, LR scale, noise scale...) that
#: rank 0 of AdaptiveDataParallel writes; unset means none are written.
ENV_TENSORBOARD_DIR = "ADL_TENSORBOARD_DIR"
#: Write those scalars every this many optimizer steps (default 10).
ENV_TENSORBOARD_EVERY = "ADL_TENSORBOARD_EVERY"
#: The GPU type a worker on a CPU reports as its device's (``Tesla-T4``): a CPU run standing in
#: for a GPU of that type, as the cluster tests' process kubelet runs pods on nodes labelled
#: with GPU types. A CUDA device always reports its own name; unset, a CPU reports no type.
ENV_GPU_TYPE = "ADL_GPU_TYPE"

# Settings of adl's own processes (CLI, daemon, operator, simulator), not of workers.
ENV_HOME = "ADL_HOME"
ENV_BACKEND = "ADL_BACKEND"
ENV_KUBE_URL = "ADL_KUBE_URL"
ENV_GPU_RESOURCE = "ADL_GPU_RESOURCE"
ENV_TRACES = "ADL_TRACES"

#: Prefix of every adl variable (the daemon strips them from what it passes on).
ENV_PREFIX = "ADL_"

# ------------------------------------------------------- torchrun-compatible worker variables

#: torchrun's names for the same facts, set beside the ``ADL_*`` ones so that scripts (and
#: ``init_process_group(init_method="env://")``) written for torchrun run unchanged.
TORCH_ENV = {
    "RANK": ENV_RANK,
    "WORLD_SIZE": ENV_WORLD_SIZE,
    "LOCAL_RANK": ENV_LOCAL_RANK,
    "LOCAL_WORLD_SIZE": ENV_LOCAL_WORLD_SIZE,
    "MASTER_ADDR": ENV_MASTER_ADDR,
    "MASTER_PORT": ENV_MASTER_PORT,
}
TORCH_ENV_VARS = tuple(TORCH_ENV)


def torch_env(adl_env: Mapping[str, str]) -> dict[str, str]:
    """The torchrun variables matching the ``ADL_*`` ones in ``adl_env`` (those present)."""
    return {torch: adl_env[adl] for torch, adl in TORCH_ENV.items() if adl in adl_env}


# ------------------------------------------------------------------ Kubernetes API and keys

API_GROUP = "adl.dev"
API_VERSION_NAME = "v1"
#: ``apiVersion`` of an AdaptiveJob object.
API_VERSION = f"{API_GROUP}/{API_VERSION_NAME}"
KIND = "AdaptiveJob"
PLURAL = "adaptivejobs"

LABEL_JOB = f"{API_GROUP}/job"
LABEL_GROUP = f"{API_GROUP}/group"
LABEL_NODE_INDEX = f"{API_GROUP}/node-index"
#: On a placeholder pod (``adl.operator.capacity_pods``): the job whose growth it asks an
#: autoscaler for. Such pods are no job's workers and use no GPU adl could hand out.
LABEL_CAPACITY_FOR = f"{API_GROUP}/capacity-for"
#: A node label (``"true"``): the node may be taken away (spot / preemptible capacity).
LABEL_PREEMPTIBLE = f"{API_GROUP}/preemptible"
#: The labels (and values) by which autoscalers and clouds mark spot capacity, besides adl's own.
SPOT_NODE_LABELS: tuple[tuple[str, str], ...] = (
    (LABEL_PREEMPTIBLE, "true"),
    ("karpenter.sh/capacity-type", "spot"),
    ("cloud.google.com/gke-spot", "true"),
    ("cloud.google.com/gke-preemptible", "true"),
    ("eks.amazonaws.com/capacityType", "SPOT"),
    ("kubernetes.azure.com/scalesetpriority", "spot"),
)
#: The label that puts a job in a Kueue LocalQueue (every Kueue integration reads it).
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
ANNOTATION_ALLOCATION = f"{API_GROUP}/allocation"
ANNOTATION_TOKEN_HASH = f"{API_GROUP}/token-sha256"


# ------------------------------------------------------------------------------- GPU types

#: The node label GPU feature discovery sets to the GPU's product name (``Tesla-T4``,
#: ``NVIDIA-A100-SXM4-80GB``): a node's GPU type unless the operator is told another label.
LABEL_GPU_PRODUCT = "nvidia.com/gpu.product"
#: A GPU type is a label value (63 characters of letters, digits, ``-``, ``_``, ``.``, starting
#: and ending with a letter or digit), so that node labels and worker reports compare as they are.
MAX_GPU_TYPE_LEN = 63
GPU_TYPE_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$"
#: The most GPU types one job may list (``spec.gpuTypes``).
MAX_GPU_TYPES = 16


def normalize_gpu_type(name: str) -> str:
    """A device name as GPU feature discovery writes it into a label: runs of spaces (and of
    anything a label value may not hold) become one ``-``, and the result is cut to a label's
    63 characters. ``torch.cuda.get_device_name()`` says ``NVIDIA A100-SXM4-80GB`` where the
    node label says ``NVIDIA-A100-SXM4-80GB``; both normalize to the latter. "" stays "" (no
    GPU, or unknown)."""
    out: list[str] = []
    for ch in name.strip():
        ok = ch.isascii() and (ch.isalnum() or ch in "._-")
        if ok:
            out.append(ch)
        elif out and out[-1] != "-":
            out.append("-")
    text = "".join(out)[:MAX_GPU_TYPE_LEN]
    return text.strip("._-")


# ------------------------------------------------------------------------------- job key


@dataclass(frozen=True, order=True)
class JobKey:
    """A job's identity, ``namespace/name`` (``ADL_JOB``, API paths, database keys)."""

    namespace: str
    name: str

    def __post_init__(self) -> None:
        if not self.namespace or not self.name or "/" in self.namespace or "/" in self.name:
            raise ValueError(f"a job key is 'namespace/name', got {self.namespace}/{self.name}")

    @classmethod
    def parse(cls, text: str) -> JobKey:
        """``"ns/name"`` -> ``JobKey("ns", "name")``; anything else is a ValueError."""
        namespace, sep, name = text.partition("/")
        if not sep or not namespace or not name or "/" in name:
            raise ValueError(f"a job key is 'namespace/name', got {text!r}")
        return cls(namespace, name)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"
