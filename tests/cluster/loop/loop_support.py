"""What the whole-loop scenarios share: operators whose workers reach the API on the pod
bridge, and reads of a namespace's AdaptiveJobs, pods and pod logs."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import yaml
from chart_install import ROOT, Installation, token_kubeconfig
from controlplane import ControlPlane
from kubelet import ProcessKubelet
from kubernetes import client
from operator_process import OperatorProcess

from adl.operator.crd import GROUP, PLURAL, VERSION
from tests.waiting import wait_for

#: scheduling rounds this often (the chart's default is 30 s): the scenarios wait on them
ROUND_S = 2


class PodFacingOperator(OperatorProcess):
    """The harness's operator process, with the worker API URL on the pod bridge: pods live in
    their own network namespaces, where 127.0.0.1 is the pod itself. (The API service listens
    on every interface, so nothing else changes.)"""

    host = "127.0.0.1"

    @property
    def api_url(self) -> str:
        return f"http://{self.host}:{self.port}"


class Operators:
    """Starts operators of one installation; every one is stopped after the test."""

    def __init__(
        self, plane: ControlPlane, api: client.ApiClient, kubelet: ProcessKubelet, tmp: Path
    ) -> None:
        self.plane, self.api, self.kubelet, self.tmp = plane, api, kubelet, tmp
        self.started: list[PodFacingOperator] = []

    def __call__(
        self, installation: Installation, *, name: str = "", extra_args: tuple[str, ...] = ()
    ) -> PodFacingOperator:
        name = name or f"operator-{len(self.started) + 1}"
        kubeconfig = token_kubeconfig(
            self.api,
            installation.namespace,
            installation.service_account,
            self.tmp / f"{name}.kubeconfig",
            server=self.plane.server,
            ca_file=self.plane.ca_file,
        )
        args = (f"--round-interval={ROUND_S}", *extra_args)
        op = PodFacingOperator(installation, kubeconfig, self.tmp, name=name, extra_args=args)
        op.host = self.kubelet.host_ip
        self.started.append(op)
        return op.start()

    def tails(self) -> str:
        return "\n".join(op.tail(40) for op in self.started)

    def stop(self) -> None:
        for op in reversed(self.started):
            op.stop()


class Jobs:
    """AdaptiveJobs and pods of one namespace, read through the admin client."""

    def __init__(self, api: client.ApiClient, namespace: str, kubelet: ProcessKubelet) -> None:
        self.namespace = namespace
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.kubelet = kubelet

    def get(self, name: str) -> dict[str, Any]:
        out: dict[str, Any] = self.custom.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name
        )
        return out

    def status(self, name: str) -> dict[str, Any]:
        return dict(self.get(name).get("status") or {})

    def pods(self, name: str) -> list[Any]:
        items = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"adl.dev/job={name}"
        ).items
        return sorted(items, key=lambda p: p.metadata.name)

    def wait(
        self, what: str, check: Callable[[], Any], timeout: float, details: Callable[[], str]
    ) -> Any:
        return wait_for(check, timeout=timeout, what=what, details=details)

    def log(self, pod: str) -> str:
        return self.kubelet.log(self.namespace, pod)


EXAMPLE = ROOT / "examples" / "synthetic.yaml"
#: the example's dataset (its script's default size)
SIZE = 4096
#: the first job trains longer than the example, so that it still runs when the second comes.
#: A fast CI machine runs an epoch of this job in about 0.35 s at one replica, and growing it
#: takes a report and a round (20 epochs once ended before the first growth): 60 leave a margin.
#: A job that must grow is run by ``held_variant`` as well: on an idle machine 60 epochs took
#: 18 s, and the scheduler rightly kept a job with 60 s left on one replica
EPOCHS = 60
TIMEOUT_S = 300


def variant(tmp: Path, name: str, *, epochs: int, **spec: Any) -> Path:
    """The example manifest with another epoch count and ``spec`` fields."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    command = doc["spec"]["template"]["spec"]["containers"][0]["command"]
    command[command.index("--epochs") + 1] = str(epochs)
    doc["spec"].update(spec)
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def epoch_records(kubelet: ProcessKubelet, namespace: str, job: str) -> list[tuple[int, Any]]:
    """(group, record) of every epoch line rank 0 printed, group by group (the kubelet keeps
    the output of pods the operator has since deleted)."""
    out = []
    for path in kubelet.logs_dir.glob(f"{namespace}_{job}-g*-0.log"):
        group = int(path.stem.rsplit("-g", 1)[1].split("-")[0])
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith("{") and '"epoch"' in line:
                out.append((group, json.loads(line)))
    return sorted(out, key=lambda r: (r[0], r[1]["epoch"]))


def held_variant(
    tmp: Path,
    name: str,
    *,
    epochs: int,
    hold_grown: Literal["every", "first", "never"],
    **spec: Any,
) -> Path:
    """``variant``, run by ``held_synthetic.py``: the job declares a long run, so that the
    scheduler grows it whatever the machine's speed, and its first group waits at its second
    epoch until it is grown. ``hold_grown``: which of its groups at two replicas wait too,
    until they are stopped (a shrink, a disruption): every one, the first growth's only, or
    none. Hung-rank detection is off: a held job makes no progress on purpose."""
    path = variant(tmp, name, epochs=epochs, **spec)
    doc = yaml.safe_load(path.read_text())
    container = doc["spec"]["template"]["spec"]["containers"][0]
    script = container["command"].index("examples/train_synthetic.py")
    container["command"][script] = "tests/cluster/loop/held_synthetic.py"
    path.write_text(yaml.safe_dump(doc))
    return with_env(path, ADL_HANG_TIMEOUT_S="0", ADL_TEST_HOLD_GROWN=hold_grown)


def with_env(path: Path, **env: str) -> Path:
    """The manifest at ``path`` with these variables in its trainer's environment."""
    doc = yaml.safe_load(path.read_text())
    container = doc["spec"]["template"]["spec"]["containers"][0]
    container["env"] = [
        *(container.get("env") or []),
        *({"name": k, "value": v} for k, v in env.items()),
    ]
    path.write_text(yaml.safe_dump(doc))
    return path


def assert_exact(kubelet: ProcessKubelet, namespace: str, job: str) -> list[Any]:
    """Every epoch printed so far ran to its end with every sample once: the last record of
    each epoch (a group that resumed from a periodic checkpoint redoes the epochs after it,
    which an earlier group may have printed already) counts ``SIZE`` samples more than the
    previous epoch's, and no epoch is missing."""
    records = epoch_records(kubelet, namespace, job)
    last: dict[int, Any] = {}
    for _, record in records:
        last[record["epoch"]] = record
    epochs = len(last)
    assert sorted(last) == list(range(epochs)), records
    assert [last[e]["samples"] for e in range(epochs)] == [SIZE * (e + 1) for e in range(epochs)]
    return records


def assert_resumed_after(
    jobs: Jobs, namespace: str, job: str, group: int, details: Callable[[], str]
) -> list[Any]:
    """After group ``group`` was lost (its node, a hung rank): wait until a later group has
    printed two epochs past every epoch printed so far (it redoes those after the checkpoint it
    resumed from), then check every epoch is exact and that the later group resumed from a
    checkpoint, not from the start."""
    kubelet = jobs.kubelet
    printed = max(r["epoch"] for _, r in epoch_records(kubelet, namespace, job))
    jobs.wait(
        f"epochs of a group of {job} after group {group}",
        lambda: any(
            g > group and r["epoch"] >= printed + 2
            for g, r in epoch_records(kubelet, namespace, job)
        ),
        TIMEOUT_S,
        details,
    )
    records = assert_exact(kubelet, namespace, job)
    first_after = next(r for g, r in records if g > group)
    assert first_after["epoch"] > 0, records
    return records


def live_groups(jobs: Jobs, job: str) -> set[str]:
    """Groups with a pod that is not finished (being deleted still counts: it may be saving)."""
    return {
        p.metadata.labels["adl.dev/group"]
        for p in jobs.pods(job)
        if p.status.phase in ("Pending", "Running")
    }
