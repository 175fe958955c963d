"""The local machine's GPU types (issue 33): read from the driver's listing, shown by
``adl local status``, carried by the local node into the round, and checked at submission."""

from __future__ import annotations

from pathlib import Path

import pytest

from adl.cli.cmd_local import gpu_type_summary
from adl.local.client import cannot_fit
from adl.local.daemon import Daemon, Settings
from adl.local.gpus import gpu_types_from_list, local_nodes
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


T4 = "Tesla-T4"


def _nodes(slots: int, types: list[str]) -> list[tuple[str, str, int, tuple[int, ...]]]:
    return [(n.name, n.gpu_type, n.slots, n.devices) for n in local_nodes(slots, types)]


def test_one_local_node_while_the_gpus_share_a_type() -> None:
    assert _nodes(2, [A100, A100]) == [("local", A100, 2, (0, 1))]
    assert _nodes(3, []) == [("local", "", 3, ())]  # CPU slots
    assert _nodes(2, ["", ""]) == [("local", "", 2, (0, 1))]  # GPUs of unknown type


def test_a_machine_with_several_gpu_types_is_one_node_per_type() -> None:
    """A data-parallel step waits for its slowest GPU: one node for all would let a job mix
    an A100 with a T4 (issue 33: no job mixes types), so each type is a node of its own."""
    assert _nodes(4, [A100, T4, A100, ""]) == [
        (f"local-{A100}", A100, 2, (0, 2)),
        (f"local-{T4}", T4, 1, (1,)),
        ("local-unknown", "", 1, (3,)),
    ]


def test_status_shows_the_types_of_the_slots() -> None:
    assert gpu_type_summary([A100, A100, "Tesla-T4", ""]) == (
        f"2 x {A100}, 1 x Tesla-T4, 1 x unknown"
    )


def test_the_local_node_carries_the_gpu_type_into_the_round(tmp_path: Path) -> None:
    gpus = Daemon(Settings(home=tmp_path / "g", api=False, gpus=2, slots=2, gpu_types=(A100,) * 2))
    assert [(n.gpus, n.gpu_type) for n in gpus.backend.round_nodes()] == [(2, A100)]
    cpus = Daemon(Settings(home=tmp_path / "c", api=False, slots=3))
    assert [(n.gpus, n.gpu_type) for n in cpus.backend.round_nodes()] == [(3, "")]
    mixed = Daemon(
        Settings(home=tmp_path / "m", api=False, gpus=3, slots=3, gpu_types=(A100, T4, A100))
    )
    assert [(n.name, n.gpus, n.gpu_type) for n in mixed.backend.round_nodes()] == [
        (f"local-{A100}", 2, A100),
        (f"local-{T4}", 1, T4),
    ]


@pytest.mark.parametrize(
    ("gpu_types", "refused"),
    [([A100] * 4, False), ([T4] * 4, True), ([""] * 4, True), ([], True), (None, False),
     ([T4, A100, T4, T4], False)],
)  # fmt: skip
def test_a_job_restricted_to_other_types_is_refused_with_the_reason(
    gpu_types: list[str] | None, refused: bool
) -> None:
    spec = AdaptiveJobSpec(template=TEMPLATE, gpu_types=[A100])
    why = cannot_fit(spec, 4, gpu_types)
    assert (why is not None) is refused
    if why is not None:
        assert A100 in why and "GPU types" in why
    assert cannot_fit(AdaptiveJobSpec(template=TEMPLATE), 4, [T4] * 4) is None


def test_on_a_mixed_machine_a_job_must_fit_on_gpus_of_one_type() -> None:
    """Three GPUs, but at most two of one type: a job whose smallest group takes three can
    never start, and the reason names the largest group of one type."""
    spec = AdaptiveJobSpec(template=TEMPLATE, min_replicas=3, max_replicas=3)
    why = cannot_fit(spec, 3, [A100, T4, A100])
    assert why is not None and "needs 3 slots" in why and "2 GPUs of one type" in why
    assert cannot_fit(spec.model_copy(update={"min_replicas": 2}), 3, [A100, T4, A100]) is None
    restricted = spec.model_copy(update={"min_replicas": 1, "gpu_types": [T4]})
    assert cannot_fit(restricted, 3, [A100, T4, A100]) is None
