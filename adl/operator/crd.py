"""The AdaptiveJob CustomResourceDefinition, generated from the pydantic models in adl.models.

Why generate: the models are the one source of truth for validation, so the API server must
enforce the same defaults and bounds as the CLI and the controller. Pydantic emits JSON Schema
2020-12; Kubernetes wants a *structural* OpenAPI v3.0 subset, so this module converts: $refs
inlined, ``anyOf [X, null]`` turned into ``X`` + ``nullable``, numeric exclusive bounds turned
into OpenAPI's boolean form, keywords Kubernetes rejects dropped, and CEL rules added for the
cross-field checks (minReplicas <= maxReplicas) that a per-field schema cannot express.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from adl import contract as C
from adl.models import AdaptiveJobSpec, AdaptiveJobStatus

GROUP = C.API_GROUP
VERSION = C.API_VERSION_NAME
PLURAL = C.PLURAL
SINGULAR = "adaptivejob"
KIND = C.KIND
SHORT_NAMES = ["aj"]
CRD_NAME = f"{PLURAL}.{GROUP}"
API_VERSION = C.API_VERSION

# Keywords of Kubernetes' JSONSchemaProps that we pass through unchanged.
_KEEP = {
    "type",
    "format",
    "description",
    "default",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "required",
    "nullable",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-validations",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
}

#: Cross-field rules the API server evaluates (CEL), keyed by JSON path inside the CRD schema.
SPEC_RULES: list[dict[str, str]] = [
    {
        "rule": "self.minReplicas <= self.maxReplicas",
        "message": "minReplicas must be <= maxReplicas",
        "fieldPath": ".minReplicas",
    },
]
CHECKPOINT_RULES: list[dict[str, str]] = [
    {
        "rule": "!(has(self.claimName) && has(self.storageClass))",
        "message": "checkpoint: set claimName or storageClass, not both",
    },
]
#: Pod and Service names are ``<job>-g<group>-<n>``: keep them within 63 characters.
MAX_NAME_LENGTH = 45
ROOT_RULES: list[dict[str, str]] = [
    {
        "rule": f"size(self.metadata.name) <= {MAX_NAME_LENGTH}",
        "message": f"AdaptiveJob names are limited to {MAX_NAME_LENGTH} characters",
    },
]
IMMUTABLE_RULE: dict[str, str] = {
    "rule": "self == oldSelf",
    "message": "gpusPerReplica is immutable",
}


class NotStructuralError(ValueError):
    """The pydantic schema uses a construct that has no structural equivalent."""


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if ref is None:
        return node
    target = defs[ref.rsplit("/", 1)[-1]]
    merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
    return _resolve(merged, defs)


def _convert(node: dict[str, Any], defs: dict[str, Any], keep_defaults: bool) -> dict[str, Any]:
    node = _resolve(node, defs)
    if "anyOf" in node:
        branches = [b for b in node["anyOf"] if b != {"type": "null"}]
        nullable = len(branches) < len(node["anyOf"])
        if len(branches) != 1:
            raise NotStructuralError(f"anyOf with {len(branches)} non-null branches: {node}")
        outer = {k: v for k, v in node.items() if k != "anyOf"}
        node = {**_resolve(branches[0], defs), **outer}
        if nullable:
            node["nullable"] = True
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _KEEP:
            out[key] = copy.deepcopy(value)
        elif key == "const":
            out["enum"] = [value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum"):
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            out[bound] = value
            out[key] = True
    if "default" in out and (out["default"] is None or not keep_defaults):
        del out["default"]
    if "prefixItems" in node:  # fixed-length tuple -> homogeneous array of the same length
        kinds = {b.get("type") for b in node["prefixItems"]}
        if len(kinds) != 1:
            raise NotStructuralError(f"heterogeneous tuple: {node}")
        out["items"] = _convert(node["prefixItems"][0], defs, keep_defaults)
    elif isinstance(node.get("items"), dict):
        out["items"] = _convert(node["items"], defs, keep_defaults)
    if out.get("x-kubernetes-preserve-unknown-fields"):
        return out  # the pod template: kept verbatim, validated by pydantic and the pod API
    if "properties" in node:
        out["properties"] = {
            name: _convert(sub, defs, keep_defaults) for name, sub in node["properties"].items()
        }
    elif isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = _convert(node["additionalProperties"], defs, keep_defaults)
    shapeless = "properties" not in out and "additionalProperties" not in out
    if out.get("type") == "object" and shapeless:
        out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def _default_empty_objects(schema: dict[str, Any]) -> None:
    """Give optional nested objects ``default: {}`` so the API server fills their own defaults
    (pydantic omits defaults made by ``default_factory``)."""
    required = set(schema.get("required", []))
    for name, sub in (schema.get("properties") or {}).items():
        if sub.get("type") == "object" and "properties" in sub:
            _default_empty_objects(sub)
            if name not in required and "default" not in sub and not sub.get("required"):
                sub["default"] = {}


def structural_schema(model: type[Any], *, keep_defaults: bool = True) -> dict[str, Any]:
    """Convert a pydantic model's JSON schema into a structural Kubernetes OpenAPI schema."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    schema = _convert(raw, raw.get("$defs", {}), keep_defaults)
    if keep_defaults:
        _default_empty_objects(schema)
    return schema


def spec_schema() -> dict[str, Any]:
    """The ``spec`` schema with defaults, bounds and CEL rules."""
    schema = structural_schema(AdaptiveJobSpec)
    schema["x-kubernetes-validations"] = copy.deepcopy(SPEC_RULES)
    props = schema["properties"]
    props["checkpoint"]["x-kubernetes-validations"] = copy.deepcopy(CHECKPOINT_RULES)
    props["gpusPerReplica"]["x-kubernetes-validations"] = [dict(IMMUTABLE_RULE)]
    return schema


def status_schema() -> dict[str, Any]:
    """The ``status`` schema: same shapes, no defaults (status holds exactly what we wrote)."""
    return structural_schema(AdaptiveJobStatus, keep_defaults=False)


PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Replicas", "type": "integer", "jsonPath": ".status.replicas"},
    {"name": "Batch", "type": "integer", "jsonPath": ".status.batchSize"},
    {"name": "Goodput", "type": "number", "jsonPath": ".status.goodput"},
    {
        "name": "Restarts",
        "type": "integer",
        "jsonPath": ".status.restarts.failure",
        "description": "restarts after failures (the maxRestarts budget)",
    },
    {
        "name": "Resizes",
        "type": "integer",
        "jsonPath": ".status.restarts.resize",
        "priority": 1,
    },
    {"name": "Group", "type": "integer", "jsonPath": ".status.group", "priority": 1},
    {"name": "Reason", "type": "string", "jsonPath": ".status.reason", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def crd_manifest() -> dict[str, Any]:
    """The full CustomResourceDefinition object."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME, "labels": {"app.kubernetes.io/part-of": "adl"}},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "categories": ["adl"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": copy.deepcopy(PRINTER_COLUMNS),
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "An elastic training job: a range of replicas.",
                            "required": ["spec"],
                            "x-kubernetes-validations": copy.deepcopy(ROOT_RULES),
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema(),
                                "status": status_schema(),
                            },
                        }
                    },
                }
            ],
        },
    }


_HEADER = "# Generated by `adl crd` from adl.models -- do not edit by hand.\n"


def crd_yaml() -> str:
    """The CRD as the YAML committed under crds/ and charts/adl/crds/."""
    return _HEADER + yaml.safe_dump(crd_manifest(), sort_keys=False, width=100)


# ------------------------------------------------------------------ API-server emulation
# kmock enforces no schema, so the same rules the API server applies are emulated here (tests,
# and the CLI's pre-flight check before creating anything).


def apply_defaults(schema: dict[str, Any], obj: Any) -> Any:
    """Structural defaulting as the API server does it: fill absent fields that have a
    default, recursively, without touching present values. Returns a new object."""
    if not isinstance(obj, dict) or schema.get("x-kubernetes-preserve-unknown-fields"):
        if isinstance(obj, list) and isinstance(schema.get("items"), dict):
            return [apply_defaults(schema["items"], v) for v in obj]
        return copy.deepcopy(obj)
    out = copy.deepcopy(obj)
    for name, sub in (schema.get("properties") or {}).items():
        if name not in out and "default" in sub:
            out[name] = copy.deepcopy(sub["default"])
        if name in out:
            out[name] = apply_defaults(sub, out[name])
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        for name in out:
            out[name] = apply_defaults(extra, out[name])
    return out


def prune(schema: dict[str, Any], obj: Any) -> Any:
    """Drop fields the schema does not know (the API server's pruning)."""
    if isinstance(obj, list) and isinstance(schema.get("items"), dict):
        return [prune(schema["items"], v) for v in obj]
    if not isinstance(obj, dict) or schema.get("x-kubernetes-preserve-unknown-fields"):
        return copy.deepcopy(obj)
    props = schema.get("properties")
    if props is not None:
        return {k: prune(props[k], v) for k, v in obj.items() if k in props}
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        return {k: prune(extra, v) for k, v in obj.items()}
    return copy.deepcopy(obj)


def jsonschema_for(schema: dict[str, Any]) -> dict[str, Any]:
    """Translate the OpenAPI 3.0 subset to JSON Schema draft 4 (``nullable`` -> type union)
    so ``jsonschema.Draft4Validator`` checks exactly the bounds the API server checks."""
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in ("nullable", "default") or key.startswith("x-kubernetes"):
            continue
        if key == "properties":
            out[key] = {k: jsonschema_for(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = jsonschema_for(value)
        else:
            out[key] = value
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    return out
