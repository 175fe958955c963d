"""Local launcher: ``python -m adl.client_lib.launch --nproc N -- python train.py ...``.

Starts N worker processes on this machine with the worker environment of the design notes (what
a pod gets from the operator, or torchrun gives its workers), forwards SIGTERM/SIGINT to them, and
returns the worst exit code. When one worker fails, the others are asked to stop (SIGTERM: they
checkpoint and exit 143) and are killed if they have not exited within the grace period, since a
peer blocked in a collective can never finish on its own.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from types import FrameType

EXIT_PREEMPTED = 143
DEFAULT_GRACE_S = 30.0


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
) -> dict[str, str]:
    """The environment of one worker (pure)."""
    env = dict(base)
    env.update(
        ADL_RANK=str(rank),
        ADL_WORLD_SIZE=str(world_size),
        ADL_LOCAL_RANK=str(local_rank),
        ADL_LOCAL_WORLD_SIZE=str(nproc),
        ADL_NUM_NODES=str(num_nodes),
        ADL_MASTER_ADDR=master_addr,
        ADL_MASTER_PORT=str(master_port),
    )
    env.setdefault("ADL_GROUP", "0")
    if checkpoint_dir is not None:
        env["ADL_CHECKPOINT_DIR"] = checkpoint_dir
    if job is not None:
        env["ADL_JOB"] = job
    return env


def exit_code(returncode: int) -> int:
    """A shell-style exit code: death by signal N becomes 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def worst(codes: Sequence[int]) -> int:
    """Failure beats preemption beats success; among failures, the first one."""
    failures = [c for c in codes if c not in (0, EXIT_PREEMPTED)]
    if failures:
        return failures[0]
    return EXIT_PREEMPTED if EXIT_PREEMPTED in codes else 0


class Launcher:
    """N local worker processes as one unit."""

    def __init__(
        self,
        cmd: Sequence[str],
        nproc: int,
        *,
        master_addr: str = "127.0.0.1",
        master_port: int | None = None,
        num_nodes: int = 1,
        node_rank: int = 0,
        checkpoint_dir: str | None = None,
        job: str | None = None,
        grace_s: float = DEFAULT_GRACE_S,
        base_env: Mapping[str, str] | None = None,
    ) -> None:
        if nproc < 1:
            raise ValueError("nproc must be >= 1")
        if not cmd:
            raise ValueError("no command to launch")
        self.cmd = list(cmd)
        self.nproc = nproc
        self.master_addr = master_addr
        self.master_port = master_port or free_port(master_addr)
        self.num_nodes = num_nodes
        self.node_rank = node_rank
        self.checkpoint_dir = checkpoint_dir
        self.job = job
        self.grace_s = grace_s
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.procs: list[subprocess.Popen[bytes]] = []
        self._stopping_since: float | None = None

    def start(self) -> None:
        world = self.nproc * self.num_nodes
        for local_rank in range(self.nproc):
            env = worker_env(
                self.base_env,
                rank=self.node_rank * self.nproc + local_rank,
                local_rank=local_rank,
                nproc=self.nproc,
                world_size=world,
                num_nodes=self.num_nodes,
                master_addr=self.master_addr,
                master_port=self.master_port,
                checkpoint_dir=self.checkpoint_dir,
                job=self.job,
            )
            self.procs.append(subprocess.Popen(self.cmd, env=env))

    def signal_all(self, sig: int) -> None:
        for p in self.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    p.send_signal(sig)

    def stop(self) -> None:
        """Ask every worker to stop (they checkpoint); escalate after the grace period."""
        if self._stopping_since is None:
            self._stopping_since = time.monotonic()
        self.signal_all(signal.SIGTERM)

    def wait(self, poll_s: float = 0.1) -> int:
        while True:
            codes = [p.poll() for p in self.procs]
            if all(c is not None for c in codes):
                return worst([exit_code(c) for c in codes if c is not None])
            if self._stopping_since is None and any(c not in (None, 0) for c in codes):
                self.stop()  # a worker failed or was preempted: the others cannot go on alone
            if (
                self._stopping_since is not None
                and time.monotonic() - self._stopping_since > self.grace_s
            ):
                self.signal_all(signal.SIGKILL)
            time.sleep(poll_s)

    def run(self) -> int:
        previous = {
            sig: signal.signal(sig, self._forward) for sig in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            try:
                self.start()
            except OSError as err:  # not found / not executable: the shell's 127 / 126
                reason = err.strerror or str(err)
                print(f"error: cannot start {self.cmd[0]!r}: {reason}", file=sys.stderr)
                return 126 if isinstance(err, PermissionError) else 127
            return self.wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.signal_all(signal.SIGKILL)

    def _forward(self, signum: int, frame: FrameType | None) -> None:
        self.stop()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m adl.client_lib.launch",
        description="Start N local adl workers (like torchrun): launch --nproc N -- cmd ...",
    )
    p.add_argument("--nproc", type=int, default=1, help="worker processes on this node")
    p.add_argument("--nnodes", type=int, default=1, help="nodes in the job")
    p.add_argument("--node-rank", type=int, default=0, help="this node's index")
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=int, default=0, help="0 picks a free port")
    p.add_argument("--checkpoint-dir", default=None, help="sets ADL_CHECKPOINT_DIR")
    p.add_argument("--job", default=None, help="sets ADL_JOB (namespace/name)")
    p.add_argument("--grace", type=float, default=DEFAULT_GRACE_S, help="seconds before SIGKILL")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- command and its arguments")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    cmd = list(args.cmd)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        build_parser().error("give the command after --")
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
    )
    return launcher.run()


if __name__ == "__main__":
    sys.exit(main())
