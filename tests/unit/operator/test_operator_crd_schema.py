"""The generated CRD: current on disk, structural, and enforcing the models' defaults and bounds
exactly as the API server would (kmock enforces none of this, so it is checked here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import celpy
import jsonschema
import pydantic
import pytest
import yaml

from adl.models import AdaptiveJobSpec
from adl.operator import crd

ROOT = Path(__file__).resolve().parents[3]
TEMPLATE = {"spec": {"containers": [{"name": "trainer", "image": "train:1"}]}}


def test_committed_crd_files_are_current() -> None:
    for rel in ("crds/adaptivejob.yaml", "charts/adl/crds/adaptivejob.yaml"):
        committed = (ROOT / rel).read_text()
        assert committed == crd.crd_yaml(), f"{rel} is stale: run `adl crd -o {rel}`"


def test_crd_identity() -> None:
    doc = yaml.safe_load(crd.crd_yaml())
    spec = doc["spec"]
    assert doc["metadata"]["name"] == "adaptivejobs.adl.dev"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["shortNames"] == ["aj"]
    (version,) = spec["versions"]
    assert version["name"] == "v1" and version["storage"] and version["served"]
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    for name in ("Phase", "Replicas", "Batch", "Goodput", "Restarts", "Age"):
        assert name in columns


def _walk(node: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out = [(path, node)]
    for name, sub in (node.get("properties") or {}).items():
        out += _walk(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        out += _walk(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        out += _walk(node["additionalProperties"], f"{path}{{}}")
    return out


def test_schema_is_structural() -> None:
    root = crd.crd_manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(root):
        assert "type" in node, f"{path}: every node needs a type"
        for banned in ("$ref", "anyOf", "oneOf", "allOf", "$defs", "prefixItems", "title"):
            assert banned not in node, f"{path}: {banned} is not structural"
        assert not ("properties" in node and "additionalProperties" in node), path
        for bound in ("exclusiveMinimum", "exclusiveMaximum"):
            assert node.get(bound, True) is True, f"{path}: OpenAPI v3.0 wants a boolean {bound}"
        if "default" in node:
            assert not path.startswith(".status"), f"{path}: status must carry no defaults"
    template = root["properties"]["spec"]["properties"]["template"]
    assert template["x-kubernetes-preserve-unknown-fields"] is True


def test_defaults_match_the_models() -> None:
    """What the API server stores for a minimal spec equals what pydantic fills in."""
    schema = crd.spec_schema()
    defaulted = crd.apply_defaults(schema, {"template": TEMPLATE})
    assert defaulted == AdaptiveJobSpec(template=TEMPLATE).wire()
    assert defaulted["checkpoint"] == {"size": "10Gi"}
    # present values are kept
    kept = crd.apply_defaults(schema, {"template": TEMPLATE, "maxReplicas": 4})
    assert kept["maxReplicas"] == 4 and kept["minReplicas"] == 1


def test_pruning_drops_unknown_fields_but_keeps_the_template() -> None:
    schema = crd.spec_schema()
    tpl = {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"x-any": 1}]}}
    pruned = crd.prune(schema, {"template": tpl, "bogus": 1, "checkpoint": {"junk": 2}})
    assert pruned == {"template": tpl, "checkpoint": {}}


def _validator() -> jsonschema.Draft4Validator:
    return jsonschema.Draft4Validator(crd.jsonschema_for(crd.spec_schema()))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("minReplicas", -1),
        ("maxReplicas", 0),
        ("maxReplicas", 5000),
        ("gpusPerReplica", 17),
        ("weight", 0),
        ("weight", -2.5),
        ("maxRestarts", -1),
        ("priority", 1001),
        ("terminationGracePeriodSeconds", 0),
        ("suspend", "maybe"),
        ("jobKind", ""),
        ("jobKind", "k" * 254),
        ("jobKind", "two words"),
        ("jobKind", "-lead"),
    ],
)
def test_schema_rejects_what_pydantic_rejects(field: str, value: Any) -> None:
    spec = crd.apply_defaults(crd.spec_schema(), {"template": TEMPLATE, field: value})
    assert list(_validator().iter_errors(spec)), f"schema accepted {field}={value}"
    with pytest.raises(pydantic.ValidationError):
        AdaptiveJobSpec.model_validate(spec)


def test_schema_accepts_a_valid_spec() -> None:
    spec = AdaptiveJobSpec(
        template=TEMPLATE, min_replicas=2, max_replicas=8, weight=0.5, checkpoint={"claimName": "c"}
    ).wire()
    assert not list(_validator().iter_errors(spec))


def test_status_schema_accepts_real_status() -> None:
    from adl.models import AdaptiveJobStatus, Hints, RestartCause

    status = AdaptiveJobStatus(
        phase="Running",
        allocation=["n1", "n1"],
        group=3,
        restarts={RestartCause.RESIZE: 2},
        hints=Hints(init_batch_size=32, local_bsz_bounds=(8, 64)),
    ).wire()
    validator = jsonschema.Draft4Validator(crd.jsonschema_for(crd.status_schema()))
    assert not list(validator.iter_errors(status))
    assert list(validator.iter_errors({**status, "phase": "Sleeping"}))


def _cel(rule: str, self_value: Any, old: Any = None) -> bool:
    env = celpy.Environment()
    activation = {"self": celpy.json_to_cel(self_value)}
    if old is not None:
        activation["oldSelf"] = celpy.json_to_cel(old)
    return bool(env.program(env.compile(rule)).evaluate(activation))


def test_cel_rules_agree_with_the_models() -> None:
    (rule,) = [r["rule"] for r in crd.SPEC_RULES]
    schema = crd.spec_schema()
    good = crd.apply_defaults(schema, {"template": TEMPLATE, "minReplicas": 2, "maxReplicas": 2})
    bad = crd.apply_defaults(schema, {"template": TEMPLATE, "minReplicas": 3, "maxReplicas": 2})
    assert _cel(rule, good) is True
    assert _cel(rule, bad) is False
    with pytest.raises(pydantic.ValidationError, match="minReplicas"):
        AdaptiveJobSpec.model_validate(bad)

    (ckpt,) = [r["rule"] for r in crd.CHECKPOINT_RULES]
    assert _cel(ckpt, {"claimName": "c", "size": "1Gi"}) is True
    assert _cel(ckpt, {"storageClass": "fast", "size": "1Gi"}) is True
    assert _cel(ckpt, {"claimName": "c", "storageClass": "fast"}) is False
    with pytest.raises(pydantic.ValidationError, match="not both"):
        AdaptiveJobSpec(template=TEMPLATE, checkpoint={"claimName": "c", "storageClass": "f"})


def test_cel_root_and_transition_rules() -> None:
    (root,) = [r["rule"] for r in crd.ROOT_RULES]
    assert _cel(root, {"metadata": {"name": "a" * crd.MAX_NAME_LENGTH}}) is True
    assert _cel(root, {"metadata": {"name": "a" * (crd.MAX_NAME_LENGTH + 1)}}) is False
    assert _cel(crd.IMMUTABLE_RULE["rule"], 2, old=2) is True
    assert _cel(crd.IMMUTABLE_RULE["rule"], 2, old=1) is False


def test_cli_prints_and_writes_the_crd(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from adl.cli.main import app

    runner = CliRunner()
    printed = runner.invoke(app, ["crd"])
    assert printed.exit_code == 0 and printed.output == crd.crd_yaml()
    target = tmp_path / "sub" / "crd.yaml"
    written = runner.invoke(app, ["crd", "-o", str(target)])
    assert written.exit_code == 0 and target.read_text() == crd.crd_yaml()
