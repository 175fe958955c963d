"""Entry point of the ``adl`` command. Each command group lives in its own module and registers
itself on ``app``; heavy imports happen inside commands so ``adl --help`` stays fast."""

from __future__ import annotations

import typer

from adl import __version__

app = typer.Typer(
    name="adl",
    help="Elastic deep-learning training: submit jobs, watch them, simulate schedulers.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def main() -> None:
    """adl: elastic deep-learning training scheduler."""


@app.command()
def version() -> None:
    """Print the adl version."""
    typer.echo(__version__)


def _register() -> None:
    """Attach the command groups that exist (each module adds its commands to ``app``)."""
    import importlib
    import pkgutil

    import adl.cli as pkg

    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name.startswith("cmd_"):
            importlib.import_module(f"adl.cli.{info.name}").register(app)


_register()

if __name__ == "__main__":
    app()
