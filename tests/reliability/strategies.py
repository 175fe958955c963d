"""Hypothesis strategies built from the models' own JSON schemas: every field, at every value
its bounds allow (edges, zeros and subnormal floats included), so a field added later or a bound
loosened is fuzzed without touching this file. A number without a bound is drawn from a huge
range on purpose: that is the bug this suite exists to find."""

from __future__ import annotations

import sys
from typing import Any

from hypothesis import strategies as st
from pydantic import BaseModel

#: an integer or number field without a bound is fuzzed over this range
UNBOUNDED = 10**30

#: a trainer the spec accepts (the template itself is free-form Kubernetes)
TEMPLATE = {"spec": {"containers": [{"name": "t", "command": [sys.executable, "train.py"]}]}}


def _number(node: dict[str, Any]) -> st.SearchStrategy[Any]:
    lo = node.get("minimum", node.get("exclusiveMinimum", -UNBOUNDED))
    hi = node.get("maximum", node.get("exclusiveMaximum", UNBOUNDED))
    if node["type"] == "integer":
        lo, hi = int(lo), int(hi)
        # the extremes on purpose: a uniform draw over a huge range almost never reaches them
        edges = [v for v in (lo, hi, hi - 1, 2**31, 2**63, 2**64) if lo <= v <= hi]
        return st.one_of(st.integers(lo, hi), st.sampled_from(edges))
    edges_f = [
        v
        for v in (float(lo), float(hi), 5e-324, 1e-300)
        if (lo < v if "exclusiveMinimum" in node else lo <= v)
        and (v < hi if "exclusiveMaximum" in node else v <= hi)
    ]
    floats = st.floats(
        float(lo),
        float(hi),
        exclude_min="exclusiveMinimum" in node,
        exclude_max="exclusiveMaximum" in node,
        allow_nan=False,
        allow_infinity=False,
    )
    return st.one_of(floats, st.sampled_from(edges_f)) if edges_f else floats


def from_schema(node: dict[str, Any], defs: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values (JSON, camelCase keys) that the schema ``node`` describes."""
    if "$ref" in node:
        return from_schema(defs[node["$ref"].rsplit("/", 1)[1]], defs)
    if "anyOf" in node:
        return st.one_of([from_schema(n, defs) for n in node["anyOf"]])
    if "enum" in node:
        return st.sampled_from(node["enum"])
    if node.get("x-kubernetes-preserve-unknown-fields"):
        return st.just(TEMPLATE)
    kind = node.get("type")
    if kind in ("integer", "number"):
        return _number(node)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "string":
        if node.get("format") == "date-time":
            return st.datetimes().map(lambda d: d.isoformat() + "Z")
        return st.text(max_size=min(node.get("maxLength", 20), 20))
    if kind == "array":
        if "prefixItems" in node:  # a range [lo, hi]: drawn in order, or the model refuses it
            return st.tuples(*(from_schema(n, defs) for n in node["prefixItems"])).map(sorted)
        return st.lists(from_schema(node.get("items", {"type": "string"}), defs), max_size=4)
    if kind == "object":
        props = node.get("properties", {})
        required = set(node.get("required", []))
        if not props:  # a map (restarts by cause, ...)
            values = node.get("additionalProperties") or {"type": "integer"}
            keys = node.get("propertyNames", {"type": "string"})
            return st.dictionaries(from_schema(keys, defs), from_schema(values, defs), max_size=3)
        return st.fixed_dictionaries(
            {k: from_schema(v, defs) for k, v in props.items() if k in required},
            optional={k: from_schema(v, defs) for k, v in props.items() if k not in required},
        )
    return st.nothing()


def model_data(model: type[BaseModel]) -> st.SearchStrategy[dict[str, Any]]:
    """Wire data for ``model``: what its schema allows (the model may still refuse a mix of
    valid fields, e.g. maxBatchSize below initBatchSize; callers keep what it accepts)."""
    schema = model.model_json_schema(by_alias=True)
    return from_schema(schema, schema.get("$defs", {}))


def accepted(model: type[BaseModel]) -> st.SearchStrategy[Any]:
    """Instances of ``model``: schema data the model accepts."""

    def build(data: dict[str, Any]) -> Any:
        try:
            return model.model_validate(data)
        except ValueError:
            return None

    return model_data(model).map(build).filter(lambda m: m is not None)
