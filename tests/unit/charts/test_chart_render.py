"""The Helm chart, rendered and linted offline with helm-python-sdk (no helm binary, no cluster)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from adl.operator import permissions as perms
from tests.chart_variants import VARIANTS

CHART = Path(__file__).resolve().parents[3] / "charts" / "adl"


def render(values: dict[str, Any], namespace: str = "adl-system") -> list[dict[str, Any]]:
    with helm.Chart.load(CHART) as chart:
        chart.validate_schema(values)
        out = chart.render(values, name="adl", namespace=namespace, is_install=True)
    docs = []
    for name, text in out.items():
        if name.endswith(".txt"):
            continue
        docs += [d for d in yaml.safe_load_all(text) if d]
    return docs


def kinds(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def operator_policies(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The NetworkPolicy in front of the operator (not the workers' own)."""
    return [
        d
        for d in kinds(docs, "NetworkPolicy")
        if d["metadata"]["labels"].get("app.kubernetes.io/component") == "operator"
    ]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_strict_lint(variant: str) -> None:
    report = helm.lint(CHART, VARIANTS[variant], strict=True, namespace="adl-system")
    assert report["errors"] == [], report
    assert [m for m in report["messages"] if m["severity"] >= 2] == [], report


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_renders(variant: str) -> None:
    docs = render(VARIANTS[variant])
    (deploy,) = kinds(docs, "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert pod["serviceAccountName"] == kinds(docs, "ServiceAccount")[0]["metadata"]["name"]
    (svc,) = kinds(docs, "Service")
    assert (
        svc["spec"]["selector"].items() <= deploy["spec"]["template"]["metadata"]["labels"].items()
    )


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_operator_accepts_the_rendered_args(variant: str) -> None:
    from adl.operator.main import parse_args

    (deploy,) = kinds(render(VARIANTS[variant]), "Deployment")
    container = deploy["spec"]["template"]["spec"]["containers"][0]
    opts = parse_args(container["args"])
    service = VARIANTS[variant].get("fullnameOverride", "adl")  # the release's name else
    assert opts.port == 8080 and opts.api_url == f"http://{service}.adl-system.svc:8080"
    assert opts.all_namespaces is not VARIANTS[variant].get("namespaced", False)
    assert opts.standalone is (variant == "no-peering")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": opts.port, "health": opts.health_port, "metrics": opts.metrics_port}
    assert opts.metrics_port not in (opts.port, opts.health_port)
    assert opts.api_docs is False
    knobs = VARIANTS[variant].get("scheduler", {}).get("policyKnobs", {})
    assert opts.policy_knobs == knobs
    assert opts.node_lost_after == 60  # a lost node's pods are force-deleted after a minute
    assert opts.gpu_type_label == "nvidia.com/gpu.product"  # GPU feature discovery's


def test_the_gpu_type_label_reaches_the_operator() -> None:
    from adl.operator.main import parse_args

    label = "node.kubernetes.io/instance-type"
    (deploy,) = kinds(render({"scheduler": {"gpuTypeLabel": label}}), "Deployment")
    opts = parse_args(deploy["spec"]["template"]["spec"]["containers"][0]["args"])
    assert opts.gpu_type_label == label


def test_values_schema_knows_exactly_the_policy_knobs() -> None:
    from adl.sched.policy_knobs import knob_names

    schema = json.loads((CHART / "values.schema.json").read_text())
    knobs = schema["properties"]["scheduler"]["properties"]["policyKnobs"]
    assert knobs["propertyNames"]["enum"] == knob_names()


def test_values_schema_ranges_are_the_policys() -> None:
    # A knob value passes the schema exactly when the policy accepts it, so a value file that
    # installs cleanly never stops the operator at start-up.
    from adl.sched.policy_knobs import Knobs, knob_names

    with helm.Chart.load(CHART) as chart:
        for name in knob_names():
            for value in (-1.0, 0.0, 0.5, 1.0, 2.0, 1e6, True, False):
                try:
                    Knobs(**{name: value})
                    policy_ok = True
                except ValueError:
                    policy_ok = False
                try:
                    chart.validate_schema({"scheduler": {"policyKnobs": {name: value}}})
                    schema_ok = True
                except helm.HelmError:
                    schema_ok = False
                assert schema_ok is policy_ok, (name, value)


def test_the_readmes_set_flags_install() -> None:
    # `--set` passes decimals as strings; the README's examples must still install and reach
    # the operator as numbers.
    from adl.operator.main import parse_args

    values = helm.parse_set_string("scheduler.policyKnobs.srpt_power=0.25,scheduler.interval=0.5")
    (deploy,) = kinds(render(values), "Deployment")
    opts = parse_args(deploy["spec"]["template"]["spec"]["containers"][0]["args"])
    assert opts.policy_knobs == {"srpt_power": 0.25} and opts.round_interval == 0.5


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"replicaCount": 2, "peering": {"enabled": False}}, "needs peering.enabled"),
        ({"api": {"port": 9000, "healthPort": 9000}}, "must differ"),
        ({"serviceAccount": {"create": False}}, "serviceAccount.name"),
    ],
)
def test_unsafe_values_do_not_render(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmError, match=message):
        render(values)


def test_a_standby_replica_comes_with_a_disruption_budget() -> None:
    assert kinds(render({}), "PodDisruptionBudget") == []
    docs = render({"replicaCount": 2})
    (pdb,) = kinds(docs, "PodDisruptionBudget")
    (deploy,) = kinds(docs, "Deployment")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == deploy["spec"]["selector"]["matchLabels"]


def test_two_namespaced_releases_of_one_name_do_not_collide() -> None:
    def names(namespace: str, **extra: Any) -> set[tuple[str, str | None, str]]:
        values = {"namespaced": True, "watchNamespaces": ["shared-team"], **extra}
        docs = render(values, namespace=namespace)
        return {
            (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])
            for d in docs
            if d["kind"] in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
        }

    assert names("team-a").isdisjoint(names("team-b"))
    # a full name that leaves no room for the namespace within 63 characters
    long = {"fullnameOverride": "a" * 60}
    a, b = names("team-a", **long), names("team-b", **long)
    assert a.isdisjoint(b)
    assert all(len(name) <= 63 and not name.endswith("-") for _, _, name in a | b)


def test_health_port_and_an_existing_service_account() -> None:
    values = {"api": {"healthPort": 9001}, "serviceAccount": {"create": False, "name": "ops"}}
    docs = render(values)
    pod = kinds(docs, "Deployment")[0]["spec"]["template"]["spec"]
    ports = {p["name"]: p["containerPort"] for p in pod["containers"][0]["ports"]}
    assert ports["health"] == 9001 and "--health-port=9001" in pod["containers"][0]["args"]
    assert pod["serviceAccountName"] == "ops" and kinds(docs, "ServiceAccount") == []


def test_custom_image_and_pull_secrets() -> None:
    (deploy,) = kinds(render(VARIANTS["custom-image"]), "Deployment")
    pod = deploy["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "registry.example/adl-op:1.2.3"
    assert pod["containers"][0]["imagePullPolicy"] == "Always"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    (default,) = kinds(render({}), "Deployment")
    assert default["spec"]["template"]["spec"]["containers"][0]["image"].endswith(":0.1.0")


def test_servicemonitor_only_when_enabled() -> None:
    assert kinds(render({}), "ServiceMonitor") == []
    docs = render(VARIANTS["servicemonitor"])
    (sm,) = kinds(docs, "ServiceMonitor")
    assert sm["spec"]["endpoints"][0]["path"] == "/metrics"
    # scraped on the metrics port, which the Service exposes and the container serves
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    (svc,) = kinds(docs, "Service")
    (port,) = [p for p in svc["spec"]["ports"] if p["name"] == "metrics"]
    assert port["targetPort"] == "metrics"
    assert sm["metadata"]["labels"]["r"] == "p"


def test_namespaced_install_args_and_roles() -> None:
    docs = render(VARIANTS["namespaced"])
    args = kinds(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--all-namespaces" not in args
    watched = {a.split("=", 1)[1] for a in args if a.startswith("--namespace=")}
    assert watched == {"adl-system", "team-a", "team-b"}
    assert {r["metadata"]["namespace"] for r in kinds(docs, "Role")} == watched
    assert {b["metadata"]["namespace"] for b in kinds(docs, "RoleBinding")} == watched
    assert {p["metadata"]["namespace"] for p in kinds(docs, "KopfPeering")} == watched
    default_args = kinds(render({}), "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
    assert "--all-namespaces" in default_args["args"]


def test_values_schema_rejects_bad_values() -> None:
    with helm.Chart.load(CHART) as chart:
        for bad in (
            {"replicaCount": -1},
            {"namespaced": "yes"},
            {"image": {"pullPolicy": "Sometimes"}},
            {"unknownKey": 1},
            {"metrics": {"serviceMonitor": {"interval": "often"}}},
            {"scheduler": {"policyKnobs": {"srpt_pwr": 0.25}}},
            {"scheduler": {"policyKnobs": {"srpt_power": "high"}}},
            {"scheduler": {"policyKnobs": {"ramp_factor": 0.5}}},
            {"scheduler": {"interval": "soon"}},
            {"scheduler": {"nodeLostAfter": 0}},
            {"scheduler": {"gpuTypeLabel": ""}},
            {"scheduler": {"gpuTypeLabel": "gpu type"}},
            {"api": {"docs": "yes"}},
            {"api": {"metricsPort": 80}},
            {"networkPolicy": {"metricsFrom": "prometheus"}},
        ):
            with pytest.raises(helm.HelmError):
                chart.validate_schema(bad)


def test_chart_ships_the_generated_crd() -> None:
    from adl.operator.crd import crd_yaml

    with helm.Chart.load(CHART) as chart:
        crds = {c["filename"]: c["data"] for c in chart.crds}
    assert any(data == crd_yaml() for data in crds.values())


def user_role(doc: dict[str, Any]) -> bool:
    """The ClusterRoles aggregated into admin/edit/view for people (not the operator's)."""
    return doc["metadata"]["labels"].get("app.kubernetes.io/component") == "user-roles"


def granted(docs: list[dict[str, Any]]) -> frozenset[perms.Permission]:
    out: set[perms.Permission] = set()
    for role in kinds(docs, "ClusterRole"):
        if user_role(role):
            continue
        out |= perms.from_rules(role["rules"], perms.CLUSTER)
    for role in kinds(docs, "Role"):
        out |= perms.from_rules(role["rules"], perms.NAMESPACED)
    return frozenset(out)


@pytest.mark.parametrize(
    ("variant", "namespaced"),
    [("disruption-budgets", False), ("disruption-budgets-namespaced", True)],
)
def test_rbac_grants_the_job_budgets_only_when_they_are_on(variant: str, namespaced: bool) -> None:
    docs = render(VARIANTS[variant])
    assert granted(docs) == perms.required(
        namespaced=namespaced, peering=True, disruption_budgets=True
    )
    budgets = perms.Permission(
        "policy",
        "poddisruptionbudgets",
        "create",
        perms.NAMESPACED if namespaced else perms.CLUSTER,
    )
    assert budgets in granted(docs) and budgets not in granted(render(VARIANTS["default"]))
    args = kinds(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--disruption-budgets" in args
    assert "--disruption-budgets" not in str(render(VARIANTS["default"]))
    from adl.operator.main import parse_args

    assert parse_args(args).disruption_budgets


@pytest.mark.parametrize(
    ("variant", "namespaced", "peering", "kueue"),
    [
        ("default", False, True, False),
        ("namespaced", True, True, False),
        ("no-peering", False, False, False),
        ("kueue", False, True, True),
        ("kueue-namespaced", True, True, True),
    ],
)
def test_rbac_grants_exactly_the_declared_permissions(
    variant: str, namespaced: bool, peering: bool, kueue: bool
) -> None:
    docs = render(VARIANTS[variant])
    assert granted(docs) == perms.required(namespaced=namespaced, peering=peering, kueue=kueue)
    args = kinds(docs, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert ("--kueue" in args) == kueue
    from adl.operator.main import parse_args

    assert parse_args(args).kueue == kueue
    for rule in (
        r for role in kinds(docs, "ClusterRole") + kinds(docs, "Role") for r in role["rules"]
    ):
        assert "*" not in rule["verbs"] and "*" not in rule["resources"], rule
    bindings = kinds(docs, "ClusterRoleBinding") + kinds(docs, "RoleBinding")
    sa = kinds(docs, "ServiceAccount")[0]["metadata"]["name"]
    for b in bindings:
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": "adl-system"}]


def test_user_roles_aggregate_into_the_built_in_roles_and_bind_no_one() -> None:
    docs = render({})
    roles = {
        r["metadata"]["name"].rsplit("-", 1)[-1]: r
        for r in kinds(docs, "ClusterRole")
        if user_role(r)
    }
    assert sorted(roles) == ["edit", "view"]
    labels = {k: r["metadata"]["labels"] for k, r in roles.items()}
    assert labels["edit"]["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert labels["edit"]["rbac.authorization.k8s.io/aggregate-to-admin"] == "true"
    assert labels["view"]["rbac.authorization.k8s.io/aggregate-to-view"] == "true"
    view = perms.from_rules(roles["view"]["rules"], perms.CLUSTER)
    assert {p.verb for p in view} == {"get", "list", "watch"}
    edit = perms.from_rules(roles["edit"]["rules"], perms.CLUSTER)
    assert not [
        p for p in edit if p.resource.endswith("/status") and p.verb not in ("get", "list", "watch")
    ]
    bound = {
        b["roleRef"]["name"] for b in kinds(docs, "ClusterRoleBinding") + kinds(docs, "RoleBinding")
    }
    assert bound.isdisjoint(r["metadata"]["name"] for r in roles.values())
    assert not [
        r for r in kinds(render({"userRoles": {"aggregate": False}}), "ClusterRole") if user_role(r)
    ]


def test_secrets_are_read_and_made_only_where_jobs_run() -> None:
    # The operator makes one <job>-adl-token Secret per job and reads it back (its token after
    # a restart, its owner before use); names are per job, so resourceNames cannot narrow it.
    # What can be narrowed: no list/watch/update/delete anywhere, and in a namespaced install
    # no Secret rule in the ClusterRole at all.
    def secret_rules(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
        roles = kinds(docs, kind)
        return [r for role in roles for r in role["rules"] if "secrets" in r["resources"]]

    cluster_wide = render({})
    (rule,) = secret_rules(cluster_wide, "ClusterRole")
    assert sorted(rule["verbs"]) == ["create", "get"] and rule["resources"] == ["secrets"]
    docs = render(VARIANTS["namespaced"])
    assert secret_rules(docs, "ClusterRole") == []
    namespaces = {r["metadata"]["namespace"] for r in kinds(docs, "Role")}
    assert namespaces == {"adl-system", "team-a", "team-b"}
    for rule in secret_rules(docs, "Role"):
        assert sorted(rule["verbs"]) == ["create", "get"]


def test_notes_say_a_cluster_wide_install_reads_secrets_everywhere() -> None:
    def notes(values: dict[str, Any]) -> str:
        with helm.Chart.load(CHART) as chart:
            out = chart.render(values, name="adl", namespace="adl-system", is_install=True)
        return out["adl/templates/NOTES.txt"]

    text = notes({})
    assert "Secrets in every namespace" in text and "namespaced=true" in text
    assert "Secrets in every namespace" not in notes(VARIANTS["namespaced"])


def test_dashboard_queries_only_exported_metrics() -> None:
    import json
    import re

    from adl.api.metrics import METRIC_NAMES

    (cm,) = kinds(render({}), "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(cm["data"]["adl-overview.json"])
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert exprs
    exported = set(METRIC_NAMES)
    histograms = {"adl_round_latency_seconds"}
    allowed = exported | {f"{h}_{s}" for h in histograms for s in ("bucket", "sum", "count")}
    used = {m for e in exprs for m in re.findall(r"\badl_[a-z_]+\b", e)}
    assert used <= allowed, f"dashboard queries metrics the API does not export: {used - allowed}"
    assert {"adl_jobs", "adl_job_goodput", "adl_round_latency_seconds_bucket"} <= used
    # every operator replica (the standby too) exports the jobs' state from the same objects:
    # a panel takes one copy of it, never the sum over replicas
    for e in exprs:
        if re.search(r"\badl_job(s|_[a-z_]+)\b", e):
            assert "max" in e, e
    assert kinds(render({"grafana": {"dashboard": {"enabled": False}}}), "ConfigMap") == []


def test_dashboard_metrics_are_really_exported_by_the_api() -> None:
    from fastapi.testclient import TestClient

    from adl.api.app import create_app
    from adl.api.metrics import METRIC_NAMES
    from adl.api.store import JobSnapshot
    from adl.models import AdaptiveJobStatus

    class Store:
        def token_owner(self, token: str, job: str) -> None:
            return None

        def put_hints(self, job: str, hints: object) -> None: ...

        def get_hints(self, job: str) -> None:
            return None

        def group_info(self, job: str) -> None:
            return None

        def list_jobs(self) -> list[JobSnapshot]:
            st = AdaptiveJobStatus(phase="Running", allocation=["a"], goodput=1.0, batch_size=8)
            return [JobSnapshot("ns/j", st)]

        def ready(self) -> bool:
            return True

    app = create_app(Store())  # type: ignore[arg-type]
    app.state.metrics.observe_round(0.01)
    text = TestClient(app).get("/metrics").text
    for name in METRIC_NAMES:
        if name != "adl_hints_reports_total":  # appears once a report was counted
            assert f"\n{name}" in text or text.startswith(name), name


def pod_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (deploy,) = kinds(docs, "Deployment")
    return deploy["spec"]["template"]["spec"]


def test_security_contexts_default_to_the_images_user_and_can_be_overridden() -> None:
    pod = pod_spec(render({}))
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "runAsGroup": 10001,
        "fsGroup": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert pod["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    # OpenShift: no fixed IDs, the rest of the hardening stays (the README's --set flags)
    flags = "podSecurityContext.runAsUser=null,podSecurityContext.runAsGroup=null,"
    flags += "podSecurityContext.fsGroup=null"
    assert helm.parse_set_string(flags) == VARIANTS["arbitrary-uid"]
    pod = pod_spec(render(VARIANTS["arbitrary-uid"]))
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    pod = pod_spec(render({"podSecurityContext": {"runAsUser": 1000700000}}))
    assert pod["securityContext"]["runAsUser"] == 1000700000
    # a values file merges into the defaults; null drops the whole context
    values = {"podSecurityContext": None, "securityContext": {"runAsNonRoot": True}}
    pod = pod_spec(render(values))
    assert "securityContext" not in pod
    container = pod["containers"][0]["securityContext"]
    assert container["runAsNonRoot"] is True and container["readOnlyRootFilesystem"] is True
    with pytest.raises(helm.HelmError, match="podSecurityContext/runAsUser"):
        render({"podSecurityContext": {"runAsUser": "nobody"}})


def test_a_standby_is_kept_off_the_active_replicas_node_unless_affinity_is_given() -> None:
    assert "affinity" not in pod_spec(render({}))
    docs = render({"replicaCount": 2})
    (deploy,) = kinds(docs, "Deployment")
    anti = pod_spec(docs)["affinity"]["podAntiAffinity"]
    assert list(anti) == ["preferredDuringSchedulingIgnoredDuringExecution"]  # soft, never required
    (term,) = anti["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    selector = term["podAffinityTerm"]["labelSelector"]
    assert selector == {"matchLabels": deploy["spec"]["selector"]["matchLabels"]}
    mine = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}
    for replicas in (1, 2):
        assert pod_spec(render({"replicaCount": replicas, "affinity": mine}))["affinity"] == mine


def test_topology_spread_constraints_pass_through() -> None:
    assert "topologySpreadConstraints" not in pod_spec(render({}))
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "adl"}},
        }
    ]
    values = {"replicaCount": 2, "topologySpreadConstraints": spread}
    assert pod_spec(render(values))["topologySpreadConstraints"] == spread


def test_image_by_digest_ignores_the_tag() -> None:
    digest = VARIANTS["digest"]["image"]["digest"]
    values = {"image": {"repository": "registry.example/adl-op", "tag": "1.2.3", "digest": digest}}
    image = pod_spec(render(values))["containers"][0]["image"]
    assert image == f"registry.example/adl-op@{digest}"
    for bad in ("sha256:abc", "sha256:" + "A" * 64, "sha512:" + "a" * 64, "latest", digest + " "):
        with pytest.raises(helm.HelmError, match="image/digest"):
            render({"image": {"digest": bad}})


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A LabelSelector as the API server evaluates it (the operators the chart uses)."""
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for expr in selector.get("matchExpressions", []):
        if expr["operator"] == "Exists":
            ok = expr["key"] in labels
        elif expr["operator"] == "In":
            ok = labels.get(expr["key"]) in expr["values"]
        else:
            raise AssertionError(f"selects() does not know {expr['operator']}")
        if not ok:
            return False
    return True


def test_network_policy_admits_adl_workers_and_extra_peers_to_the_api_port() -> None:
    from adl.models import AdaptiveJobSpec
    from adl.operator import pods as P

    assert len(operator_policies(render({}))) == 1  # on by default
    assert kinds(render({"networkPolicy": {"enabled": False}}), "NetworkPolicy") == []
    docs = render(VARIANTS["networkpolicy"])
    (policy,) = operator_policies(docs)
    (deploy,) = kinds(docs, "Deployment")
    spec = policy["spec"]
    assert spec["podSelector"] == deploy["spec"]["selector"]
    assert spec["policyTypes"] == ["Ingress"]
    (rule,) = spec["ingress"]  # no metricsFrom: nobody reaches the metrics port
    http = [p for p in pod_spec(docs)["containers"][0]["ports"] if p["name"] == "http"]
    assert rule["ports"] == [{"port": http[0]["containerPort"], "protocol": "TCP"}]
    workers, *extra = rule["from"]
    assert extra == [{"namespaceSelector": {}}]

    # a worker pod as the operator builds it (with the user's template labels) is let in,
    # the operator's own pods and unrelated pods are not
    template = {
        "metadata": {"labels": {"team": "a"}},
        "spec": {"containers": [{"name": "t", "image": "img:1"}]},
    }
    job = P.JobRef(name="bert", namespace="team-a", uid="u")
    worker = P.build_pod(
        job, AdaptiveJobSpec(template=template), group=1, index=0, node="n", replicas=1, env={}
    )
    assert selects(workers["podSelector"], worker["metadata"]["labels"])
    operator = deploy["spec"]["template"]["metadata"]["labels"]
    assert not selects(workers["podSelector"], operator)
    assert not selects(workers["podSelector"], {"team": "a"})

    # only from the namespaces the operator watches
    watched = {"kubernetes.io/metadata.name": "adl-system"}
    assert selects(workers["namespaceSelector"], watched)
    assert not selects(workers["namespaceSelector"], {"kubernetes.io/metadata.name": "team-a"})
    values = {"api": {"port": 9000}}
    (policy,) = kinds(render(values), "NetworkPolicy")
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": 9000, "protocol": "TCP"}]
    assert rule["from"][0]["namespaceSelector"] == {}  # cluster-wide: workers in any namespace


def test_notes_warn_when_the_network_policy_shuts_out_prometheus() -> None:
    def notes(values: dict[str, Any]) -> str:
        with helm.Chart.load(CHART) as chart:
            out = chart.render(values, name="adl", namespace="adl-system", is_install=True)
        return out["adl/templates/NOTES.txt"]

    both: dict[str, Any] = {
        "networkPolicy": {"enabled": True},
        "metrics": {"serviceMonitor": {"enabled": True}},
    }
    assert "networkPolicy.metricsFrom" in notes(both)
    both["networkPolicy"]["metricsFrom"] = [{"namespaceSelector": {}}]
    assert "networkPolicy.metricsFrom" not in notes(both)
    assert "networkPolicy.metricsFrom" not in notes({})


def test_network_policy_keeps_metrics_from_the_workers_and_opens_them_to_metrics_from() -> None:
    # /metrics names every tenant's jobs; any tenant can label a pod adl.dev/job, so the
    # workers' rule must not reach the metrics port
    prometheus = {"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}
    docs = render({"networkPolicy": {"metricsFrom": [prometheus]}})
    (policy,) = kinds(docs, "NetworkPolicy")
    ports = {p["name"]: p["containerPort"] for p in pod_spec(docs)["containers"][0]["ports"]}
    api_rule, metrics_rule = policy["spec"]["ingress"]
    assert api_rule["ports"] == [{"port": ports["http"], "protocol": "TCP"}]
    assert metrics_rule == {
        "ports": [{"port": ports["metrics"], "protocol": "TCP"}],
        "from": [prometheus],
    }
    # the health port is the kubelet's, which NetworkPolicy does not filter
    opened = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    assert ports["metrics"] not in {p["port"] for p in api_rule["ports"]}
    assert opened == {ports["http"], ports["metrics"]}


def test_api_docs_only_when_enabled() -> None:
    from adl.operator.main import parse_args

    def opts(values: dict[str, Any]) -> Any:
        return parse_args(pod_spec(render(values))["containers"][0]["args"])

    assert opts({}).api_docs is False
    assert opts({"api": {"docs": True}}).api_docs is True
    o = opts({"api": {"metricsPort": 9100}})
    assert o.metrics_port == 9100


def test_namespace_ceilings_reach_the_operator() -> None:
    from adl.operator.main import parse_args
    from adl.operator.tenancy import Ceilings, NamespacePolicy

    def ceilings(values: dict[str, Any]) -> Any:
        return parse_args(pod_spec(render(values))["containers"][0]["args"]).ceilings

    assert ceilings({}) == Ceilings()  # no ceilings unless an admin sets them
    values = {
        "scheduler": {
            "maxPriority": 0,
            "allowNonPreemptible": False,
            "namespacePolicies": {
                "team-a": {"maxPriority": 10},
                "ops": {"maxPriority": None, "allowNonPreemptible": True},
            },
        }
    }
    got = ceilings(values)
    assert got.of("elsewhere") == NamespacePolicy(0, False)
    assert got.of("team-a") == NamespacePolicy(10, False)  # the rest from the default
    assert got.of("ops") == NamespacePolicy(None, True)
    # --set passes the same
    flags = "scheduler.maxPriority=5,scheduler.namespacePolicies.team-a.maxPriority=7"
    got = ceilings(helm.parse_set_string(flags))
    assert got.of("x").max_priority == 5 and got.of("team-a").max_priority == 7
    with helm.Chart.load(CHART) as chart:
        for bad in (
            {"maxPriority": 5000},
            {"maxPriority": "high"},
            {"allowNonPreemptible": "no"},
            {"namespacePolicies": {"team-a": {"maxPriorty": 1}}},
            {"namespacePolicies": {"Team_A": {"maxPriority": 1}}},
            {"namespacePolicies": {"team-a": 10}},
        ):
            with pytest.raises(helm.HelmError):
                chart.validate_schema({"scheduler": bad})


def test_metrics_port_must_differ_from_the_others() -> None:
    for values in ({"api": {"metricsPort": 8080}}, {"api": {"metricsPort": 8081}}):
        with pytest.raises(helm.HelmError, match="metricsPort"):
            render(values)


def test_name_overrides() -> None:
    from adl.operator.main import parse_args

    def names(docs: list[dict[str, Any]]) -> set[str]:
        kinds_ = ("Deployment", "Service", "ServiceAccount", "ConfigMap", "NetworkPolicy")
        return {d["metadata"]["name"] for d in docs if d["kind"] in kinds_}

    values: dict[str, Any] = {
        "fullnameOverride": "platform-sched",
        "networkPolicy": {"enabled": True},
    }
    docs = render(values)
    assert names(docs) == {"platform-sched", "platform-sched-dashboard"}
    opts = parse_args(pod_spec(docs)["containers"][0]["args"])
    assert opts.api_url == "http://platform-sched.adl-system.svc:8080"

    docs = render({"nameOverride": "sched"})
    assert names(docs) == {"adl-sched", "adl-sched-dashboard"}
    (deploy,) = kinds(docs, "Deployment")
    assert deploy["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == "sched"
    (svc,) = kinds(docs, "Service")
    assert svc["spec"]["selector"]["app.kubernetes.io/name"] == "sched"

    # cut to 63 characters, never ending in "-"
    (deploy,) = kinds(render({"fullnameOverride": "a" * 62 + "-bc"}), "Deployment")
    assert deploy["metadata"]["name"] == "a" * 62
    with pytest.raises(helm.HelmError, match="fullnameOverride"):
        render({"fullnameOverride": "Platform_Sched"})


def test_a_namespaced_install_fences_the_workers_ports_in_every_watched_namespace() -> None:
    """Rank 0's rendezvous store (torch's TCPStore) has no authentication: only adl worker
    pods of the same namespace may reach a worker pod, on any port."""
    from adl.models import AdaptiveJobSpec
    from adl.operator import pods as P

    values = {"namespaced": True, "watchNamespaces": ["team-a", "team-b"]}
    policies = [
        d
        for d in kinds(render(values), "NetworkPolicy")
        if d["metadata"]["labels"].get("app.kubernetes.io/component") == "workers"
    ]
    assert sorted(p["metadata"]["namespace"] for p in policies) == [
        "adl-system",
        "team-a",
        "team-b",
    ]
    template = {"spec": {"containers": [{"name": "t", "image": "img:1"}]}}
    job = P.JobRef(name="bert", namespace="team-a", uid="u")
    worker = P.build_pod(
        job, AdaptiveJobSpec(template=template), group=1, index=0, node="n", replicas=1, env={}
    )
    labels = worker["metadata"]["labels"]
    for policy in policies:
        spec = policy["spec"]
        assert selects(spec["podSelector"], labels)
        (rule,) = spec["ingress"]
        (peer,) = rule["from"]
        assert "ports" not in rule and "namespaceSelector" not in peer  # same namespace only
        assert selects(peer["podSelector"], labels)
        assert not selects(peer["podSelector"], {"team": "a"})
    # cluster-wide, or turned off: no workers' policy (the chart cannot know every namespace)
    for other in ({}, {"namespaced": True, "networkPolicy": {"workers": False}}):
        docs = render(other)
        assert all(
            d["metadata"]["labels"].get("app.kubernetes.io/component") != "workers"
            for d in kinds(docs, "NetworkPolicy")
        )


def test_autoscaling_values_reach_the_operator_s_capacity_rule() -> None:
    from adl.operator.main import parse_args
    from adl.sched.capacity import MAX_EMPTIED_PER_ROUND

    (deploy,) = kinds(render(VARIANTS["autoscaling"]), "Deployment")
    opts = parse_args(deploy["spec"]["template"]["spec"]["containers"][0]["args"])
    assert opts.capacity is not None and opts.capacity.max_emptied_per_round == 2
    assert opts.capacity.drop_low_value
    (plain,) = kinds(render({"autoscaling": {"enabled": True}}), "Deployment")
    rule = parse_args(plain["spec"]["template"]["spec"]["containers"][0]["args"]).capacity
    assert rule is not None and (rule.max_emptied_per_round, rule.drop_low_value) == (1, False)
    (off,) = kinds(render({}), "Deployment")
    assert parse_args(off["spec"]["template"]["spec"]["containers"][0]["args"]).capacity is None
    # the schema's range is the rule's: a value that installs never stops the operator
    schema = json.loads((CHART / "values.schema.json").read_text())
    bounds = schema["properties"]["autoscaling"]["properties"]["emptyNodesPerRound"]
    assert (bounds["minimum"], bounds["maximum"]) == (0, MAX_EMPTIED_PER_ROUND)
