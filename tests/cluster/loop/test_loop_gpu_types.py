"""Issue 33's cluster scenario: a job ends up on the GPU type where it runs faster, and says why.

Two nodes of one GPU each, labelled as GPU feature discovery labels them: a Tesla-T4 and an
A100. The process kubelet tells each worker its node's type (``ADL_GPU_TYPE``), and the worker
(``typed_demo.py``) steps three times slower on the T4 (0.3 s against 0.1 s), which it
measures and reports like any throughput. The T4 node is cordoned at first, so the job starts
on the A100 and measures it there. Once the T4 is uncordoned, the scheduler has a free type
the job never measured: the job tries it (``adl.sched.type_explore``; the move says so),
measures it slower, and goes back to the A100 by an ordinary measured move whose decision
names both speeds. Everything the scheduler knows of the types comes from the job's own
reports through the real API server.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from disruption_support import events
from kubelet import ProcessKubelet
from kubelet_nodes import NodeSpec
from loop_support import TIMEOUT_S, Jobs, Operators

from adl.contract import LABEL_GPU_PRODUCT

T4, A100 = "Tesla-T4", "NVIDIA-A100-SXM4-80GB"
TAG = uuid.uuid4().hex[:4]
T4_NODE, A100_NODE = f"t4-{TAG}", f"a100-{TAG}"


@pytest.fixture
def node_specs() -> list[NodeSpec]:
    return [
        NodeSpec(T4_NODE, 1, labels={LABEL_GPU_PRODUCT: T4}),
        NodeSpec(A100_NODE, 1, labels={LABEL_GPU_PRODUCT: A100}),
    ]


def _manifest(tmp: Path) -> Path:
    command = [
        "python",
        "tests/cluster/loop/typed_demo.py",
        *("--kind", "small", "--log-every", "50"),
        # a long declared run: moving between types pays for its restart
        *("--steps", "1000000", "--declare-length"),
        # steps of 0.3 s on the T4 and 0.1 s on the A100: far above the small model's own compute,
        # so a loaded machine's noise cannot turn the order round
        *("--sleep-on", f"{T4}=0.3", "--sleep-on", f"{A100}=0.1"),
    ]
    doc: dict[str, Any] = {
        "apiVersion": "adl.dev/v1",
        "kind": "AdaptiveJob",
        "metadata": {"name": "typed"},
        "spec": {
            "minReplicas": 1,
            "maxReplicas": 1,
            "checkpoint": {"size": "1Gi"},
            "template": {
                "spec": {
                    "containers": [{"name": "trainer", "image": "adl-job:t", "command": command}]
                }
            },
        },
    }
    path = tmp / "typed.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_job_tries_the_other_gpu_type_and_ends_on_the_faster_one(
    installed_chart: Any,
    adl_operator: Operators,
    kubelet: ProcessKubelet,
    adl_cli: Any,
    jobs: Jobs,
    namespace: str,
    tmp_path: Path,
) -> None:
    jobs.core.patch_node(T4_NODE, {"spec": {"unschedulable": True}})
    adl_operator(installed_chart).wait_ready()

    def details() -> str:
        pods = {p.metadata.name: (p.spec.node_name, p.status.phase) for p in jobs.pods("typed")}
        said = events(jobs, "typed", "Rescheduled")
        return f"{adl_operator.tails()}\njob: {jobs.status('typed')}\npods: {pods}\n{said}"

    def on(node: str, gpu_type: str) -> bool:
        """Running on ``node``, and its latest model was measured there."""
        status = jobs.status("typed")
        hints = status.get("hints") or {}
        return (
            status.get("allocation") == [node]
            and status.get("readyReplicas") == 1
            and hints.get("gpuType") == gpu_type
            and bool(hints.get("perfParams"))
        )

    def moved_to(gpu_type: str) -> list[str]:
        said = events(jobs, "typed", "Rescheduled")
        return [m for m in said if m.startswith(f"moved to 1 x {gpu_type}")]

    adl_cli("submit", "typed", "-f", str(_manifest(tmp_path)), "-n", namespace)
    jobs.wait("the job measured on the A100", lambda: on(A100_NODE, A100), TIMEOUT_S, details)

    jobs.core.patch_node(T4_NODE, {"spec": {"unschedulable": False}})
    uncordoned = time.monotonic()
    tried = jobs.wait(
        "the job moved to try the T4",
        lambda: next(iter(moved_to(T4)), None),
        TIMEOUT_S,
        details,
    )
    assert tried.startswith(f"moved to 1 x {T4}: speedup 1.50 there vs 1.00 on {A100}"), tried
    assert f"trying {T4}: not measured there yet" in tried, tried

    def measured_back() -> str | None:
        if not on(A100_NODE, A100):
            return None
        back = moved_to(A100)
        return back[-1] if back else None

    back = jobs.wait("the job back on the A100, measured", measured_back, TIMEOUT_S, details)
    # the reason is the measurement: both types' models reported, no estimate in the decision
    assert "trying" not in back and "estimated" not in back, back
    speed = float(back.split("speedup ", 1)[1].split(" ", 1)[0])
    assert speed > 1.5, back  # 3x slower steps on the T4, less the CPU's own compute
    models = jobs.status("typed").get("typeModels") or {}
    assert set(models) == {T4, A100}, models
    # nothing pulls it to the T4 again: measured now, it is not tried a second time
    assert len(moved_to(T4)) == 1, moved_to(T4)
    print(f"\ntried: {tried}\nback: {back}\n{time.monotonic() - uncordoned:.1f} s from uncordon")
