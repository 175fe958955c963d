"""Output paths (``--json``, ``--plot``, ``--plot-jct``, ``crd -o``) are checked before the
work: one error line and exit 2, not a traceback after minutes of replay or a whole demo."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cmd_simulate import TRACES, small_workload
from typer.testing import CliRunner

from adl.cli.main import app


@pytest.mark.parametrize("where", ["dir", "under-file"])
@pytest.mark.parametrize(
    "command",
    [
        ["simulate", "{wl}", "-p", "fifo", "--traces", str(TRACES), "--json", "{out}"],
        ["simulate", "{wl}", "-p", "fifo", "--traces", str(TRACES), "--plot", "{out}.png"],
        ["simulate", "{wl}", "-p", "fifo", "--traces", str(TRACES), "--plot-jct", "{out}.png"],
        ["demo", "--timeout", "1", "--home", "{tmp}/demo-home", "--json", "{out}"],
        ["crd", "-o", "{tmp}/ok.yaml", "-o", "{out}"],
    ],
)
def test_an_unwritable_output_is_refused_up_front(
    tmp_path: Path, command: list[str], where: str
) -> None:
    wl = small_workload(tmp_path / "small.csv")
    if where == "dir":
        out = tmp_path / "a-dir"
        out.mkdir()
        if command[-1] == "{out}.png":
            out = tmp_path / "a-dir.png"
            out.mkdir()
            command = [*command[:-1], "{out}"]
        why = "is a directory"
    else:
        out = wl / "x.json"  # small.csv is a file
        why = "a file is in its path"
    argv = [a.format(wl=wl, out=out, tmp=tmp_path) for a in command]
    res = CliRunner().invoke(app, argv)
    text = " ".join(res.output.split())
    assert res.exit_code == 2, text
    assert why in text and str(out) in text, text
    assert res.exception is None or isinstance(res.exception, SystemExit), text
    # nothing was done first
    assert "simulated in" not in text
    assert not (tmp_path / "demo-home").exists()
    assert not (tmp_path / "ok.yaml").exists()


def test_missing_parent_directories_are_made(tmp_path: Path) -> None:
    wl = small_workload(tmp_path / "small.csv")
    out = tmp_path / "new" / "dir" / "s.json"
    res = CliRunner().invoke(
        app, ["simulate", str(wl), "-p", "fifo", "--traces", str(TRACES), "--json", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert out.exists()
    crd = tmp_path / "more" / "crd.yaml"
    assert CliRunner().invoke(app, ["crd", "-o", str(crd)]).exit_code == 0
    assert "kind: CustomResourceDefinition" in crd.read_text()
