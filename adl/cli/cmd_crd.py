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
        from adl.operator.crd import crd_yaml

        text = crd_yaml()
        if not output:
            typer.echo(text, nl=False)
            return
        for path in output:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            typer.echo(f"wrote {path}")
