"""Scenario 1: the real API server enforces the CRD generated from adl.models, with the CRD's
own messages, and agrees with pydantic (what the CLI and the controller check) on every case."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from chart_install import apply_crds
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError

from adl.models import MAX_JOB_KIND, AdaptiveJobSpec
from adl.operator.crd import GROUP, MAX_NAME_LENGTH, PLURAL, VERSION


@pytest.fixture(scope="module")
def jobs(admin_api: client.ApiClient) -> client.CustomObjectsApi:
    apply_crds(admin_api)
    return client.CustomObjectsApi(admin_api)


def manifest(name: str = "valid", **spec: Any) -> dict[str, Any]:
    container = {"name": "trainer", "image": "registry.example/t:1", "command": ["python", "t.py"]}
    body: dict[str, Any] = {"template": {"spec": {"containers": [container]}}}
    body.update(spec)
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "AdaptiveJob",
        "metadata": {"name": name},
        "spec": body,
    }


def create(jobs: client.CustomObjectsApi, namespace: str, body: dict[str, Any]) -> Any:
    return jobs.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def refusal(call: Any) -> str:
    """The API server's message for a refused write (422 Invalid)."""
    with pytest.raises(ApiException) as err:
        call()
    assert err.value.status == 422, err.value.body
    return str(json.loads(err.value.body)["message"])


#: (case, spec fields, the message the API server must give)
INVALID: list[tuple[str, dict[str, Any], str]] = [
    ("min-above-max", {"minReplicas": 5, "maxReplicas": 2}, "minReplicas must be <= maxReplicas"),
    (
        "claim-and-class",
        {"checkpoint": {"claimName": "ckpt", "storageClass": "fast"}},
        "checkpoint: set claimName or storageClass, not both",
    ),
    ("negative-min", {"minReplicas": -1}, "spec.minReplicas: Invalid value: -1"),
    ("zero-max", {"maxReplicas": 0}, "spec.maxReplicas: Invalid value: 0"),
    ("negative-gpus", {"gpusPerReplica": -1}, "spec.gpusPerReplica: Invalid value: -1"),
    ("negative-restarts", {"maxRestarts": -1}, "spec.maxRestarts: Invalid value: -1"),
    ("zero-weight", {"weight": 0}, "spec.weight: Invalid value: 0"),
    ("negative-weight", {"weight": -2.5}, "spec.weight: Invalid value: -2.5"),
    ("priority-below", {"priority": -1001}, "spec.priority: Invalid value: -1001"),
    (
        "zero-grace",
        {"terminationGracePeriodSeconds": 0},
        "spec.terminationGracePeriodSeconds: Invalid value: 0",
    ),
    ("gpus-above", {"gpusPerReplica": 17}, "spec.gpusPerReplica: Invalid value: 17"),
    # found here: the API server refuses a claim of this size only when the operator makes it
    ("size-not-a-quantity", {"checkpoint": {"size": "lots"}}, "spec.checkpoint.size"),
    ("size-negative", {"checkpoint": {"size": "-1Gi"}}, "spec.checkpoint.size"),
    # found here: "" passed pydantic's "not both" check but not the CRD's has()
    (
        "empty-claim-with-class",
        {"checkpoint": {"claimName": "", "storageClass": "fast"}},
        "spec.checkpoint.claimName",
    ),
    ("empty-class", {"checkpoint": {"storageClass": ""}}, "spec.checkpoint.storageClass"),
    ("empty-job-kind", {"jobKind": ""}, "spec.jobKind"),
    ("job-kind-with-space", {"jobKind": "two words"}, "spec.jobKind"),
    ("job-kind-with-newline", {"jobKind": "bert\n"}, "spec.jobKind"),
    ("job-kind-too-long", {"jobKind": "k" * (MAX_JOB_KIND + 1)}, "spec.jobKind"),
]


@pytest.mark.parametrize(("spec", "message"), [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid_spec_is_refused_with_the_crds_message(
    jobs: client.CustomObjectsApi, namespace: str, spec: dict[str, Any], message: str
) -> None:
    text = refusal(lambda: create(jobs, namespace, manifest(**spec)))
    assert message in text, text
    # the CLI and the controller (pydantic) refuse the same spec
    with pytest.raises(ValidationError):
        AdaptiveJobSpec.model_validate(manifest(**spec)["spec"])


def test_name_over_the_limit_is_refused(jobs: client.CustomObjectsApi, namespace: str) -> None:
    longest = "n" * MAX_NAME_LENGTH
    create(jobs, namespace, manifest(longest))
    text = refusal(lambda: create(jobs, namespace, manifest(longest + "x")))
    assert f"AdaptiveJob names are limited to {MAX_NAME_LENGTH} characters" in text, text


def test_gpus_per_replica_cannot_change(jobs: client.CustomObjectsApi, namespace: str) -> None:
    create(jobs, namespace, manifest(gpusPerReplica=2))

    def patch(**spec: Any) -> Any:
        return jobs.patch_namespaced_custom_object(
            GROUP, VERSION, namespace, PLURAL, "valid", {"spec": spec}
        )

    assert "gpusPerReplica is immutable" in refusal(lambda: patch(gpusPerReplica=4))
    # the rest of the spec stays editable (the rule is on the one field)
    assert patch(maxReplicas=8)["spec"]["maxReplicas"] == 8


def test_defaults_are_the_models_defaults(jobs: client.CustomObjectsApi, namespace: str) -> None:
    """What the API server stores for a minimal job is what pydantic makes of it."""
    stored = create(jobs, namespace, manifest())["spec"]
    expected = AdaptiveJobSpec.model_validate(manifest()["spec"]).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )
    assert stored == expected


def test_a_job_as_the_cli_writes_it_is_accepted(
    jobs: client.CustomObjectsApi, namespace: str
) -> None:
    """Every spec pydantic accepts must be accepted by the API server: here the full dump the
    CLI could send, nulls included."""
    spec = AdaptiveJobSpec.model_validate(
        manifest(checkpoint={"storageClass": "fast"}, minReplicas=0)["spec"]
    )
    body = manifest("from-cli")
    body["spec"] = spec.model_dump(mode="json", by_alias=True)
    assert body["spec"]["checkpoint"]["claimName"] is None
    stored = create(jobs, namespace, copy.deepcopy(body))["spec"]
    assert stored["checkpoint"]["storageClass"] == "fast"


def test_a_job_kind_pydantic_accepts_is_accepted(
    jobs: client.CustomObjectsApi, namespace: str
) -> None:
    """The API server's regular expressions (RE2) and pydantic's agree on what a kind is."""
    for i, kind in enumerate(
        ("ghcr.io/team/bert:1.2@sha256:ab12", "a+b=c_d-e", "k" * MAX_JOB_KIND)
    ):
        assert AdaptiveJobSpec.model_validate(manifest(jobKind=kind)["spec"]).job_kind == kind
        assert (
            create(jobs, namespace, manifest(f"kind-{i}", jobKind=kind))["spec"]["jobKind"] == kind
        )
