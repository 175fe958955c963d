"""Numeric options out of their range are usage errors (exit 2) before anything runs: a demo
with 0 slots used to run with 4, ``top --interval 0`` busy-looped."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from adl.cli.main import app

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("demo", "--slots", "0", "--timeout", "1"), "--slots"),
        (("demo", "--timeout", "-1"), "--timeout"),
        (("top", "--once", "--interval", "0"), "--interval"),
        (("top", "--once", "--interval", "-2"), "--interval"),
        (("logs", "x", "--replica", "-1"), "--replica"),
        (("launch", "--grace", "-1", "--", "true"), "--grace"),
        (("launch", "--master-port", "70000", "--", "true"), "--master-port"),
        (("launch", "--nnodes", "2", "--node-rank", "2", "--", "true"), "--node-rank"),
    ],
)
def test_numbers_out_of_range_are_usage_errors(
    adl_home: Path, tmp_path: Path, args: tuple[str, ...], option: str
) -> None:
    if args[0] == "demo":
        args = (*args, "--home", str(tmp_path / "demo"))
    result = runner.invoke(app, list(args))
    out = " ".join((result.stdout + result.stderr).split())
    assert result.exit_code == 2, out
    assert "Invalid value" in out and option in out, out
    assert not (tmp_path / "demo").exists()  # nothing was started
