"""Fixtures of the ``cluster`` tests: one real control plane per session, a namespace per test,
the Helm chart installed for real, and the operator running as the chart's ServiceAccount.

Fixture API (other suites build on these names):
- ``control_plane`` (session): a started :class:`ControlPlane` (``server``,
  ``admin_kubeconfig``, ``ca_file``, ``version``, ``assets``, ``api_client(kubeconfig=None)``,
  ``client_kubeconfig(user, groups)``, ``audit_events(username)``).
- ``admin_api`` (session): ``control_plane.api_client()``.
- ``namespace``: a fresh namespace, deleted after the test.
- ``install_chart(values=None, *, release="adl")``: installs the chart into a fresh release
  namespace; returns an :class:`Installation`; uninstalled after the test.
- ``installed_chart``: one install; parametrize indirectly with ``"cluster"`` (default),
  ``"namespaced"`` (watching the test's ``namespace``) or a values dict.
- ``start_operator(installation, *, name=..., extra_args=(), env=None)``: an
  :class:`OperatorProcess` started with a TokenRequest token of the chart's ServiceAccount
  (not waited for); every one is stopped after the test.
- ``as_service_account(namespace, account)``: a client with that ServiceAccount's token.
- ``operator``: one operator of ``installed_chart``, ready.
- ``kueue`` (module): Kueue of ``versions.env`` installed from its chart with its manager
  running (:mod:`kueue_install`); its webhook configurations are removed after the module, so
  that a stopped Kueue refuses no other module's objects.
- ``karpenter`` (module): Karpenter of ``versions.env`` with its KWOK cloud provider running
  (:mod:`karpenter_install`: CRDs, a KWOKNodeClass, GPU instance types); after the module its
  NodePools are deleted and their nodes removed by Karpenter before it stops. Its Nodes run
  pods only with a process kubelet that adopts them (``ProcessKubelet(adopt=KWOK_NODES)``).
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from chart_install import Installation, install, token_kubeconfig, uninstall
from controlplane import ControlPlane, find_assets, pinned_versions
from karpenter_install import Karpenter, delete_node_pools, start_karpenter
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kueue_install import Kueue, remove_webhooks, start_kueue
from operator_process import OperatorProcess

from adl.operator.crd import GROUP, PLURAL, VERSION
from tests.waiting import wait_for

HERE = Path(__file__).resolve().parent

_STARTED: dict[str, str] = {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.cluster)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _STARTED:
        pins = ", ".join(f"{k}={v}" for k, v in pinned_versions().items())
        terminalreporter.write_line(
            f"cluster tests ran on kube-apiserver {_STARTED['version']} "
            f"(pinned {pins}; binaries {_STARTED['assets']})"
        )


def _show_on_terminal(config: pytest.Config) -> Callable[[str], None]:
    """A line on the terminal now, past pytest's output capture (the build's progress)."""
    capture = config.pluginmanager.getplugin("capturemanager")
    reporter = config.pluginmanager.getplugin("terminalreporter")

    def show(line: str) -> None:
        if reporter is None:
            return
        with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
            reporter.write_line(line)

    return show


@pytest.fixture(scope="session")
def control_plane(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[ControlPlane]:
    # builds the binaries when they are neither cached nor given by ADL_K8S_ASSETS (showing the
    # build's progress; a run started beside another one waits for its build and reuses it): a
    # missing control plane is an error, never a skip
    assets = find_assets(_show_on_terminal(pytestconfig))
    plane = ControlPlane(assets, tmp_path_factory.mktemp("control-plane"))
    plane.start()
    _STARTED.update(version=plane.version, assets=str(plane.assets))
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def admin_api(control_plane: ControlPlane) -> client.ApiClient:
    return control_plane.api_client()


def _slug(text: str, limit: int) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:limit].strip("-") or "t"


def _create_namespace(plane: ControlPlane, api: client.ApiClient, prefix: str) -> str:
    name = f"{_slug(prefix, 50)}-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace(client.V1Namespace(metadata={"name": name}))
    plane.wait_namespace_ready(name)
    return name


def _delete_namespace(api: client.ApiClient, name: str) -> None:
    try:
        client.CoreV1Api(api).delete_namespace(name)
    except ApiException as exc:
        if exc.status != 404:
            raise


def _delete_jobs(api: client.ApiClient, namespace: str) -> None:
    """Delete the namespace's AdaptiveJobs now, not with the namespace: a namespace empties in
    the background, and a cluster-wide operator of the next test would take up its jobs. The
    test's operator has stopped by now, so kopf's finalizer is taken off by hand."""
    custom = client.CustomObjectsApi(api)
    try:
        jobs = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
    except ApiException as exc:
        if exc.status == 404:  # the CRD was never installed
            return
        raise
    for job in jobs:
        name = job["metadata"]["name"]
        with contextlib.suppress(ApiException):
            if job["metadata"].get("finalizers"):
                custom.patch_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, name, {"metadata": {"finalizers": None}}
                )
            custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
    wait_for(
        lambda: (
            not custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)["items"]
        ),
        timeout=30,
        what=f"the AdaptiveJobs of {namespace} deleted",
    )


@pytest.fixture
def namespace(
    control_plane: ControlPlane, admin_api: client.ApiClient, request: pytest.FixtureRequest
) -> Iterator[str]:
    name = _create_namespace(control_plane, admin_api, request.node.name)
    yield name
    _delete_jobs(admin_api, name)
    _delete_namespace(admin_api, name)  # the namespace controller empties it in the background


@pytest.fixture
def install_chart(
    control_plane: ControlPlane, admin_api: client.ApiClient
) -> Iterator[Callable[..., Installation]]:
    done: list[tuple[Installation, str]] = []

    def _install(values: dict[str, Any] | None = None, *, release: str = "adl") -> Installation:
        release_ns = _create_namespace(control_plane, admin_api, f"{release}-system")
        installation = install(admin_api, values or {}, release=release, namespace=release_ns)
        done.append((installation, release_ns))
        return installation

    yield _install
    for installation, release_ns in reversed(done):
        uninstall(admin_api, installation)
        _delete_namespace(admin_api, release_ns)


#: what ``installed_chart`` installs for each indirect parameter
def chart_values(kind: str | dict[str, Any], namespace: str) -> dict[str, Any]:
    if isinstance(kind, dict):
        return kind
    if kind == "cluster":
        return {}
    if kind == "namespaced":
        return {"namespaced": True, "watchNamespaces": [namespace]}
    raise ValueError(f"installed_chart: unknown parameter {kind!r}")


@pytest.fixture
def installed_chart(
    install_chart: Callable[..., Installation], namespace: str, request: pytest.FixtureRequest
) -> Installation:
    return install_chart(chart_values(getattr(request, "param", "cluster"), namespace))


@pytest.fixture
def start_operator(
    control_plane: ControlPlane, admin_api: client.ApiClient, tmp_path: Path
) -> Iterator[Callable[..., OperatorProcess]]:
    started: list[OperatorProcess] = []

    def _start(
        installation: Installation,
        *,
        name: str | None = None,
        extra_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> OperatorProcess:
        name = name or f"operator-{len(started) + 1}"
        kubeconfig = token_kubeconfig(
            admin_api,
            installation.namespace,
            installation.service_account,
            tmp_path / f"{name}.kubeconfig",
            server=control_plane.server,
            ca_file=control_plane.ca_file,
        )
        proc = OperatorProcess(
            installation, kubeconfig, tmp_path, name=name, extra_args=extra_args, env=env
        )
        started.append(proc)
        return proc.start()

    yield _start
    for proc in reversed(started):
        proc.stop()


@pytest.fixture
def as_service_account(
    control_plane: ControlPlane, admin_api: client.ApiClient, tmp_path: Path
) -> Callable[..., client.ApiClient]:
    """``as_service_account(namespace, account)``: a client authenticated by that account's
    TokenRequest token (the real authorizer decides what it may do)."""

    def _client(namespace: str, account: str) -> client.ApiClient:
        path = token_kubeconfig(
            admin_api,
            namespace,
            account,
            tmp_path / f"sa-{namespace}-{account}.kubeconfig",
            server=control_plane.server,
            ca_file=control_plane.ca_file,
        )
        return control_plane.api_client(path)

    return _client


@pytest.fixture
def operator(
    installed_chart: Installation, start_operator: Callable[..., OperatorProcess]
) -> OperatorProcess:
    return start_operator(installed_chart).wait_ready()


@pytest.fixture(scope="module")
def kueue(
    control_plane: ControlPlane,
    admin_api: client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
    pytestconfig: pytest.Config,
) -> Iterator[Kueue]:
    # built like the control plane when not cached (ADL_KUEUE_ASSETS: prebuilt): never a skip
    assets = find_assets(_show_on_terminal(pytestconfig), component="kueue", binaries=("kueue",))
    running = start_kueue(control_plane, admin_api, assets, tmp_path_factory.mktemp("kueue"))
    try:
        yield running
    finally:
        remove_webhooks(admin_api, running)
        running.stop()


@pytest.fixture(scope="module")
def karpenter(
    control_plane: ControlPlane,
    admin_api: client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
    pytestconfig: pytest.Config,
) -> Iterator[Karpenter]:
    # built like the control plane when not cached (ADL_KARPENTER_ASSETS: prebuilt): never a skip
    assets = find_assets(
        _show_on_terminal(pytestconfig), component="karpenter", binaries=("karpenter",)
    )
    running = start_karpenter(
        control_plane, admin_api, assets, tmp_path_factory.mktemp("karpenter")
    )
    try:
        yield running
    finally:
        try:
            delete_node_pools(admin_api, running)  # its nodes go while it still runs
        finally:
            running.stop()
