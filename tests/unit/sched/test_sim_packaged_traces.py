"""The measured traces ship inside the package: any install can simulate, with attribution."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from adl.sched.sim.traces import PACKAGED_TRACES, default_traces_dir, load_traces
from adl.sched.sim.workload import workload_paths

REPO = Path(__file__).resolve().parents[3]
APPS = {"bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"}


def test_default_is_the_packaged_copy_unless_the_environment_overrides(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("ADL_TRACES", raising=False)
    assert default_traces_dir() == PACKAGED_TRACES
    assert PACKAGED_TRACES.is_relative_to(REPO / "adl")  # inside the package, not beside it
    assert set(load_traces()) == APPS
    monkeypatch.setenv("ADL_TRACES", str(tmp_path))
    assert default_traces_dir() == tmp_path


def test_the_apache_notice_travels_with_the_data() -> None:
    notice = (PACKAGED_TRACES / "NOTICE").read_text()
    assert "Apache License, Version 2.0" in notice and "petuum/adaptdl" in notice
    assert "Apache License" in (PACKAGED_TRACES / "LICENSE").read_text()
    assert "Pollux" in (PACKAGED_TRACES / "README.md").read_text()


def test_published_workloads_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no such files here: the names mean the packaged copies
    assert workload_paths("workload-2") == [PACKAGED_TRACES / "workloads" / "workload-2.csv"]
    assert [p.stem for p in workload_paths("workloads")] == [f"workload-{i}" for i in range(1, 5)]
    with pytest.raises(FileNotFoundError):
        workload_paths("workload-9")
    (tmp_path / "workload-2.csv").write_text("mine")  # a file of that name wins
    assert workload_paths("workload-2.csv") == [Path("workload-2.csv")]


def test_a_built_wheel_carries_every_trace_file(tmp_path: Path) -> None:
    # A non-editable install gets exactly what the wheel holds, so check the wheel itself.
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    subprocess.run(
        [*pip, "-w", str(tmp_path), str(REPO)],
        check=True,
        timeout=300,
    )
    (wheel,) = tmp_path.glob("adl-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    want = {
        "adl/sched/sim/data/pollux/" + p.relative_to(PACKAGED_TRACES).as_posix()
        for p in PACKAGED_TRACES.rglob("*")
        if p.is_file()
    }
    assert len(want) > 50 and want <= names, sorted(want - names)[:5]
