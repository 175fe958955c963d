"""``adl launch --nproc N -- python train.py ...``: run N local workers like torchrun."""

from __future__ import annotations

from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    @app.command(
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        options_metavar="[OPTIONS] -- COMMAND [ARGS]...",
    )
    def launch(
        ctx: typer.Context,
        nproc: Annotated[int, typer.Option("--nproc", min=1, help="workers on this node")] = 1,
        nnodes: Annotated[int, typer.Option("--nnodes", min=1, help="nodes in the job")] = 1,
        node_rank: Annotated[int, typer.Option("--node-rank", min=0)] = 0,
        master_addr: Annotated[str, typer.Option("--master-addr")] = "127.0.0.1",
        master_port: Annotated[
            int, typer.Option("--master-port", min=0, max=65535, help="0 picks a free port")
        ] = 0,
        checkpoint_dir: Annotated[
            str | None, typer.Option("--checkpoint-dir", help="sets ADL_CHECKPOINT_DIR")
        ] = None,
        job: Annotated[str | None, typer.Option("--job", help="sets ADL_JOB (ns/name)")] = None,
        grace: Annotated[
            float, typer.Option("--grace", min=0, help="seconds before SIGKILL")
        ] = 30.0,
    ) -> None:
        """Start N local worker processes with the adl worker environment.

        Exits with the worst worker exit code (143 when preempted)."""
        from adl.client_lib.launch import Launcher

        cmd = [a for a in ctx.args]
        if cmd and cmd[0] == "--":
            cmd = cmd[1:]
        if not cmd:
            raise typer.BadParameter("give the command after --")
        if node_rank >= nnodes:
            raise typer.BadParameter(
                f"--node-rank {node_rank} with --nnodes {nnodes}: ranks are 0..{nnodes - 1}"
            )
        code = Launcher(
            cmd,
            nproc,
            master_addr=master_addr,
            master_port=master_port or None,
            num_nodes=nnodes,
            node_rank=node_rank,
            checkpoint_dir=checkpoint_dir,
            job=job,
            grace_s=grace,
        ).run()
        raise typer.Exit(code)
