"""A manifest is capped like a Kubernetes object (etcd's ~1.5 MiB): before parsing (bytes on
disk) and after (the document as it expands: a YAML alias bomb of 1 KB once became a 147 MB
spec, 1.4 GB in the CLI, 2 GB in the daemon and 14.6 s for every ``adl ls``). The local store
refuses an oversized spec too, whoever built it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from adl.cli.submit import manifest
from adl.local.store import Store
from adl.models import MAX_OBJECT_BYTES, AdaptiveJobSpec

HEAD = """apiVersion: adl.dev/v1
kind: AdaptiveJob
metadata: {name: bomb}
"""


def _bomb(levels: int) -> str:
    """An alias bomb: ``10 ** levels`` copies of a string from a few hundred bytes (bounded
    here: 10^6 leaves, about 6 MB expanded, four times the cap)."""
    lines = ['  a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels + 1):
        refs = ",".join([f"*a{i - 1}"] * 10)
        lines.append(f"  a{i}: &a{i} [{refs}]")
    return (
        HEAD
        + "x-bomb:\n"
        + "\n".join(lines)
        + "\nspec:\n  template:\n    metadata: {annotations: {b: *a"
        + f"{levels}"
        + "}}\n    spec: {containers: [{name: t, command: [python, t.py]}]}\n"
    )


def test_an_alias_bomb_is_refused_with_a_clear_error_in_bounded_time(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb(5))
    assert path.stat().st_size < 1024
    t0 = time.monotonic()
    with pytest.raises(ValueError, match=r"larger than 1\.5 MiB") as err:
        manifest(path)
    assert time.monotonic() - t0 < 5
    assert str(path) in str(err.value) and "alias" in str(err.value)


def test_a_file_over_the_cap_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    spec = "spec:\n  template:\n    spec: {containers: [{name: t, command: [python, t.py]}]}\n"
    path.write_text(HEAD + spec + "#" * (MAX_OBJECT_BYTES + 1) + "\n")
    with pytest.raises(ValueError, match=r"is \d+ bytes; a manifest may be at most 1\.5 MiB"):
        manifest(path)


def test_a_manifest_under_the_cap_with_aliases_still_works(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text(_bomb(2))  # 1000 leaves: a few KB expanded
    name, _, spec = manifest(path)
    assert name == "bomb" and spec.trainer["command"] == ["python", "t.py"]


def test_the_spec_model_refuses_an_oversized_template() -> None:
    big = ["x" * 1000] * 2000  # 2 MB expanded, one shared string
    data = {"template": {"metadata": {"b": big}, "spec": {"containers": [{"command": ["p"]}]}}}
    with pytest.raises(ValueError, match=r"larger than 1\.5 MiB"):
        AdaptiveJobSpec.model_validate(data)


def test_the_local_store_refuses_an_oversized_spec_whoever_built_it(tmp_path: Path) -> None:
    store = Store(tmp_path / "state.db")
    containers = [{"name": "t", "command": ["p"]}]
    big = AdaptiveJobSpec.model_construct(  # around validation: the store checks on its own
        template={"metadata": {"b": ["x" * 1000] * 2000}, "spec": {"containers": containers}},
    )
    with pytest.raises(ValueError, match=r"larger than 1\.5 MiB"):
        store.add_job("default", "big", big)
    assert store.jobs() == []
    store.close()
