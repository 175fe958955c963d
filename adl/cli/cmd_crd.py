"""``adl crd``: print or write the AdaptiveJob CRD generated from adl.models."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def register(app: typer.Typer) -> None:
    @app.command()
    def crd(
        output: Annotated[
            list[Path] | None,
            typer.Option("--output", "-o", help="write the CRD to this file (repeatable)"),
        ] = None,
    ) -> None:
        """Print the AdaptiveJob CustomResourceDefinition (or write it with --output)."""
        from adl.cli.console import fail
        from adl.cli.options import check_output_path, write_output
        from adl.operator.crd import crd_yaml

        try:
            for path in output or []:
                check_output_path(path, "--output")
        except ValueError as err:
            raise fail(str(err), 2) from None
        text = crd_yaml()
        if not output:
            typer.echo(text, nl=False)
            return
        for path in output:
            try:
                write_output(path, text, "--output")
            except ValueError as err:
                raise fail(str(err)) from None
            typer.echo(f"wrote {path}")
