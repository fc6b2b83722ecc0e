"""A small JSON Schema 2020-12 validator for the schemas forge_tools emits.

It covers the keywords that forge_tools and pydantic's model_json_schema
produce (type, enum, const, properties, required, additionalProperties,
patternProperties, items, prefixItems, min/maxItems, uniqueItems,
min/maxLength, pattern, numeric bounds, multipleOf, min/maxProperties,
propertyNames, anyOf, oneOf, allOf, not, $ref into the same document).
Annotations (title, description, default, format, examples) are ignored, as
2020-12 says. The first error found is reported, with the path of the value
that failed, because that is what a caller needs to fix its arguments.
"""

from __future__ import annotations

import math
import re
from typing import Any, Dict, List, Optional, Tuple

__all__ = ["SchemaError", "validate", "json_type", "format_path"]

Path = Tuple[Any, ...]


class SchemaError(ValueError):
    """A value that does not match a schema; path names where (a tuple of keys and indexes)."""

    def __init__(self, path: Path, message: str):
        super().__init__(f"{format_path(path)}: {message}")
        self.path = path
        self.message = message


def format_path(path: Path, root: str = "arguments") -> str:
    """('items', 2, 'name') -> 'arguments.items[2].name'."""
    out = root
    for p in path:
        if isinstance(p, int):
            out += f"[{p}]"
        elif re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", p):
            out += "." + p
        else:
            out += "[" + _quote(p) + "]"
    return out


def _quote(s: str) -> str:
    import json

    return json.dumps(s, ensure_ascii=False)


def json_type(v: Any) -> str:
    """The JSON type name of a decoded JSON value ("integer" for 3 and 3.0)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "integer" if math.isfinite(v) and v.is_integer() else "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, (list, tuple)):
        return "array"
    if isinstance(v, dict):
        return "object"
    return type(v).__name__


def _is_type(v: Any, t: str) -> bool:
    jt = json_type(v)
    return jt == t or (t == "number" and jt == "integer")


def _equal(a: Any, b: Any) -> bool:
    """JSON equality: 1 == 1.0, but true != 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and a == b


def _show(v: Any) -> str:
    import json

    try:
        s = json.dumps(v, ensure_ascii=False)
    except (TypeError, ValueError):
        s = repr(v)
    return s if len(s) <= 60 else s[:57] + "..."


def validate(schema: Any, value: Any, root: Optional[dict] = None, path: Path = ()) -> None:
    """Raises SchemaError when value does not match schema; root resolves $ref."""
    err = _check(schema, value, schema if root is None else root, path, 0)
    if err is not None:
        raise err


def _check(schema: Any, v: Any, root: dict, path: Path, depth: int) -> Optional[SchemaError]:
    if depth > 200:
        return SchemaError(path, "the value or the schema nests too deeply")
    if schema is True or schema == {}:
        return None
    if schema is False:
        return SchemaError(path, "no value is allowed here")
    if not isinstance(schema, dict):
        return SchemaError(path, f"invalid schema {schema!r}")
    if "$ref" in schema:
        err = _check(_resolve(root, schema["$ref"], path), v, root, path, depth + 1)
        if err is not None:
            return err
    t = schema.get("type")
    if t is not None:
        types = t if isinstance(t, list) else [t]
        if not any(_is_type(v, x) for x in types):
            return SchemaError(path, f"expected {' or '.join(types)}, got {json_type(v)}")
    if "const" in schema and not _equal(schema["const"], v):
        return SchemaError(path, f"expected {_show(schema['const'])}, got {_show(v)}")
    if "enum" in schema and not any(_equal(e, v) for e in schema["enum"]):
        allowed = ", ".join(_show(e) for e in schema["enum"])
        return SchemaError(path, f"expected one of {allowed}, got {_show(v)}")
    for check in (_check_combinators, _check_string, _check_number, _check_array, _check_object):
        err = check(schema, v, root, path, depth)
        if err is not None:
            return err
    return None


def _resolve(root: dict, ref: str, path: Path) -> Any:
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise SchemaError(path, f"unsupported $ref {ref!r} (only references into the same schema)")
    node: Any = root
    for part in ref[1:].split("/")[1:] if ref != "#" else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise SchemaError(path, f"unresolvable $ref {ref!r}")
    return node


def _check_combinators(schema: dict, v: Any, root: dict, path: Path, depth: int) -> Optional[SchemaError]:
    for sub in schema.get("allOf", ()):
        err = _check(sub, v, root, path, depth + 1)
        if err is not None:
            return err
    if "anyOf" in schema:
        errs = [_check(sub, v, root, path, depth + 1) for sub in schema["anyOf"]]
        if all(e is not None for e in errs):
            return _best(schema["anyOf"], errs, v, root, path)
    if "oneOf" in schema:
        errs = [_check(sub, v, root, path, depth + 1) for sub in schema["oneOf"]]
        ok = sum(e is None for e in errs)
        if ok == 0:
            return _best(schema["oneOf"], errs, v, root, path)
        if ok > 1:
            return SchemaError(path, f"matches {ok} of the alternatives, expected exactly one")
    if "not" in schema and _check(schema["not"], v, root, path, depth + 1) is None:
        return SchemaError(path, "matches a schema it must not match")
    return None


def _best(subs: List[Any], errs: List[Any], v: Any, root: dict, path: Path) -> SchemaError:
    """The most useful error of failed alternatives: the deepest one whose type fits."""
    fitting = [e for s, e in zip(subs, errs) if _type_fits(s, v, root)]
    if len(fitting) == 1:
        return fitting[0]
    names = []
    for s in subs:
        names.extend(_type_names(s, root))
    seen = list(dict.fromkeys(names))
    if seen:
        return SchemaError(path, f"expected {' or '.join(seen)}, got {_show(v) if fitting else json_type(v)}")
    return SchemaError(path, "matches none of the alternatives")


def _type_fits(schema: Any, v: Any, root: dict) -> bool:
    if isinstance(schema, dict) and "$ref" in schema:
        try:
            schema = _resolve(root, schema["$ref"], ())
        except SchemaError:
            return False
    if not isinstance(schema, dict):
        return schema is True
    if "type" in schema:
        t = schema["type"]
        return any(_is_type(v, x) for x in (t if isinstance(t, list) else [t]))
    if "const" in schema:
        return json_type(schema["const"]) == json_type(v)
    if "enum" in schema:
        return any(json_type(e) == json_type(v) for e in schema["enum"])
    return True


def _type_names(schema: Any, root: dict) -> List[str]:
    if isinstance(schema, dict) and "$ref" in schema:
        try:
            schema = _resolve(root, schema["$ref"], ())
        except SchemaError:
            return []
    if not isinstance(schema, dict):
        return []
    if "type" in schema:
        t = schema["type"]
        return list(t) if isinstance(t, list) else [t]
    if "const" in schema:
        return [_show(schema["const"])]
    if "enum" in schema:
        return [_show(e) for e in schema["enum"]]
    return []


def _check_string(schema: dict, v: Any, root: dict, path: Path, depth: int) -> Optional[SchemaError]:
    if not isinstance(v, str):
        return None
    n = len(v)
    if "minLength" in schema and n < schema["minLength"]:
        return SchemaError(path, f"expected at least {schema['minLength']} characters, got {n}")
    if "maxLength" in schema and n > schema["maxLength"]:
        return SchemaError(path, f"expected at most {schema['maxLength']} characters, got {n}")
    if "pattern" in schema and re.search(schema["pattern"], v) is None:
        return SchemaError(path, f"does not match the pattern {schema['pattern']!r}")
    return None


def _check_number(schema: dict, v: Any, root: dict, path: Path, depth: int) -> Optional[SchemaError]:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    for key, bad, word in (
        ("minimum", lambda b: v < b, ">="),
        ("maximum", lambda b: v > b, "<="),
        ("exclusiveMinimum", lambda b: v <= b, ">"),
        ("exclusiveMaximum", lambda b: v >= b, "<"),
    ):
        if key in schema and bad(schema[key]):
            return SchemaError(path, f"expected a number {word} {schema[key]}, got {_show(v)}")
    m = schema.get("multipleOf")
    if m and abs(v / m - round(v / m)) > 1e-9:
        return SchemaError(path, f"expected a multiple of {m}, got {_show(v)}")
    return None


def _check_array(schema: dict, v: Any, root: dict, path: Path, depth: int) -> Optional[SchemaError]:
    if not isinstance(v, (list, tuple)):
        return None
    n = len(v)
    if "minItems" in schema and n < schema["minItems"]:
        return SchemaError(path, f"expected at least {schema['minItems']} items, got {n}")
    if "maxItems" in schema and n > schema["maxItems"]:
        return SchemaError(path, f"expected at most {schema['maxItems']} items, got {n}")
    prefix = schema.get("prefixItems", [])
    for i, sub in enumerate(prefix[:n]):
        err = _check(sub, v[i], root, path + (i,), depth + 1)
        if err is not None:
            return err
    if "items" in schema:
        for i in range(len(prefix), n):
            err = _check(schema["items"], v[i], root, path + (i,), depth + 1)
            if err is not None:
                return err
    if schema.get("uniqueItems"):
        for i in range(n):
            for j in range(i):
                if _equal(v[i], v[j]):
                    return SchemaError(path + (i,), f"duplicates item {j}; items must be unique")
    return None


def _check_object(schema: dict, v: Any, root: dict, path: Path, depth: int) -> Optional[SchemaError]:
    if not isinstance(v, dict):
        return None
    for key in schema.get("required", ()):
        if key not in v:
            return SchemaError(path + (key,), "is required")
    n = len(v)
    if "minProperties" in schema and n < schema["minProperties"]:
        return SchemaError(path, f"expected at least {schema['minProperties']} properties, got {n}")
    if "maxProperties" in schema and n > schema["maxProperties"]:
        return SchemaError(path, f"expected at most {schema['maxProperties']} properties, got {n}")
    props: Dict[str, Any] = schema.get("properties", {})
    patterns: Dict[str, Any] = schema.get("patternProperties", {})
    extra = schema.get("additionalProperties", True)
    names = schema.get("propertyNames")
    for key, item in v.items():
        if names is not None:
            err = _check(names, key, root, path + (key,), depth + 1)
            if err is not None:
                return SchemaError(path + (key,), f"is not an allowed property name: {err.message}")
        matched = False
        if key in props:
            matched = True
            err = _check(props[key], item, root, path + (key,), depth + 1)
            if err is not None:
                return err
        for pat, sub in patterns.items():
            if re.search(pat, key):
                matched = True
                err = _check(sub, item, root, path + (key,), depth + 1)
                if err is not None:
                    return err
        if not matched:
            if extra is False:
                allowed = ", ".join(props) or "none"
                return SchemaError(path + (key,), f"is not an accepted property (accepted: {allowed})")
            err = _check(extra, item, root, path + (key,), depth + 1)
            if err is not None:
                return err
    return None
