"""``tests/cluster/build_assets.sh``, the control plane's build, against a stub ``go``.

Runs started together on one machine share one build under the cache's lock; the cache never
holds a partial binary, whether a build finishes, is interrupted or was left half-done by an
older version of the script. The stub ``go`` writes half of each binary, then waits at a gate
(an flock the test holds) before writing the rest, so a test decides when a build may go on:
overlap and interruptions happen at known points, not after a guessed sleep.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

CLUSTER_DIR = Path(__file__).resolve().parents[2] / "cluster"
SCRIPT = CLUSTER_DIR / "build_assets.sh"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
WAIT_S = 60.0  # a bound on each wait for an event, never a pause

STUB_GO = """\
import fcntl, json, os, sys

args = sys.argv[1:]
with open(os.environ["STUB_GO_CALLS"], "a") as calls:
    calls.write(json.dumps(args) + "\\n")
if args[:2] == ["mod", "download"] and args[-1].startswith("sigs.k8s.io/kueue@"):
    moddir = os.path.abspath("kueue-module")
    os.makedirs(os.path.join(moddir, "charts", "kueue"), exist_ok=True)
    with open(os.path.join(moddir, "charts", "kueue", "Chart.yaml"), "w") as f:
        f.write("name: kueue\\n")
    print(json.dumps({"Path": "sigs.k8s.io/kueue", "Dir": moddir}, indent="\\t"))
elif args[:2] == ["mod", "download"] and args[-1].startswith("sigs.k8s.io/karpenter@"):
    moddir = os.path.abspath("karpenter-module")
    for sub, name in (("kwok/charts/crds", "karpenter.sh_nodepools.yaml"),
                      ("kwok/charts/crds", "karpenter.sh_nodeclaims.yaml"),
                      ("kwok/apis/crds", "karpenter.kwok.sh_kwoknodeclasses.yaml")):
        os.makedirs(os.path.join(moddir, sub), exist_ok=True)
        with open(os.path.join(moddir, sub, name), "w") as f:
            f.write(f"kind: CustomResourceDefinition # {name}\\n")
    print(json.dumps({"Path": "sigs.k8s.io/karpenter", "Dir": moddir}, indent="\\t"))
elif args[0] == "install" and args[-1].startswith("sigs.k8s.io/karpenter/kwok@"):
    out = os.path.join(os.environ["GOBIN"], "kwok")  # named after its package, as go does
    os.makedirs(os.environ["GOBIN"], exist_ok=True)
    with open(out, "w") as binary:
        binary.write(f"#!/bin/sh\\necho karpenter {os.environ.get('GOTOOLCHAIN')}\\n")
    os.chmod(out, 0o755)
elif args[0] == "install":
    out = os.path.join(os.environ["GOBIN"], "kueue")
    with open(out, "w") as binary:
        binary.write("#!/bin/sh\\necho kueue\\n")
    os.chmod(out, 0o755)
elif args[:2] == ["mod", "download"]:
    modfile = os.path.abspath("kubernetes.go.mod")
    with open(modfile, "w") as f:
        f.write("module k8s.io/kubernetes\\n\\nreplace (\\n")
        f.write("\\tk8s.io/api => ./staging/src/k8s.io/api\\n)\\n")
    doc = {"Path": "k8s.io/kubernetes", "GoMod": modfile, "Version": "v1.0.0"}
    print(json.dumps(doc, indent="\\t"))
elif args[0] == "build":
    out = args[args.index("-o") + 1]
    with open(out, "w") as binary:
        binary.write("#!/bin/sh\\n")
        binary.flush()
        print(f"stub go: pid {os.getpid()} wrote half of {out}", file=sys.stderr, flush=True)
        with open(os.environ["STUB_GO_GATE"]) as gate:
            fcntl.flock(gate, fcntl.LOCK_SH)
        binary.write("echo complete\\n")
    os.chmod(out, 0o755)
elif args[:2] not in (["mod", "init"], ["mod", "edit"]) and args[0] != "get":
    sys.exit(f"stub go: unexpected arguments {args}")
"""


def _pins() -> dict[str, str]:
    return dict(
        line.split("=", 1)  # type: ignore[misc]
        for line in (CLUSTER_DIR / "versions.env").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )


def _entry_name() -> str:
    pins = _pins()
    return f"k8s-{pins['K8S_VERSION']}_etcd-{pins['ETCD_VERSION']}"


@dataclass
class Stub:
    """An empty cache and a stub ``go`` first on PATH; ``env`` runs the script against them."""

    env: dict[str, str]
    cache: Path
    out: Path
    calls: Path

    def built(self) -> list[str]:
        """The binaries the stub was asked to build, one entry per ``go build``, sorted."""
        if not self.calls.exists():
            return []
        names = []
        for line in self.calls.read_text().splitlines():
            args = json.loads(line)
            if args[0] == "build":
                names.append(Path(args[args.index("-o") + 1]).name)
        return sorted(names)

    def assert_complete(self) -> None:
        """The cache holds the four complete binaries, its lock file, and nothing else."""
        assert sorted(p.name for p in self.cache.iterdir()) == [
            self.out.name,
            f"{self.out.name}.lock",
        ]
        assert sorted(p.name for p in self.out.iterdir()) == sorted(BINARIES)
        for name in BINARIES:
            binary = self.out / name
            assert os.access(binary, os.X_OK)
            assert binary.read_text() == "#!/bin/sh\necho complete\n"
        assert not list(self.cache.rglob("*.tmp"))

    def assert_nothing_built(self) -> None:
        """Only the lock file: no cache entry, no staging directory, no partial binary."""
        assert [p.name for p in self.cache.iterdir()] == [f"{self.out.name}.lock"]


class Gate:
    """Held by the test (an exclusive flock) until ``open``; each stub build waits for it."""

    def __init__(self, path: Path) -> None:
        path.touch()
        self._file = path.open()
        fcntl.flock(self._file, fcntl.LOCK_EX)

    def open(self) -> None:
        fcntl.flock(self._file, fcntl.LOCK_UN)

    def close(self) -> None:
        self._file.close()


@pytest.fixture
def stub(tmp_path: Path) -> Stub:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    go = bin_dir / "go"
    go.write_text(f"#!{sys.executable}\n{STUB_GO}")
    go.chmod(0o755)
    cache = tmp_path / "cache"
    # no prebuilt binaries of any component (ADL_K8S_ASSETS, ADL_KUEUE_ASSETS, ...)
    env = {k: v for k, v in os.environ.items() if not k.endswith("_ASSETS")}
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        ADL_K8S_CACHE=str(cache),
        STUB_GO_CALLS=str(tmp_path / "go-calls.jsonl"),
        STUB_GO_GATE=str(tmp_path / "gate"),
    )
    return Stub(env, cache, cache / _entry_name(), tmp_path / "go-calls.jsonl")


@pytest.fixture
def gate(stub: Stub) -> Iterator[Gate]:
    held = Gate(Path(stub.env["STUB_GO_GATE"]))
    yield held
    held.close()


@contextlib.contextmanager
def _sigint_deliverable() -> Iterator[None]:
    """A child started in here gets SIGINT's default disposition, as from a terminal, even when
    this process ignores SIGINT (started in the background), which bash could not undo."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        yield
        return
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


class Run:
    """One ``build_assets.sh`` process; its stderr lines are collected as they come and
    announced on ``seen``."""

    def __init__(self, stub: Stub, seen: threading.Condition) -> None:
        with _sigint_deliverable():
            self.proc = subprocess.Popen(
                ["bash", str(SCRIPT)],
                env=stub.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        self.lines: list[str] = []
        self._seen = seen
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._seen:
                self.lines.append(line.rstrip("\n"))
                self._seen.notify_all()

    def says(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    def line(self, text: str) -> str:
        return next(line for line in self.lines if text in line)

    def finish(self) -> tuple[int, str]:
        """(exit code, last line of stdout) once it has ended."""
        returncode = self.proc.wait(timeout=WAIT_S)
        self._reader.join(timeout=WAIT_S)
        assert self.proc.stdout is not None
        stdout = self.proc.stdout.read().splitlines()
        return returncode, stdout[-1] if stdout else ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def wait_until(seen: threading.Condition, predicate: Callable[[], bool], runs: list[Run]) -> None:
    with seen:
        if not seen.wait_for(predicate, timeout=WAIT_S):
            pytest.fail(
                "never happened; stderr:\n" + "\n---\n".join("\n".join(r.lines) for r in runs)
            )


def test_two_runs_started_together_build_once_and_both_get_the_binaries(
    stub: Stub, gate: Gate
) -> None:
    seen = threading.Condition()
    runs = [Run(stub, seen), Run(stub, seen)]
    try:
        # one run is inside its first `go build` (held at the gate) while the other waits for
        # the lock: the two runs overlap for certain
        wait_until(
            seen,
            lambda: (
                any(r.says("wrote half of") for r in runs)
                and any(r.says("waiting for it") for r in runs)
            ),
            runs,
        )
        gate.open()
        results = [r.finish() for r in runs]
    finally:
        for r in runs:
            r.kill()
    assert [code for code, _ in results] == [0, 0], [r.lines for r in runs]
    assert results[0][1] == results[1][1] == str(stub.out)
    assert stub.built() == sorted(BINARIES)  # each binary built exactly once
    stub.assert_complete()
    builder, waiter = sorted(runs, key=lambda r: r.says("waiting for it"))
    assert waiter.says(f"the other run built it; reusing {stub.out}")
    for name in BINARIES:  # progress: each binary, with the seconds since the start
        assert any(
            line.startswith("[build_assets ") and f"building {name} " in line and "done in" in line
            for line in builder.lines
        ), builder.lines
    assert builder.says("built in ")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_build_leaves_nothing_partial(
    stub: Stub, gate: Gate, sig: signal.Signals
) -> None:
    seen = threading.Condition()
    run = Run(stub, seen)
    try:
        wait_until(seen, lambda: run.says("wrote half of"), [run])
        pid_text, _, half = run.line("wrote half of").partition(" wrote half of ")
        half_written = Path(half)
        assert half_written.read_text() == "#!/bin/sh\n"  # a partial binary exists, in staging
        assert half_written.parent.name.startswith(f".{stub.out.name}.build.")
        run.proc.send_signal(sig)
        returncode, printed = run.finish()
    finally:
        run.kill()
    assert returncode == 128 + sig
    assert printed == ""
    stub.assert_nothing_built()
    with pytest.raises(ProcessLookupError):  # the build it ran was stopped, not orphaned
        os.kill(int(pid_text.rsplit(" ", 1)[1]), 0)

    gate.open()  # the next run builds everything from scratch
    again = Run(stub, threading.Condition())
    try:
        assert again.finish() == (0, str(stub.out))
    finally:
        again.kill()
    stub.assert_complete()


def test_leftovers_of_an_older_script_or_a_killed_run_are_replaced(stub: Stub, gate: Gate) -> None:
    # what the unlocked script left when two runs built at once: a finished binary beside a
    # half-written one, and what a run killed with kill -9 leaves: its staging directory
    stub.out.mkdir(parents=True)
    (stub.out / "kube-apiserver").write_text("#!/bin/sh\necho complete\n")
    (stub.out / "kube-apiserver").chmod(0o755)
    (stub.out / "kube-controller-manager.tmp").write_text("#!/bin/sh\n")
    killed = stub.cache / f".{stub.out.name}.build.AbC123"
    killed.mkdir()
    (killed / "etcd").write_text("#!/bin/sh\n")
    gate.open()
    run = Run(stub, threading.Condition())
    try:
        assert run.finish() == (0, str(stub.out))
    finally:
        run.kill()
    assert stub.built() == sorted(BINARIES)
    stub.assert_complete()


def _controlplane(monkeypatch: pytest.MonkeyPatch, stub: Stub) -> Any:
    """``tests/cluster/controlplane.py``, the pytest side of the build, against the stub."""
    for key in ("PATH", "ADL_K8S_CACHE", "STUB_GO_CALLS", "STUB_GO_GATE"):
        monkeypatch.setenv(key, stub.env[key])
    monkeypatch.delenv("ADL_K8S_ASSETS", raising=False)
    monkeypatch.syspath_prepend(str(CLUSTER_DIR))
    return importlib.import_module("controlplane")


def test_the_cluster_fixture_shows_progress_and_waits_for_another_runs_build(
    stub: Stub, gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    controlplane = _controlplane(monkeypatch, stub)
    gate.open()
    stub.cache.mkdir()
    other = (stub.cache / f"{stub.out.name}.lock").open("a")
    fcntl.flock(other, fcntl.LOCK_EX)  # another run is building
    shown: list[str] = []

    def progress(line: str) -> None:
        shown.append(line)
        if "waiting for it" in line:  # the other run finishes its build and lets go
            stub.out.mkdir()
            for name in BINARIES:
                (stub.out / name).write_text("#!/bin/sh\necho complete\n")
                (stub.out / name).chmod(0o755)
            other.close()

    try:
        assert controlplane.find_assets(progress) == stub.out
    finally:
        other.close()
    assert stub.built() == []
    assert len(shown) == 2 and shown[1].endswith(f"the other run built it; reusing {stub.out}")

    # a fresh cache: this run builds, and every step is shown as it comes
    stub.cache = stub.cache.parent / "cache2"
    stub.out = stub.cache / stub.out.name
    monkeypatch.setenv("ADL_K8S_CACHE", str(stub.cache))
    shown.clear()
    assert controlplane.find_assets(shown.append) == stub.out
    assert all(line.startswith("[build_assets ") for line in shown)
    for name in BINARIES:
        assert any(f"building {name} " in line and "done in" in line for line in shown)
    assert "built in" in shown[-1]
    stub.assert_complete()


class Interrupted(BaseException):
    """Ctrl-C in pytest, raised where find_assets waits for the build."""


def test_the_cluster_fixture_stops_the_build_cleanly_when_interrupted(
    stub: Stub, gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    controlplane = _controlplane(monkeypatch, stub)

    def progress(line: str) -> None:
        if "building kube-apiserver" in line:
            raise Interrupted

    with pytest.raises(Interrupted):
        controlplane.find_assets(progress)
    stub.assert_nothing_built()


def test_kueue_is_built_into_its_own_entry_with_its_chart_and_then_reused(stub: Stub) -> None:
    """``build_assets.sh kueue``: Kueue's manager and the chart of its module version, cached
    beside the control plane's entry (which it neither needs nor touches); a second run only
    finds it."""
    entry = stub.cache / f"kueue-{_pins()['KUEUE_VERSION']}"
    first = subprocess.run(
        ["bash", str(SCRIPT), "kueue"], env=stub.env, capture_output=True, text=True, timeout=WAIT_S
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[-1] == str(entry)
    assert (entry / "kueue").read_text() == "#!/bin/sh\necho kueue\n"
    assert (entry / "charts" / "kueue" / "Chart.yaml").read_text() == "name: kueue\n"
    assert not stub.out.exists()
    calls = stub.calls.read_text().splitlines()
    again = subprocess.run(
        ["bash", str(SCRIPT), "kueue"], env=stub.env, capture_output=True, text=True, timeout=WAIT_S
    )
    assert again.returncode == 0 and again.stdout.splitlines()[-1] == str(entry)
    assert stub.calls.read_text().splitlines() == calls  # no go at all the second time


def test_karpenter_is_built_with_its_own_toolchain_into_its_own_entry_with_its_crds(
    stub: Stub,
) -> None:
    """``build_assets.sh karpenter``: the KWOK provider's main from sigs.k8s.io/karpenter,
    built with the Go toolchain versions.env names for it (its go.mod needs a newer Go than the
    one installed may be), saved as ``karpenter`` beside the CRDs of the same module version;
    a second run only finds it."""
    pins = _pins()
    entry = stub.cache / f"karpenter-{pins['KARPENTER_VERSION']}"
    first = subprocess.run(
        ["bash", str(SCRIPT), "karpenter"],
        env=stub.env,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines()[-1] == str(entry)
    binary = (entry / "karpenter").read_text()
    assert binary == f"#!/bin/sh\necho karpenter {pins['KARPENTER_GOTOOLCHAIN']}\n"
    assert sorted(p.name for p in (entry / "crds").iterdir()) == [
        "karpenter.kwok.sh_kwoknodeclasses.yaml",
        "karpenter.sh_nodeclaims.yaml",
        "karpenter.sh_nodepools.yaml",
    ]
    assert sorted(p.name for p in entry.iterdir()) == ["crds", "karpenter"]
    assert not stub.out.exists()
    calls = [json.loads(line) for line in stub.calls.read_text().splitlines()]
    assert calls[-1][0] == "install"
    assert calls[-1][-1] == f"sigs.k8s.io/karpenter/kwok@{pins['KARPENTER_VERSION']}"
    again = subprocess.run(
        ["bash", str(SCRIPT), "karpenter"],
        env=stub.env,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert again.returncode == 0 and again.stdout.splitlines()[-1] == str(entry)
    assert len(stub.calls.read_text().splitlines()) == len(calls)  # no go the second time


def test_a_prebuilt_karpenter_is_used_as_given_or_refused_when_incomplete(
    stub: Stub, tmp_path: Path
) -> None:
    given = tmp_path / "prebuilt"
    given.mkdir()
    (given / "karpenter").write_text("#!/bin/sh\n")
    (given / "karpenter").chmod(0o755)
    env = {**stub.env, "ADL_KARPENTER_ASSETS": str(given)}
    run = ["bash", str(SCRIPT), "karpenter"]
    incomplete = subprocess.run(run, env=env, capture_output=True, text=True, timeout=WAIT_S)
    assert incomplete.returncode == 2
    assert f"ADL_KARPENTER_ASSETS={given} lacks" in incomplete.stderr
    (given / "crds").mkdir()
    for name in (
        "karpenter.sh_nodepools.yaml",
        "karpenter.sh_nodeclaims.yaml",
        "karpenter.kwok.sh_kwoknodeclasses.yaml",
    ):
        (given / "crds" / name).write_text("kind: CustomResourceDefinition\n")
    done = subprocess.run(run, env=env, capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == str(given)
    assert not stub.calls.exists()  # nothing built


def test_an_unknown_component_is_refused(stub: Stub) -> None:
    done = subprocess.run(
        ["bash", str(SCRIPT), "cluster-autoscaler"], env=stub.env, capture_output=True, text=True
    )
    assert done.returncode == 2 and "usage" in done.stderr
