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
        nnodes: Annotated[
            int | None, typer.Option("--nnodes", min=1, help="nodes in the job [default: 1]")
        ] = None,
        node_rank: Annotated[
            int | None, typer.Option("--node-rank", min=0, help="[default: 0]")
        ] = None,
        master_addr: Annotated[
            str | None, typer.Option("--master-addr", help="[default: 127.0.0.1]")
        ] = None,
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
        log_dir: Annotated[
            str | None,
            typer.Option("--log-dir", help="write rank N's output to LOG_DIR/rankN.log"),
        ] = None,
        tee: Annotated[
            bool, typer.Option("--tee", help="with --log-dir: also print the output")
        ] = False,
        prefix: Annotated[
            bool | None,
            typer.Option(
                "--prefix/--no-prefix",
                help="start printed lines with [rankN]: (default: when stdout is a terminal)",
            ),
        ] = None,
    ) -> None:
        """Start N local worker processes with the adl worker environment (the ADL_* variables
        and torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT).

        Output is printed (each line prefixed [rankN]: on a terminal), or with --log-dir written
        to LOG_DIR/rankN.log (--tee: both). A worker that fails or stops makes the others stop.
        Exits with the first failure's code, else 143 when the workers were stopped (preempted),
        else 0."""
        from adl.client_lib.launch import Launcher

        cmd = [a for a in ctx.args]
        if cmd and cmd[0] == "--":
            cmd = cmd[1:]
        if not cmd:
            raise typer.BadParameter("give the command after --")
        if tee and log_dir is None:
            raise typer.BadParameter("--tee needs --log-dir")
        if node_rank is not None and node_rank >= (nnodes or 1):
            raise typer.BadParameter(
                f"--node-rank {node_rank} with --nnodes {nnodes or 1}: "
                f"ranks are 0..{(nnodes or 1) - 1}"
            )
        try:
            launcher = Launcher(
                cmd,
                nproc,
                master_addr=master_addr,
                master_port=master_port or None,
                num_nodes=nnodes,
                node_rank=node_rank,
                checkpoint_dir=checkpoint_dir,
                job=job,
                grace_s=grace,
                log_dir=log_dir,
                tee=tee,
                prefix=prefix,
            )
        except ValueError as err:
            raise typer.BadParameter(str(err)) from err
        raise typer.Exit(launcher.run())
