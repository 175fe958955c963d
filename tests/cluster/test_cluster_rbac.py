"""Scenario 7: the chart's RBAC under the real authorizer, cluster-wide and namespaced.

- Every request the operator makes (from the API server's audit log) is allowed, and every
  grant of ``adl.operator.permissions`` is used by a job's life (create, suspend, delete).
- The ServiceAccount may do exactly what ``adl.operator.permissions`` declares, nothing more:
  its rules as the authorizer reports them (SelfSubjectRulesReview) minus what any account
  gets, in a watched namespace and in another one.

The kmock suite (tests/integration/test_operator_rbac.py) compares the same declarations with
the rendered rules; here the API server decides.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from chart_install import Installation
from cluster_jobs import SCOPES, job_manifest, run_a_job
from controlplane import ControlPlane
from kubernetes import client
from operator_process import OperatorProcess

from adl.operator import permissions as perms
from adl.operator.crd import GROUP, PLURAL, VERSION
from tests.waiting import wait_for

Triple = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb)


def triples(permissions: frozenset[perms.Permission]) -> set[Triple]:
    return {(p.group, p.resource, p.verb) for p in permissions}


def audited_calls(events: list[dict[str, Any]]) -> list[tuple[Triple, str | None, str]]:
    """(call, namespace, the authorizer's decision) of every audited resource request. (The
    decision, not the code: admission refuses with 403 too, e.g. a create in a namespace that
    is being deleted.)"""
    calls = []
    for event in events:
        ref = event.get("objectRef")
        if not ref:  # discovery and other non-resource URLs: open to every user
            continue
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        decision = (event.get("annotations") or {}).get("authorization.k8s.io/decision")
        call = (ref.get("apiGroup", ""), resource, event["verb"])
        calls.append((call, ref.get("namespace"), str(decision)))
    return calls


@pytest.mark.parametrize("installed_chart", SCOPES, indirect=True)
def test_every_call_is_allowed_and_every_grant_used(
    installed_chart: Installation,
    operator: OperatorProcess,
    control_plane: ControlPlane,
    admin_api: client.ApiClient,
    namespace: str,
) -> None:
    run_a_job(admin_api, namespace, operator)
    operator.stop()
    calls = audited_calls(control_plane.audit_events(installed_chart.username))
    assert calls, "the audit log recorded nothing of the operator"
    assert {d for _, _, d in calls} <= {"allow", "forbid"}, "audit events without a decision"
    denied = sorted({f"{c} in {ns or 'the cluster'}" for c, ns, d in calls if d == "forbid"})
    assert denied == [], f"the authorizer refused the operator: {denied}\n{operator.tail()}"
    if installed_chart.namespaced:
        watched = set(installed_chart.watch_namespaces)
        outside = sorted({f"{c} in {ns}" for c, ns, _ in calls if ns and ns not in watched})
        assert outside == [], f"namespaced operator reached outside {watched}: {outside}"
    granted = triples(perms.required(namespaced=installed_chart.namespaced, peering=True))
    # checked by the API server inside a create (an ownerReference that blocks its owner's
    # deletion), never a request of its own; the next test shows it is granted
    implicit = {(GROUP, f"{PLURAL}/finalizers", "update")}
    unused = sorted(granted - implicit - {c for c, _, _ in calls})
    assert unused == [], f"granted but never used by a job's life: {unused}"


def effective_rules(api: client.ApiClient, namespace: str) -> set[Triple]:
    """What the authorizer lets this client do in ``namespace`` (cluster grants included)."""
    review = client.V1SelfSubjectRulesReview(
        spec=client.V1SelfSubjectRulesReviewSpec(namespace=namespace)
    )
    out = client.AuthorizationV1Api(api).create_self_subject_rules_review(review)
    assert not out.status.incomplete, out.status.evaluation_error
    rules: set[Triple] = set()
    for rule in out.status.resource_rules:
        assert not rule.resource_names, f"unexpected per-name rule: {rule}"
        for group in rule.api_groups or []:
            for resource in rule.resources or []:
                rules |= {(group, resource, verb) for verb in rule.verbs}
    return rules


@pytest.mark.parametrize("installed_chart", SCOPES, indirect=True)
def test_nothing_more_is_granted(
    installed_chart: Installation,
    as_service_account: Callable[..., client.ApiClient],
    admin_api: client.ApiClient,
    namespace: str,
) -> None:
    operator_api = as_service_account(installed_chart.namespace, installed_chart.service_account)
    # what every authenticated account may do (self reviews, discovery): not the chart's grant
    baseline_api = as_service_account(installed_chart.namespace, "default")
    elsewhere = client.CoreV1Api(admin_api).create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(generate_name="elsewhere-"))
    )
    other = elsewhere.metadata.name
    try:
        for ns, watched in ((namespace, True), (other, False)):
            granted = effective_rules(operator_api, ns) - effective_rules(baseline_api, ns)
            if installed_chart.namespaced and not watched:
                expected = triples(perms.CLUSTER_PERMISSIONS)
            else:
                expected = triples(
                    perms.required(namespaced=installed_chart.namespaced, peering=True)
                )
            extra, missing = sorted(granted - expected), sorted(expected - granted)
            assert granted == expected, f"in {ns}: extra {extra}, missing {missing}"
        # and the authorizer answers a few questions directly, as the ServiceAccount
        assert allowed(operator_api, namespace, "", "secrets", "get")
        assert not allowed(operator_api, namespace, "", "secrets", "list")
        # a namespaced install reaches no Secret outside its namespaces
        assert allowed(operator_api, other, "", "secrets", "get") == (
            not installed_chart.namespaced
        )
        assert not allowed(
            operator_api, None, "rbac.authorization.k8s.io", "clusterroles", "create"
        )
        assert not allowed(operator_api, namespace, GROUP, PLURAL, "delete")
        assert allowed(operator_api, namespace, GROUP, f"{PLURAL}/finalizers", "update")
    finally:
        client.CoreV1Api(admin_api).delete_namespace(other)


def allowed(
    api: client.ApiClient, namespace: str | None, group: str, resource: str, verb: str
) -> bool:
    name, _, sub = resource.partition("/")
    attrs = client.V1ResourceAttributes(
        namespace=namespace, group=group, resource=name, subresource=sub or None, verb=verb
    )
    review = client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(resource_attributes=attrs)
    )
    return bool(
        client.AuthorizationV1Api(api).create_self_subject_access_review(review).status.allowed
    )


def bind_user(api: client.ApiClient, namespace: str, user: str, cluster_role: str) -> None:
    binding = client.V1RoleBinding(
        metadata=client.V1ObjectMeta(name=f"{user}-{cluster_role}"),
        role_ref=client.V1RoleRef(
            api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=cluster_role
        ),
        subjects=[
            client.RbacV1Subject(api_group="rbac.authorization.k8s.io", kind="User", name=user)
        ],
    )
    client.RbacAuthorizationV1Api(api).create_namespaced_role_binding(namespace, binding)


@pytest.mark.parametrize("installed_chart", SCOPES, indirect=True)
def test_namespace_users_get_jobs_through_the_default_roles(
    installed_chart: Installation,
    control_plane: ControlPlane,
    admin_api: client.ApiClient,
    namespace: str,
) -> None:
    """A tenant holding a namespace's built-in `edit` (or `admin`) role runs AdaptiveJobs there,
    and one with `view` reads them: the chart aggregates its rules into those roles (kmock has
    no RBAC to show that users were locked out)."""
    bind_user(admin_api, namespace, "tenant", "edit")
    bind_user(admin_api, namespace, "viewer", "view")
    tenant = control_plane.api_client(control_plane.client_kubeconfig("tenant"))
    viewer = control_plane.api_client(control_plane.client_kubeconfig("viewer"))

    def can(api: client.ApiClient, verb: str, resource: str = PLURAL) -> bool:
        # the aggregation controller fills the roles a moment after the install
        return allowed(api, namespace, GROUP, resource, verb)

    for verb in ("create", "get", "list", "watch", "patch", "delete"):
        wait_for(lambda verb=verb: can(tenant, verb), timeout=30, what=f"edit may {verb} jobs")
    for verb in ("get", "list", "watch"):
        wait_for(lambda verb=verb: can(viewer, verb), timeout=30, what=f"view may {verb} jobs")
    assert not can(viewer, "create") and not can(viewer, "delete")
    # the status is the operator's to write, everyone's to read
    assert not can(tenant, "patch", f"{PLURAL}/status")
    assert can(viewer, "get", f"{PLURAL}/status")
    # and for real: the tenant creates a job, the viewer lists it
    client.CustomObjectsApi(tenant).create_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, job_manifest("tenants")
    )
    listed = client.CustomObjectsApi(viewer).list_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL
    )
    assert [j["metadata"]["name"] for j in listed["items"]] == ["tenants"]
