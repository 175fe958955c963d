"""The local machine's GPU types (issue 33): read from the driver's listing, shown by
``adl local status``, carried by the local node into the round, and checked at submission."""

from __future__ import annotations

from pathlib import Path

import pytest

from adl.cli.cmd_local import gpu_type_summary
from adl.local.client import cannot_fit
from adl.local.daemon import Daemon, Settings
from adl.local.gpus import gpu_types_from_list, node_gpu_type
from adl.models import AdaptiveJobSpec

LISTING = """GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1111)
GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-2222)
GPU 2: Tesla T4 (UUID: GPU-3333)
  MIG 1g.10gb     Device  0: (UUID: MIG-4444)
"""
A100 = "NVIDIA-A100-SXM4-80GB"
TEMPLATE = {"spec": {"containers": [{"name": "t", "command": ["python", "train.py"]}]}}


def test_each_slot_gets_its_gpus_type_by_index_or_uuid() -> None:
    assert gpu_types_from_list(LISTING, ["0", "1", "2"]) == [A100, A100, "Tesla-T4"]
    assert gpu_types_from_list(LISTING, ["GPU-3333", "MIG-4444", "7"]) == ["Tesla-T4", "", ""]


def test_the_local_node_has_its_gpus_one_type_else_none() -> None:
    assert node_gpu_type([A100, A100]) == A100
    assert node_gpu_type([A100, "Tesla-T4"]) == ""  # one node: a job would mix them
    assert node_gpu_type([]) == ""


def test_status_shows_the_types_of_the_slots() -> None:
    assert gpu_type_summary([A100, A100, "Tesla-T4", ""]) == (
        f"2 x {A100}, 1 x Tesla-T4, 1 x unknown"
    )


def test_the_local_node_carries_the_gpu_type_into_the_round(tmp_path: Path) -> None:
    gpus = Daemon(Settings(home=tmp_path / "g", api=False, gpus=2, slots=2, gpu_types=(A100,) * 2))
    assert [(n.gpus, n.gpu_type) for n in gpus.backend.round_nodes()] == [(2, A100)]
    cpus = Daemon(Settings(home=tmp_path / "c", api=False, slots=3))
    assert [(n.gpus, n.gpu_type) for n in cpus.backend.round_nodes()] == [(3, "")]


@pytest.mark.parametrize(
    ("gpu_type", "refused"), [(A100, False), ("Tesla-T4", True), ("", True), (None, False)]
)
def test_a_job_restricted_to_other_types_is_refused_with_the_reason(
    gpu_type: str | None, refused: bool
) -> None:
    spec = AdaptiveJobSpec(template=TEMPLATE, gpu_types=[A100])
    why = cannot_fit(spec, 4, gpu_type)
    assert (why is not None) is refused
    if why is not None:
        assert A100 in why and "GPU types" in why
    assert cannot_fit(AdaptiveJobSpec(template=TEMPLATE), 4, "Tesla-T4") is None
