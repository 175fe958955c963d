"""Reading the worker environment and joining the job: ``adl.init_process_group``."""

from __future__ import annotations

import atexit
import ipaddress
import logging
import math
import os
import socket
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from adl import contract as C
from adl.client_lib import checkpoint
from adl.client_lib.context import JobContext, WorkerEnv, get_context, has_context, set_context
from adl.client_lib.heartbeat import HeartbeatSender
from adl.client_lib.preemption import PreemptionMonitor

log = logging.getLogger(__name__)

_DEFAULT_TIMEOUT_S = 600.0
_EXIT_DRAIN_S = 10.0  # a peer that already died must not hold this process at exit


def _int(environ: Mapping[str, str], key: str, default: int) -> int:
    raw = environ.get(key)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ValueError(f"{key} must be an integer, got {raw!r}") from exc


def _path(environ: Mapping[str, str], key: str) -> Path | None:
    raw = environ.get(key)
    return Path(raw) if raw else None


def _time(environ: Mapping[str, str], key: str) -> float | None:
    """A wall time in Unix seconds; None when unset or unreadable (it only refines a
    measurement: a bad value must not stop the job)."""
    try:
        value = float(environ.get(key) or "nan")
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def read_worker_env(environ: Mapping[str, str] | None = None) -> WorkerEnv:
    """Parse the ``ADL_*`` variables of the worker contract; all absent means standalone."""
    e = os.environ if environ is None else environ
    world = _int(e, C.ENV_WORLD_SIZE, 1)
    rank = _int(e, C.ENV_RANK, 0)
    local_world = _int(e, C.ENV_LOCAL_WORLD_SIZE, world)
    local_rank = _int(e, C.ENV_LOCAL_RANK, rank % max(local_world, 1))
    env = WorkerEnv(
        job=e.get(C.ENV_JOB) or None,
        group=_int(e, C.ENV_GROUP, 0),
        rank=rank,
        world_size=world,
        local_rank=local_rank,
        local_world_size=local_world,
        num_nodes=_int(e, C.ENV_NUM_NODES, 1),
        master_addr=e.get(C.ENV_MASTER_ADDR) or "127.0.0.1",
        master_port=_int(e, C.ENV_MASTER_PORT, 0) or None,
        checkpoint_dir=_path(e, C.ENV_CHECKPOINT_DIR),
        api_url=e.get(C.ENV_API_URL) or None,
        token_file=_path(e, C.ENV_TOKEN_FILE),
        scheduled_since=_time(e, C.ENV_SCHEDULED_SINCE),
    )
    _validate(env)
    return env


def _validate(env: WorkerEnv) -> None:
    if env.world_size < 1 or not 0 <= env.rank < env.world_size:
        raise ValueError(f"need 0 <= ADL_RANK < ADL_WORLD_SIZE, got {env.rank}/{env.world_size}")
    if not 0 <= env.local_rank < env.local_world_size:
        raise ValueError(
            f"need 0 <= ADL_LOCAL_RANK < ADL_LOCAL_WORLD_SIZE, "
            f"got {env.local_rank}/{env.local_world_size}"
        )
    if env.num_nodes < 1 or env.num_nodes > env.world_size:
        raise ValueError(f"ADL_NUM_NODES must be in [1, world size], got {env.num_nodes}")
    if env.world_size > 1 and env.master_port is None:
        raise ValueError("ADL_MASTER_PORT is required when ADL_WORLD_SIZE > 1")


def is_loopback(host: str) -> bool:
    """``host`` names this machine's loopback (every rank runs on this one machine)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _loopback_store(env: WorkerEnv, timeout: timedelta) -> dist.TCPStore | None:
    """The rendezvous store for a loopback master address, listening on that address only.

    torch's TCPStore is unauthenticated and its server binds every interface, whatever host
    it is given (``*:PORT``): anyone on the network could read and write the job's keys. When
    all ranks are on this machine (the local backend, a one-machine ``adl launch``), rank 0
    binds the listening socket itself and hands it to the store. None for any other address
    (on Kubernetes rank 0's pod is reached through a Service; its NetworkPolicy guards it)."""
    if not is_loopback(env.master_addr) or env.master_port is None:
        return None
    host = "127.0.0.1" if env.master_addr == "localhost" else env.master_addr
    if env.rank != 0:
        return dist.TCPStore(host, env.master_port, env.world_size, False, timeout=timeout)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as torch's own listener
        sock.bind((host, env.master_port))
        sock.listen(socket.SOMAXCONN)
    except OSError:
        sock.close()
        raise
    return dist.TCPStore(
        host,
        env.master_port,
        env.world_size,
        True,
        timeout=timeout,
        master_listen_fd=sock.detach(),  # the store owns the descriptor from here
    )


def _gloo_on_loopback() -> None:
    """Gloo's own listening sockets (one per peer) bind the address this host's name resolves
    to, often a network interface: on one machine, keep them on the loopback interface too
    (unless the user chose an interface)."""
    if "GLOO_SOCKET_IFNAME" in os.environ:
        return
    names = [name for _, name in socket.if_nameindex()]
    if "lo" in names:
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"


def default_backend() -> str:
    """nccl when this process has a GPU, gloo otherwise."""
    return "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"


def init_process_group(
    backend: str | None = None,
    *,
    timeout_s: float | None = None,
    environ: Mapping[str, str] | None = None,
) -> JobContext:
    """Join the job described by the environment and return the process-wide context.

    Rendezvous goes through torch.distributed's TCP store at ADL_MASTER_ADDR:ADL_MASTER_PORT
    (rank 0 hosts it). With one process nothing is initialized and the script runs standalone.
    The last checkpoint in ADL_CHECKPOINT_DIR, if any, is read now and handed to each state as
    it registers. Calling this twice returns the existing context.
    """
    if has_context():
        return get_context()
    env = read_worker_env(environ)
    e = os.environ if environ is None else environ
    if timeout_s is None:
        timeout_s = float(e.get(C.ENV_DIST_TIMEOUT_S) or _DEFAULT_TIMEOUT_S)
    stop_group: dist.ProcessGroup | None = None
    cpu_group: dist.ProcessGroup | None = None
    if not env.standalone:
        chosen = backend or default_backend()
        if chosen == "nccl":
            torch.cuda.set_device(env.local_rank)
        timeout = timedelta(seconds=timeout_s)
        store = _loopback_store(env, timeout)
        if store is not None:
            _gloo_on_loopback()
            dist.init_process_group(
                chosen, store=store, rank=env.rank, world_size=env.world_size, timeout=timeout
            )
        else:
            dist.init_process_group(
                chosen,
                init_method=f"tcp://{env.master_addr}:{env.master_port}",
                rank=env.rank,
                world_size=env.world_size,
                timeout=timeout,
            )
        # Separate CPU groups: one for the asynchronous stop flag, one for small control
        # collectives, so neither interleaves with the gradient traffic of the default group.
        stop_group = dist.new_group(backend="gloo")
        cpu_group = dist.new_group(backend="gloo")
        log.info("joined job %s as rank %d/%d", env.job, env.rank, env.world_size)
    # fence older groups off the directory before reading it (a single replica too: it is a
    # group of its own; no ADL_GROUP, as in a plain run, claims nothing)
    checkpoint.claim(env.checkpoint_dir, env.group)
    restored, saved_at, saved_until = checkpoint.load_with_times(env.checkpoint_dir)
    ctx = JobContext(env, restored)
    ctx.restart.scheduled(env.scheduled_since)
    if restored is not None:
        ctx.restart.restored(saved_at, saved_until)
    ctx.cpu_group = cpu_group
    ctx.preemption = PreemptionMonitor.from_env(env, group=stop_group, environ=e)
    ctx.preemption.install()
    ctx.heartbeat = HeartbeatSender.from_env(env, ctx.preemption.progress, e)
    if ctx.heartbeat is not None:
        ctx.heartbeat.start()
    set_context(ctx)
    if not env.standalone:
        # Scripts rarely tear the group down themselves; leaving an asynchronous stop-flag
        # reduction pending at interpreter exit makes gloo abort the process (SIGABRT).
        atexit.register(shutdown)
    return ctx


def context() -> JobContext:
    """The process-wide context, joining the job (standalone when unset) on first use."""
    return get_context() if has_context() else init_process_group()


def shutdown() -> None:
    """Leave the job: stop watching for preemption, destroy the group, forget the context."""
    if not has_context():
        return
    ctx = get_context()
    if ctx.heartbeat is not None:
        ctx.heartbeat.stop()
    if ctx.preemption is not None:
        ctx.preemption.drain(timeout_s=_EXIT_DRAIN_S)
        ctx.preemption.uninstall()
    # a periodic checkpoint still being written commits: every rank's share first (they use
    # the group, which is torn down below), then rank 0's file
    ctx.wait_checkpoint_parts()
    if ctx.checkpoint_writer is not None:
        try:
            ctx.checkpoint_writer.wait()
        except Exception as err:  # logged when it failed; the one before it stays
            log.debug("background checkpoint write failed: %s", err)
    if dist.is_initialized():
        _exit_barrier(ctx.cpu_group)
        dist.destroy_process_group()
    set_context(None)


def _exit_barrier(group: dist.ProcessGroup | None) -> None:
    """Wait (briefly) until every rank is leaving: a rank that tears its gloo groups down while
    a peer still uses them can make that peer's gloo thread abort the process at exit
    ("terminate called without an active exception", exit -6, seen once in CI). A peer that
    already died only costs the timeout."""
    if group is None:
        return
    try:
        dist.monitored_barrier(group=group, timeout=timedelta(seconds=_EXIT_DRAIN_S))
    except Exception as err:  # a dead peer, or the group is already gone: leave anyway
        log.debug("exit barrier skipped: %s", err)
