"""The worker environment (DESIGN.md contract), built by one pure function so that the local
backend and the Kubernetes operator stamp identical variables on every replica."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

#: Every variable a worker may read; nothing else tells a worker its place.
ENV_VARS = (
    "ADL_JOB",
    "ADL_GROUP",
    "ADL_RANK",
    "ADL_WORLD_SIZE",
    "ADL_LOCAL_RANK",
    "ADL_LOCAL_WORLD_SIZE",
    "ADL_NUM_NODES",
    "ADL_NODE_RANK",
    "ADL_MASTER_ADDR",
    "ADL_MASTER_PORT",
    "ADL_CHECKPOINT_DIR",
    "ADL_API_URL",
    "ADL_TOKEN_FILE",
)


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
    job: str, group: int, allocation: Sequence[str], rank: int, site: WorkerSite
) -> dict[str, str]:
    """The ADL_* variables of replica ``rank`` of ``group``; ``job`` is ``namespace/name``."""
    placement = replica_placement(allocation)
    if not 0 <= rank < len(placement):
        raise ValueError(f"rank {rank} outside a group of {len(placement)} replicas")
    node_rank, local_rank, local_world = placement[rank]
    env = {
        "ADL_JOB": job,
        "ADL_GROUP": str(group),
        "ADL_RANK": str(rank),
        "ADL_WORLD_SIZE": str(len(placement)),
        "ADL_LOCAL_RANK": str(local_rank),
        "ADL_LOCAL_WORLD_SIZE": str(local_world),
        "ADL_NUM_NODES": str(len(node_slots(allocation))),
        "ADL_NODE_RANK": str(node_rank),
        "ADL_MASTER_ADDR": site.master_addr,
        "ADL_MASTER_PORT": str(site.master_port),
        "ADL_CHECKPOINT_DIR": site.checkpoint_dir,
    }
    if site.api_url:
        env["ADL_API_URL"] = site.api_url
    if site.token_file:
        env["ADL_TOKEN_FILE"] = site.token_file
    return env


def group_env(
    job: str, group: int, allocation: Sequence[str], site: WorkerSite
) -> list[dict[str, str]]:
    """The environment of every replica of a group, indexed by rank."""
    return [worker_env(job, group, allocation, r, site) for r in range(len(allocation))]
