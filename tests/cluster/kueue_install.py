"""Kueue installed for real: its own Helm chart, of the module version pinned in
``versions.env`` (``build_assets.sh kueue`` builds the manager and keeps the chart beside it),
rendered and applied to the test API server, and its manager run as a local process with the
chart's configuration, its ServiceAccount's token and its webhooks.

Two changes to what ``helm install`` would make, both because there is no container runtime
and no kube-proxy here: the manager Deployment gets zero replicas (the manager runs as a process
instead, with exactly the ConfigMap's configuration), and the webhook Service loses its pod
selector and gets an EndpointSlice naming this machine's address. The API server runs with
``--enable-aggregator-routing``, so it calls a Service's endpoints directly (it cannot reach a
ClusterIP here), with the Service's DNS name as the TLS server name: the certificate Kueue's
internal certificate management makes for that name then verifies as in a real cluster.
The visibility API (an aggregated API server) is left out.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import ipaddress
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml
from chart_install import apply, token_kubeconfig
from cluster_procs import ManagedProcess, free_port
from controlplane import ControlPlane
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.waiting import wait_for

NAMESPACE = "kueue-system"
RELEASE = "kueue"
WEBHOOK_SERVICE = "kueue-webhook-service"
WEBHOOK_PORT = 9443
#: how long the manager may take to serve its webhooks (a cold start on 2 busy cores)
READY_TIMEOUT_S = 120.0
#: the AdaptiveJob kind as Kueue's ``integrations.externalFrameworks`` names it
ADAPTIVE_JOB_FRAMEWORK = "AdaptiveJob.v1.adl.dev"


def host_address() -> str:
    """A non-loopback IPv4 address of this machine: an EndpointSlice may not name loopback."""
    out = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "scope", "global"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for line in out.splitlines():
        addr = ipaddress.ip_interface(line.split()[3]).ip
        if not addr.is_loopback:
            return str(addr)
    raise RuntimeError(f"no global IPv4 address on this machine for Kueue's webhooks:\n{out}")


def manager_config(health_port: int, cert_dir: Path) -> dict[str, Any]:
    """The manager's configuration (the chart's ``managerConfig.controllerManagerConfigYaml``):
    Kueue's defaults, one manager (no leader election), loopback probes, no metrics endpoint,
    Jobs integrated and AdaptiveJob declared as a framework whose own controller makes its
    Workloads (so Kueue does not admit its pods a second time)."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": WEBHOOK_PORT, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {
            "enable": True,
            "webhookServiceName": WEBHOOK_SERVICE,
            "webhookSecretName": "kueue-webhook-server-cert",
        },
        "integrations": {
            "frameworks": ["batch/job"],
            "externalFrameworks": [ADAPTIVE_JOB_FRAMEWORK],
        },
    }


def render(assets: Path, config: dict[str, Any]) -> list[dict[str, Any]]:
    """The Kueue chart's templates for an install into ``kueue-system``."""
    values = {"managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(config)}}
    with helm.Chart.load(assets / "charts" / "kueue") as chart:
        out = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    docs: list[dict[str, Any]] = []
    for name in sorted(out):
        if name.endswith(".yaml"):
            docs += [d for d in yaml.safe_load_all(out[name]) if d]
    return docs


def _adapted(obj: dict[str, Any]) -> dict[str, Any] | None:
    """What is applied for one rendered object (None: left out)."""
    obj = copy.deepcopy(obj)
    kind, name = obj["kind"], obj["metadata"]["name"]
    if kind == "APIService":
        return None  # the visibility API: an aggregated server this harness does not run
    if kind == "Deployment":
        obj["spec"]["replicas"] = 0
    if kind == "Service" and name == WEBHOOK_SERVICE:
        obj["spec"].pop("selector", None)  # endpoints of our own (below), not of pods
    return obj


@dataclass
class Kueue:
    """A running Kueue: its manager process and the objects its chart made."""

    process: ManagedProcess
    objects: list[dict[str, Any]] = field(default_factory=list)

    def tail(self, lines: int = 60) -> str:
        return self.process.tail(lines)

    def stop(self) -> None:
        self.process.stop(grace_s=10.0)


def _webhooks_answer(api: client.ApiClient, last: list[str]) -> bool:
    """A dry-run ResourceFlavor goes through Kueue's webhooks: True once they answer (the
    API server's last refusal is kept in ``last``)."""
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "adl-webhook-probe"},
    }
    try:
        client.CustomObjectsApi(api).create_cluster_custom_object(
            "kueue.x-k8s.io", "v1beta2", "resourceflavors", body, dry_run="All"
        )
    except ApiException as exc:
        if exc.status == 409:  # already there: the webhooks answered before
            return True
        last[:] = [f"{exc.status}: {exc.body}"]
        raise
    return True


def _mount_secret(core: client.CoreV1Api, cert_dir: str, kueue: Kueue) -> None:
    """What the kubelet does for the Deployment's secret volume: once Kueue's certificate
    management has written the webhook's serving certificate into its Secret, the files appear
    in the manager's certificate directory (it waits for them before serving)."""
    secret = "kueue-webhook-server-cert"

    def written() -> dict[str, str] | None:
        data = core.read_namespaced_secret(secret, NAMESPACE).data or {}
        return data if {"tls.crt", "tls.key", "ca.crt"} <= data.keys() else None

    data = wait_for(
        written,
        timeout=READY_TIMEOUT_S,
        what=f"Kueue's certificate in Secret {secret}",
        details=lambda: kueue.tail(),
        give_up=lambda: None if kueue.process.alive() else "the kueue process exited",
    )
    target = Path(cert_dir)
    target.mkdir(parents=True, exist_ok=True)
    for name, value in data.items():
        path = target / name
        path.write_bytes(base64.b64decode(value))
        path.chmod(0o600)


def start_kueue(plane: ControlPlane, api: client.ApiClient, assets: Path, workdir: Path) -> Kueue:
    """Install the chart, start the manager, and return once its webhooks answer."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = manager_config(free_port(), workdir / "certs")
    core = client.CoreV1Api(api)
    try:
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
    except ApiException as exc:
        if exc.status != 409:
            raise
    objects = []
    # CRDs first, as helm does; then everything else in the chart's order
    rendered = render(assets, config)
    for obj in sorted(rendered, key=lambda o: o["kind"] != "CustomResourceDefinition"):
        adapted = _adapted(obj)
        if adapted is not None:
            apply(api, adapted)
            objects.append(adapted)
    apply(
        api,
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{WEBHOOK_SERVICE}-host",
                "namespace": NAMESPACE,
                "labels": {
                    "kubernetes.io/service-name": WEBHOOK_SERVICE,
                    "endpointslice.kubernetes.io/managed-by": "adl-cluster-tests",
                },
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [host_address()], "conditions": {"ready": True}}],
            "ports": [{"name": "", "port": WEBHOOK_PORT, "protocol": "TCP"}],
        },
    )
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    kubeconfig = token_kubeconfig(
        api, NAMESPACE, account, workdir / "kubeconfig", server=plane.server, ca_file=plane.ca_file
    )
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env.update(KUBECONFIG=str(kubeconfig), POD_NAMESPACE=NAMESPACE)
    process = ManagedProcess(
        "kueue",
        [
            str(assets / "kueue"),
            f"--config={workdir / 'config.yaml'}",
            # Workload slices (alpha in v0.17.0): how an adl job admitted for fewer replicas
            # than it could use asks for more (adl.operator.kueue_slices)
            "--feature-gates=VisibilityOnDemand=false,ElasticJobsViaWorkloadSlices=true",
            "--zap-log-level=2",
        ],
        workdir / "kueue.log",
        env=env,
        die_with_parent=True,
    )
    kueue = Kueue(process, objects)
    _mount_secret(core, config["webhook"]["certDir"], kueue)
    last: list[str] = []
    wait_for(
        lambda: _webhooks_answer(api, last),
        timeout=READY_TIMEOUT_S,
        what="Kueue's webhooks answering",
        details=lambda: f"the API server said: {last}\n{kueue.tail()}",
        give_up=lambda: None if process.alive() else "the kueue process exited",
    )
    return kueue


def remove_webhooks(api: client.ApiClient, kueue: Kueue) -> None:
    """Delete the chart's webhook configurations: with the manager stopped, their ``Fail``
    policy would refuse every Job and Pod created afterwards (CRDs and the rest stay)."""
    admission = client.AdmissionregistrationV1Api(api)
    for obj in kueue.objects:
        name = obj["metadata"]["name"]
        with contextlib.suppress(ApiException):
            if obj["kind"] == "MutatingWebhookConfiguration":
                admission.delete_mutating_webhook_configuration(name)
            elif obj["kind"] == "ValidatingWebhookConfiguration":
                admission.delete_validating_webhook_configuration(name)
