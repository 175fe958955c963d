"""Local launcher: ``python -m adl.client_lib.launch --nproc N -- python train.py ...``.

Starts N worker processes on this machine with the worker environment of the design notes (what
a pod gets from the operator, or torchrun gives its workers: the ``ADL_*`` variables and
torchrun's ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``,
``MASTER_PORT``) and supervises them with :class:`adl.supervisor.Supervisor`, the same rules as
the local daemon's groups: a rank that fails or stops (143) stops the others, SIGTERM/SIGINT
are forwarded as SIGTERM, SIGKILL after the grace period. Output goes to our stdout/stderr,
each line prefixed ``[rankN]: `` when that is a terminal (``prefix`` forces it either way), or
to ``LOG_DIR/rankN.log`` (and with ``tee`` to both). Exits with the group's code: the first
failure's, else 143 when stopped, else 0.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from adl import contract as C
from adl.contract import exit_code
from adl.supervisor import DEFAULT_GRACE_S, RankSpec, Supervisor

__all__ = ["DEFAULT_GRACE_S", "EXIT_PREEMPTED", "Launcher", "exit_code", "main", "worker_env"]

#: The exit code of a preempted (checkpointed and stopped) worker; the contract's EXIT_STOPPED.
EXIT_PREEMPTED = C.EXIT_STOPPED


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free right now on ``host`` (bind to port 0 and ask the kernel)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def worker_env(
    base: Mapping[str, str],
    *,
    rank: int,
    local_rank: int,
    nproc: int,
    world_size: int,
    num_nodes: int,
    master_addr: str,
    master_port: int,
    checkpoint_dir: str | None = None,
    job: str | None = None,
    node_rank: int | None = None,
) -> dict[str, str]:
    """The environment of one worker (pure): ``base`` plus the ``ADL_*`` variables and their
    torchrun twins. ``node_rank`` defaults to ``rank // nproc`` (the same count on every node)."""
    env = dict(base)
    env.update(
        {
            C.ENV_NODE_RANK: str(rank // nproc if node_rank is None else node_rank),
            C.ENV_RANK: str(rank),
            C.ENV_WORLD_SIZE: str(world_size),
            C.ENV_LOCAL_RANK: str(local_rank),
            C.ENV_LOCAL_WORLD_SIZE: str(nproc),
            C.ENV_NUM_NODES: str(num_nodes),
            C.ENV_MASTER_ADDR: master_addr,
            C.ENV_MASTER_PORT: str(master_port),
        }
    )
    env.setdefault(C.ENV_GROUP, "0")
    if checkpoint_dir is not None:
        env[C.ENV_CHECKPOINT_DIR] = checkpoint_dir
    if job is not None:
        env[C.ENV_JOB] = job
    env.update(C.torch_env(env))  # scripts written for torchrun read these
    return env


def worst(codes: Sequence[int]) -> int:
    """Failure beats preemption beats success; among failures, the first one."""
    failures = [c for c in codes if c not in C.CLEAN_EXITS]
    if failures:
        return failures[0]
    return C.EXIT_STOPPED if C.EXIT_STOPPED in codes else C.EXIT_OK


def _int(env: Mapping[str, str], key: str) -> int | None:
    raw = env.get(key)
    try:
        return int(raw) if raw else None
    except ValueError as exc:
        raise ValueError(f"{key} must be an integer, got {raw!r}") from exc


class Launcher:
    """N local worker processes as one unit.

    Started where the controller already placed this node (a Kubernetes pod running several
    replicas gets the environment of its first replica), the options left out come from that
    environment: the ranks follow on from the pod's ``ADL_RANK`` in a world of
    ``ADL_WORLD_SIZE``, around ``ADL_MASTER_ADDR:ADL_MASTER_PORT``. Otherwise this machine is
    node ``node_rank`` of ``num_nodes`` with ``nproc`` ranks each (defaults: a one-node job
    around a free local port)."""

    def __init__(
        self,
        cmd: Sequence[str],
        nproc: int,
        *,
        master_addr: str | None = None,
        master_port: int | None = None,
        num_nodes: int | None = None,
        node_rank: int | None = None,
        checkpoint_dir: str | None = None,
        job: str | None = None,
        grace_s: float = DEFAULT_GRACE_S,
        base_env: Mapping[str, str] | None = None,
        log_dir: str | Path | None = None,
        tee: bool = False,
        prefix: bool | None = None,
    ) -> None:
        if nproc < 1:
            raise ValueError("nproc must be >= 1")
        if not cmd:
            raise ValueError("no command to launch")
        self.cmd = list(cmd)
        self.nproc = nproc
        self.base_env = dict(os.environ if base_env is None else base_env)
        placed = self._placed_node(self.base_env, nproc)
        if placed is not None and num_nodes is None and node_rank is None:
            self.first_rank, self.world_size, self.num_nodes, self.node_rank = placed
        else:
            self.num_nodes = 1 if num_nodes is None else num_nodes
            self.node_rank = 0 if node_rank is None else node_rank
            self.first_rank, self.world_size = self.node_rank * nproc, nproc * self.num_nodes
        if placed is not None:
            master_addr = master_addr or self.base_env.get(C.ENV_MASTER_ADDR)
            master_port = master_port or _int(self.base_env, C.ENV_MASTER_PORT)
        self.master_addr = master_addr or "127.0.0.1"
        self.master_port = master_port or free_port(self.master_addr)
        self.checkpoint_dir = checkpoint_dir
        self.job = job
        self.grace_s = grace_s
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.tee = tee
        self.prefix = prefix

    @staticmethod
    def _placed_node(env: Mapping[str, str], nproc: int) -> tuple[int, int, int, int] | None:
        """(first rank, world size, nodes, node rank) from the environment of this node's first
        replica, as the controller stamps it; None when there is none."""
        world, rank = _int(env, C.ENV_WORLD_SIZE), _int(env, C.ENV_RANK)
        if world is None or rank is None:
            return None
        here = _int(env, C.ENV_LOCAL_WORLD_SIZE)
        if here is not None and here != nproc:
            raise ValueError(
                f"--nproc {nproc}, but {C.ENV_LOCAL_WORLD_SIZE} says this node runs {here} replicas"
            )
        first = rank - (_int(env, C.ENV_LOCAL_RANK) or 0)
        nodes = _int(env, C.ENV_NUM_NODES) or 1
        return first, world, nodes, _int(env, C.ENV_NODE_RANK) or 0

    def ranks(self) -> list[RankSpec]:
        """What to start: one spec per local worker, ranked from ``first_rank`` on."""
        out = []
        for local_rank in range(self.nproc):
            rank = self.first_rank + local_rank
            env = worker_env(
                self.base_env,
                rank=rank,
                local_rank=local_rank,
                nproc=self.nproc,
                world_size=self.world_size,
                num_nodes=self.num_nodes,
                master_addr=self.master_addr,
                master_port=self.master_port,
                checkpoint_dir=self.checkpoint_dir,
                job=self.job,
                node_rank=self.node_rank,
            )
            log = str(self.log_dir / f"rank{rank}.log") if self.log_dir is not None else None
            out.append(RankSpec(rank, self.cmd, env, log=log))
        return out

    def run(self) -> int:
        """Run the workers to their end; the group's exit code (see the module docstring)."""
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        supervisor = Supervisor(
            self.ranks(),
            grace_s=self.grace_s,
            to_terminal=self.log_dir is None or self.tee,
            prefix=self.prefix,
        )
        outcome = supervisor.run()
        if outcome.start_error:
            print(f"error: cannot start {self.cmd[0]!r}: {outcome.start_error}", file=sys.stderr)
        return outcome.exit_code


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m adl.client_lib.launch",
        description="Start N local adl workers (like torchrun): launch --nproc N -- cmd ...",
    )
    p.add_argument("--nproc", type=int, default=1, help="worker processes on this node")
    p.add_argument("--nnodes", type=int, default=None, help="nodes in the job (default 1)")
    p.add_argument("--node-rank", type=int, default=None, help="this node's index (default 0)")
    p.add_argument("--master-addr", default=None, help="default 127.0.0.1")
    p.add_argument("--master-port", type=int, default=0, help="0 picks a free port")
    p.add_argument("--checkpoint-dir", default=None, help="sets ADL_CHECKPOINT_DIR")
    p.add_argument("--job", default=None, help="sets ADL_JOB (namespace/name)")
    p.add_argument("--grace", type=float, default=DEFAULT_GRACE_S, help="seconds before SIGKILL")
    p.add_argument("--log-dir", default=None, help="write rank N's output to LOG_DIR/rankN.log")
    p.add_argument("--tee", action="store_true", help="with --log-dir: print the output too")
    p.add_argument(
        "--prefix",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="prefix printed lines with [rankN]: (default: when stdout is a terminal)",
    )
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- command and its arguments")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        build_parser().error("give the command after --")
    if args.tee and args.log_dir is None:
        build_parser().error("--tee needs --log-dir")
    try:
        launcher = Launcher(
            cmd,
            args.nproc,
            master_addr=args.master_addr,
            master_port=args.master_port or None,
            num_nodes=args.nnodes,
            node_rank=args.node_rank,
            checkpoint_dir=args.checkpoint_dir,
            job=args.job,
            grace_s=args.grace,
            log_dir=args.log_dir,
            tee=args.tee,
            prefix=args.prefix,
        )
    except ValueError as err:
        build_parser().error(str(err))
    return launcher.run()


if __name__ == "__main__":
    sys.exit(main())
