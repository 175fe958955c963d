"""The worker environment (DESIGN.md contract), built by one pure function so that the local
backend and the Kubernetes operator stamp identical variables on every replica."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from adl import contract as C

#: Every ADL_* variable a worker may read; nothing else tells a worker its place. The torchrun
#: names (``C.TORCH_ENV_VARS``) are set beside them with the same values.
ENV_VARS = C.WORKER_ENV_VARS


@dataclass(frozen=True)
class WorkerSite:
    """Backend-specific facts about where a group runs (the rest follows from the allocation).

    Local backend: master 127.0.0.1 and a free port picked at launch; Kubernetes: the DNS name
    of the group's first pod and a fixed port."""

    master_addr: str
    master_port: int
    checkpoint_dir: str
    api_url: str = ""
    token_file: str = ""


def node_slots(allocation: Sequence[str]) -> list[tuple[str, int]]:
    """(node, replicas) in first-seen order. Replicas on one node get contiguous ranks."""
    counts: dict[str, int] = {}
    for node in allocation:
        counts[node] = counts.get(node, 0) + 1
    return list(counts.items())


def replica_placement(allocation: Sequence[str]) -> list[tuple[int, int, int]]:
    """Per global rank: (node_rank, local_rank, local_world_size).

    Ranks are assigned node by node (all replicas of the first-seen node first), independent of
    the order of the allocation list, so one placement always yields one rank layout."""
    out: list[tuple[int, int, int]] = []
    for node_rank, (_, count) in enumerate(node_slots(allocation)):
        out.extend((node_rank, local, count) for local in range(count))
    return out


def worker_env(
    job: str,
    group: int,
    allocation: Sequence[str],
    rank: int,
    site: WorkerSite,
    scheduled_since: float | None = None,
) -> dict[str, str]:
    """The ADL_* variables of replica ``rank`` of ``group`` (``job`` is ``namespace/name``), and
    the torchrun ones (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``,
    ``MASTER_ADDR``, ``MASTER_PORT``) with the same values. ``scheduled_since``: the wall time
    since which the job has held GPUs without a break (``ADL_SCHEDULED_SINCE``), when known."""
    placement = replica_placement(allocation)
    if not 0 <= rank < len(placement):
        raise ValueError(f"rank {rank} outside a group of {len(placement)} replicas")
    node_rank, local_rank, local_world = placement[rank]
    env = {
        C.ENV_JOB: job,
        C.ENV_GROUP: str(group),
        C.ENV_RANK: str(rank),
        C.ENV_WORLD_SIZE: str(len(placement)),
        C.ENV_LOCAL_RANK: str(local_rank),
        C.ENV_LOCAL_WORLD_SIZE: str(local_world),
        C.ENV_NUM_NODES: str(len(node_slots(allocation))),
        C.ENV_NODE_RANK: str(node_rank),
        C.ENV_MASTER_ADDR: site.master_addr,
        C.ENV_MASTER_PORT: str(site.master_port),
        C.ENV_CHECKPOINT_DIR: site.checkpoint_dir,
    }
    if site.api_url:
        env[C.ENV_API_URL] = site.api_url
    if site.token_file:
        env[C.ENV_TOKEN_FILE] = site.token_file
    if scheduled_since is not None:
        env[C.ENV_SCHEDULED_SINCE] = f"{scheduled_since:.3f}"
    # scripts written for torchrun (and init_method="env://") read these names
    env.update(C.torch_env(env))
    return env


def group_env(
    job: str, group: int, allocation: Sequence[str], site: WorkerSite
) -> list[dict[str, str]]:
    """The environment of every replica of a group, indexed by rank."""
    return [worker_env(job, group, allocation, r, site) for r in range(len(allocation))]
