"""The Helm chart installed for real: what ``helm install`` would create, applied to the API
server, and credentials of the chart's own ServiceAccount for the operator.

helm-python-sdk renders the templates (no helm binary); the CRDs of ``charts/adl/crds`` are
applied first, as helm does. Every rendered object goes through the API server's validation
and admission, with one change: the operator Deployment gets zero replicas, because its pods
would need the operator image and a kubelet; the operator runs instead as a local process with
exactly the Deployment's arguments and the ServiceAccount's token (``operator_process``).
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import helm_python as helm
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import NotFoundError, ResourceNotFoundError

from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "adl"
FIELD_MANAGER = "adl-cluster-tests"
#: a TokenRequest's lifetime: longer than any test session (the API server's minimum is 10 min)
TOKEN_SECONDS = 4 * 3600


@dataclass(frozen=True)
class Installation:
    """One release of the chart, applied."""

    release: str
    #: the release namespace (the Deployment, its ServiceAccount and Service live here)
    namespace: str
    values: dict[str, Any]
    #: every object applied, in order (CRDs excluded: they outlive releases)
    objects: list[dict[str, Any]] = field(default_factory=list)

    @property
    def namespaced(self) -> bool:
        return bool(self.values.get("namespaced"))

    @property
    def deployment(self) -> dict[str, Any]:
        return next(o for o in self.objects if o["kind"] == "Deployment")

    @property
    def service_account(self) -> str:
        return str(self.deployment["spec"]["template"]["spec"]["serviceAccountName"])

    @property
    def username(self) -> str:
        """The user the API server sees for the ServiceAccount's tokens."""
        return f"system:serviceaccount:{self.namespace}:{self.service_account}"

    @property
    def operator_args(self) -> list[str]:
        """The operator container's arguments as the chart renders them."""
        return list(self.deployment["spec"]["template"]["spec"]["containers"][0]["args"])

    @property
    def watch_namespaces(self) -> list[str]:
        """The namespaces a namespaced install watches (empty: cluster-wide)."""
        return [a.split("=", 1)[1] for a in self.operator_args if a.startswith("--namespace=")]


def render(values: dict[str, Any], release: str, namespace: str) -> list[dict[str, Any]]:
    """The chart's templates rendered for an install (NOTES.txt left out)."""
    with helm.Chart.load(CHART) as chart:
        chart.validate_schema(values)
        out = chart.render(values, name=release, namespace=namespace, is_install=True)
    docs: list[dict[str, Any]] = []
    for name in sorted(out):
        if name.endswith(".yaml"):
            docs += [d for d in yaml.safe_load_all(out[name]) if d]
    return docs


def chart_crds() -> list[dict[str, Any]]:
    """The CRDs helm installs before the templates (``charts/adl/crds``)."""
    docs: list[dict[str, Any]] = []
    for path in sorted((CHART / "crds").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def _resource(dyn: DynamicClient, obj: dict[str, Any]) -> Any:
    return dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])


def apply(api: client.ApiClient, obj: dict[str, Any]) -> dict[str, Any]:
    """Server-side apply one object (create or update), as ``kubectl apply --server-side``.
    A kind the discovery cache does not know yet (a CRD just established) is looked up again."""
    dyn = DynamicClient(api)

    def resource() -> Any:
        try:
            return _resource(dyn, obj)
        except ResourceNotFoundError:
            dyn.resources.invalidate_cache()
            raise

    res = wait_for(resource, timeout=30, what=f"discovery of {obj['apiVersion']} {obj['kind']}")
    meta = obj["metadata"]
    out = res.server_side_apply(
        body=obj,
        name=meta["name"],
        namespace=meta.get("namespace"),
        field_manager=FIELD_MANAGER,
        force_conflicts=True,
    )
    return dict(out.to_dict())


def apply_crds(api: client.ApiClient) -> None:
    """Apply the chart's CRDs and wait until the API server serves them."""
    ext = client.ApiextensionsV1Api(api)
    for crd in chart_crds():
        apply(api, crd)

        def established(name: str = crd["metadata"]["name"]) -> bool:
            conditions = ext.read_custom_resource_definition(name).status.conditions or []
            return any(c.type == "Established" and c.status == "True" for c in conditions)

        wait_for(established, timeout=30, what=f"CRD {crd['metadata']['name']} established")


def install(
    api: client.ApiClient, values: dict[str, Any], *, release: str, namespace: str
) -> Installation:
    """Render the chart for ``namespace`` (which must exist) and apply everything it makes."""
    apply_crds(api)
    objects = []
    for obj in render(values, release, namespace):
        obj = copy.deepcopy(obj)
        if obj["kind"] == "Deployment":
            obj["spec"]["replicas"] = 0  # the operator runs as a local process instead
        objects.append(obj)
        apply(api, obj)
    return Installation(release, namespace, dict(values), objects)


def uninstall(api: client.ApiClient, installation: Installation) -> None:
    """Delete what :func:`install` applied (in reverse), like ``helm uninstall``."""
    dyn = DynamicClient(api)
    for obj in reversed(installation.objects):
        meta = obj["metadata"]
        with contextlib.suppress(NotFoundError):
            _resource(dyn, obj).delete(name=meta["name"], namespace=meta.get("namespace"))


def service_account_token(api: client.ApiClient, namespace: str, account: str) -> str:
    """A token of a ServiceAccount from the TokenRequest API (what the kubelet would mount into
    a pod running as it)."""
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=TOKEN_SECONDS)
    )
    try:
        out = client.CoreV1Api(api).create_namespaced_service_account_token(
            account, namespace, request
        )
    except ApiException as exc:
        raise RuntimeError(f"TokenRequest for {namespace}/{account}: {exc}") from exc
    return str(out.status.token)


def token_kubeconfig(
    api: client.ApiClient,
    namespace: str,
    account: str,
    path: Path,
    *,
    server: str,
    ca_file: Path,
) -> Path:
    """A kubeconfig authenticating as the ServiceAccount ``namespace/account`` by its token."""
    from controlplane import write_kubeconfig

    token = service_account_token(api, namespace, account)
    user = f"system:serviceaccount:{namespace}:{account}"
    return write_kubeconfig(path, server, ca_file, user=user, token=token)
