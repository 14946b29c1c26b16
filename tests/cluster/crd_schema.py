"""Validates a manifest against a CRD's `openAPIV3Schema`, as the API server would.

The schemas are test data in `tests/cluster/crds/` (written by its
`extract.py` from the CRD files of a tagged release, each file naming its
source). `validate(doc)` picks the schema by the document's apiVersion and
kind and returns every problem found:

- a field the schema does not declare, where Kubernetes would prune it
  (a structural schema drops unknown fields unless the node has
  `x-kubernetes-preserve-unknown-fields`), reported rather than dropped;
- a wrong type (`integer` is an int and not a bool; `x-kubernetes-int-or-
  string` takes either), `format` int32/int64 ranges, a value outside
  `enum`, `pattern`, `minimum`/`maximum`, lengths and item counts;
- a missing `required` field, a null where the node is not `nullable`;
- a duplicate key in a `x-kubernetes-list-type: map` list (two env
  variables of one name, two containers of one name) or a duplicate in a
  `set` list.

The CEL rules (`x-kubernetes-validations`) are not evaluated, except the
`self == oldSelf` ones (immutable fields), which `immutable_paths` lists so
a test can check an update the way the API server would
(`FakeApiServer`). The object's own `metadata` is the API server's
ObjectMeta, checked here for the fields the manifests use.
"""

from __future__ import annotations

import gzip
import json
import pathlib
import re
from typing import Any

CRDS = pathlib.Path(__file__).resolve().parent / "crds"
_INT_RANGE = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}
_META = {"name", "namespace", "labels", "annotations", "generateName"}
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def load(filename: str) -> dict[str, Any]:
    """One CRD's test data: source, group, kind, scope, version, openAPIV3Schema."""
    with gzip.open(CRDS / filename) as f:
        return json.load(f)


def crds() -> dict[tuple[str, str], dict[str, Any]]:
    """Every CRD kept, by (apiVersion, kind)."""
    out = {}
    for path in sorted(CRDS.glob("*.json.gz")):
        data = load(path.name)
        out[(f"{data['group']}/{data['version']}", data["kind"])] = data
    return out


def validate(doc: dict[str, Any]) -> list[str]:
    """The problems the API server would find in `doc` (or prune from it)."""
    key = (doc.get("apiVersion"), doc.get("kind"))
    table = crds()
    if key not in table:
        return [f"$: no CRD kept for apiVersion/kind {key}"]
    crd = table[key]
    errors: list[str] = []
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str):
        errors.append("$.metadata.name: required")
    else:
        for k in sorted(set(meta) - _META):
            errors.append(f"$.metadata.{k}: not an ObjectMeta field this check knows")
        if crd["scope"] == "Cluster" and "namespace" in meta:
            errors.append("$.metadata.namespace: set on a cluster-scoped kind")
        if "namespace" in meta and not _DNS_LABEL.match(str(meta["namespace"])):
            errors.append(f"$.metadata.namespace: not a DNS label: {meta['namespace']!r}")
        for field in ("labels", "annotations"):
            for k, v in (meta.get(field) or {}).items():
                if not isinstance(v, str):
                    errors.append(f"$.metadata.{field}.{k}: expected a string, got {v!r}")
    body = {k: v for k, v in doc.items() if k != "metadata"}
    schema = dict(crd["openAPIV3Schema"])
    schema["properties"] = {k: v for k, v in schema["properties"].items() if k != "metadata"}
    check(body, schema, "$", errors)
    return errors


def check(obj: Any, schema: dict[str, Any], path: str, errors: list[str]) -> None:
    """Appends to `errors` what is wrong with `obj` under `schema`."""
    if obj is None:
        if not schema.get("nullable"):
            errors.append(f"{path}: null where the schema does not allow it")
        return
    if schema.get("x-kubernetes-int-or-string"):
        if isinstance(obj, bool) or not isinstance(obj, (int, str)):
            errors.append(f"{path}: expected an int or a string, got {obj!r}")
        elif isinstance(obj, str) and "pattern" in schema:
            _pattern(obj, schema, path, errors)
        return
    kind = schema.get("type")
    ok = {
        "object": lambda v: isinstance(v, dict),
        "array": lambda v: isinstance(v, list),
        "string": lambda v: isinstance(v, str),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "boolean": lambda v: isinstance(v, bool),
        None: lambda v: True,
    }[kind]
    if not ok(obj):
        errors.append(f"{path}: expected {kind}, got {obj!r}")
        return
    if "enum" in schema and obj not in schema["enum"]:
        errors.append(f"{path}: {obj!r} is not one of {schema['enum']}")
    if isinstance(obj, str):
        _pattern(obj, schema, path, errors)
        if len(obj) > schema.get("maxLength", len(obj)) or len(obj) < schema.get("minLength", 0):
            errors.append(f"{path}: length {len(obj)} outside the schema's bounds")
    if kind in ("integer", "number"):
        lo, hi = _INT_RANGE.get(schema.get("format"), (None, None))
        lo = schema.get("minimum", lo)
        hi = schema.get("maximum", hi)
        if (lo is not None and obj < lo) or (hi is not None and obj > hi):
            errors.append(f"{path}: {obj} outside [{lo}, {hi}]")
    if isinstance(obj, list):
        _array(obj, schema, path, errors)
    if isinstance(obj, dict):
        _object(obj, schema, path, errors)


def _pattern(obj, schema, path, errors):
    if "pattern" in schema and not re.search(schema["pattern"], obj):
        errors.append(f"{path}: {obj!r} does not match {schema['pattern']!r}")


def _array(obj, schema, path, errors):
    if not schema.get("minItems", 0) <= len(obj) <= schema.get("maxItems", len(obj)):
        errors.append(f"{path}: {len(obj)} items, outside the schema's bounds")
    item = schema.get("items", {})
    for i, v in enumerate(obj):
        check(v, item, f"{path}[{i}]", errors)
    list_type = schema.get("x-kubernetes-list-type")
    if list_type == "map":
        keys = schema.get("x-kubernetes-list-map-keys", [])
        seen = [tuple(v.get(k) for k in keys) for v in obj if isinstance(v, dict)]
        if len(seen) != len(set(seen)):
            errors.append(f"{path}: duplicate {keys} in a map list: {seen}")
    elif list_type == "set":
        seen = [json.dumps(v, sort_keys=True) for v in obj]
        if len(seen) != len(set(seen)):
            errors.append(f"{path}: duplicate items in a set list")


def _object(obj, schema, path, errors):
    props = schema.get("properties", {})
    extra = schema.get("additionalProperties")
    for k in schema.get("required", []):
        if k not in obj:
            errors.append(f"{path}.{k}: required")
    if len(obj) < schema.get("minProperties", 0):
        errors.append(f"{path}: fewer than {schema['minProperties']} fields")
    embedded = schema.get("x-kubernetes-embedded-resource")
    for k, v in obj.items():
        if k in props:
            check(v, props[k], f"{path}.{k}", errors)
        elif isinstance(extra, dict):
            check(v, extra, f"{path}.{k}", errors)
        elif extra is True or schema.get("x-kubernetes-preserve-unknown-fields"):
            continue
        elif embedded and k in ("apiVersion", "kind", "metadata"):
            continue
        else:
            errors.append(f"{path}.{k}: unknown field (Kubernetes would prune it)")


def immutable_paths(schema: dict[str, Any], path: tuple = ()) -> list[tuple]:
    """The paths (keys; `[]` for list items) of nodes whose rule is `self == oldSelf`."""
    out = []
    if any(r.get("rule") == "self == oldSelf" for r in schema.get("x-kubernetes-validations", [])):
        out.append(path)
    for k, s in schema.get("properties", {}).items():
        out += immutable_paths(s, (*path, k))
    if isinstance(schema.get("items"), dict):
        out += immutable_paths(schema["items"], (*path, "[]"))
    return out


def _at(obj, path):
    """The value at `path` in `obj`, None where a field is absent (lists: all items)."""
    for i, head in enumerate(path):
        if head == "[]":
            if not isinstance(obj, list):
                return None
            return [_at(item, path[i + 1 :]) for item in obj]
        if not isinstance(obj, dict) or head not in obj:
            return None
        obj = obj[head]
    return obj


class FakeApiServer:
    """`kubectl apply` of documents one after another, as the API server takes them.

    Each document is validated (`validate`); one of the same kind, namespace
    and name as an earlier one is an update, refused when it changes an
    immutable field (the CRD's `self == oldSelf` rules). `apply` returns
    the refusals; refused documents are not stored.
    """

    def __init__(self, default_namespace: str = "default"):
        self.objects: dict[tuple, dict[str, Any]] = {}
        self.default_namespace = default_namespace

    def key(self, doc):
        crd = crds()[(doc["apiVersion"], doc["kind"])]
        ns = None
        if crd["scope"] == "Namespaced":
            ns = doc["metadata"].get("namespace", self.default_namespace)
        return (doc["kind"], ns, doc["metadata"]["name"])

    def apply(self, docs) -> list[str]:
        refusals = []
        for doc in docs:
            errors = validate(doc)
            key = self.key(doc)
            old = self.objects.get(key)
            if old is not None:
                schema = crds()[(doc["apiVersion"], doc["kind"])]["openAPIV3Schema"]
                for path in immutable_paths(schema):
                    # A transition rule runs only where the old object has the field too.
                    was, now = _at(old, path), _at(doc, path)
                    if was is not None and now is not None and was != now:
                        errors.append(f"{key}: {'.'.join(path)}: Value is immutable")
            if errors:
                refusals += errors
            else:
                self.objects[key] = doc
        return refusals
