"""Type hints to JSON Schema 2020-12, and JSON values back to Python values.

A hint is compiled once, at decoration time, into a tree of nodes. Each node
gives its schema (so an unsupported hint fails before any client sees the
tool), tells whether a decoded JSON value fits it (to pick a Union's branch)
and turns a validated JSON value into the Python value the function expects
(an Enum member, a dataclass instance, a tuple). Results go the other way by
value, not by hint (to_json), and are then checked against the outputSchema.

Named types (dataclasses, TypedDicts, Enums) are inlined where they are used,
which is what most MCP clients and models handle best; only a recursive type
is put under $defs and referenced, since it cannot be inlined.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import json
import math
import sys
import typing
from typing import Any, Dict, List, Optional, Tuple

from . import _docstring
from ._jsonschema import SchemaError, validate

__all__ = ["Unsupported", "Node", "SchemaContext", "compile_hint", "to_json", "NotJSON", "describe_hint"]

try:  # Python 3.10+: X | Y
    from types import UnionType as _UnionType  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - 3.9
    _UnionType = None  # type: ignore[assignment,misc]

_REQUIRED_ORIGINS = tuple(
    o for o in (getattr(typing, "Required", None), getattr(typing, "NotRequired", None)) if o is not None
)
_TE = sys.modules.get("typing_extensions")
if _TE is not None:
    _REQUIRED_ORIGINS += tuple(
        o for o in (getattr(_TE, "Required", None), getattr(_TE, "NotRequired", None)) if o is not None
    )

_LIST_ORIGINS = (list, collections.abc.Sequence, collections.abc.MutableSequence, collections.abc.Iterable)
_SET_ORIGINS = (set, frozenset, collections.abc.Set, collections.abc.MutableSet)
_DICT_ORIGINS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)
_DEFAULT_ENUM_DOCS = {"An enumeration.", None, ""}


class Unsupported(TypeError):
    """A hint that has no JSON Schema; hint is the innermost offending hint."""

    def __init__(self, hint: Any, reason: str):
        super().__init__(reason)
        self.hint = hint
        self.reason = reason


class NotJSON(TypeError):
    """A return value that cannot be written as JSON."""


def describe_hint(hint: Any) -> str:
    """A readable name for a hint: 'int', 'list[bytes]', 'mymod.Thing'."""
    if isinstance(hint, type) and not typing.get_args(hint):
        if hint.__module__ == "builtins":
            return hint.__qualname__
        return f"{hint.__module__}.{hint.__qualname__}"
    if hint is None or hint is type(None):
        return "None"
    return repr(hint).replace("typing.", "")


class SchemaContext:
    """State of one schema document: $defs and the named types being expanded."""

    def __init__(self, mode: str = "input"):
        self.mode = mode  # "input" or "output" (pydantic differs between them)
        self.defs: Dict[str, Any] = {}
        self._stack: List["Node"] = []
        self._recursive: set = set()
        self._names: Dict[int, str] = {}

    def def_name(self, node: "Node", base: str) -> str:
        name = self._names.get(id(node))
        if name is None:
            name, n = base, 2
            while name in self.defs or name in self._names.values():
                name, n = f"{base}{n}", n + 1
            self._names[id(node)] = name
        return name

    def named(self, node: "Node", base: str, build: Any) -> Dict[str, Any]:
        """The schema of a named type: inline, or a $ref when it refers to itself."""
        if node in self._stack:
            self._recursive.add(id(node))
            return {"$ref": "#/$defs/" + self.def_name(node, base)}
        self._stack.append(node)
        try:
            body = build()
        finally:
            self._stack.pop()
        if id(node) in self._recursive:
            name = self.def_name(node, base)
            self.defs[name] = body
            return {"$ref": "#/$defs/" + name}
        return body

    def add_defs(self, defs: Dict[str, Any], schema: Dict[str, Any]) -> Dict[str, Any]:
        """Hoists foreign $defs (pydantic's) into this document, renaming on a clash."""
        renames = {}
        for name, body in defs.items():
            new = name
            n = 2
            while new in self.defs and self.defs[new] != body:
                new, n = f"{name}{n}", n + 1
            renames[name] = new
        if any(a != b for a, b in renames.items()):
            schema = _rewrite_refs(schema, renames)
            defs = {k: _rewrite_refs(v, renames) for k, v in defs.items()}
        for name, body in defs.items():
            self.defs[renames[name]] = body
        return schema

    def default_ok(self, schema: Dict[str, Any], value: Any) -> bool:
        try:
            validate(schema, value, root={"$defs": self.defs})
        except SchemaError:
            return False
        return True


def _rewrite_refs(schema: Any, renames: Dict[str, str]) -> Any:
    if isinstance(schema, dict):
        out = {}
        for k, v in schema.items():
            if k == "$ref" and isinstance(v, str) and v.startswith("#/$defs/"):
                out[k] = "#/$defs/" + renames.get(v[len("#/$defs/"):], v[len("#/$defs/"):])
            else:
                out[k] = _rewrite_refs(v, renames)
        return out
    if isinstance(schema, list):
        return [_rewrite_refs(v, renames) for v in schema]
    return schema


class Node:
    """One compiled hint."""

    def schema(self, ctx: SchemaContext) -> Dict[str, Any]:
        raise NotImplementedError

    def fits(self, v: Any) -> bool:
        """Whether a decoded JSON value has this node's shape (used to pick a Union branch)."""
        raise NotImplementedError

    def load(self, v: Any, path: Tuple[Any, ...]) -> Any:
        """Turns a validated JSON value into what the function expects."""
        return v


class AnyNode(Node):
    def schema(self, ctx):
        return {}

    def fits(self, v):
        return True


class Prim(Node):
    _TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}

    def __init__(self, py: type):
        self.py = py
        self.json = self._TYPES[py]

    def schema(self, ctx):
        return {"type": self.json}

    def fits(self, v):
        if self.py is bool:
            return isinstance(v, bool)
        if self.py is int:
            return not isinstance(v, bool) and (
                isinstance(v, int) or isinstance(v, float) and math.isfinite(v) and v.is_integer()
            )
        if self.py is float:
            return not isinstance(v, bool) and isinstance(v, (int, float))
        if self.py is str:
            return isinstance(v, str)
        return v is None

    def load(self, v, path):
        if self.py is int and isinstance(v, float):
            return int(v)
        if self.py is float and isinstance(v, int):
            return float(v)
        return v


class Described(Node):
    """Annotated[T, "description"]."""

    def __init__(self, inner: Node, description: str):
        self.inner = inner
        self.description = description

    def schema(self, ctx):
        s = dict(self.inner.schema(ctx))
        s["description"] = self.description
        return s

    def fits(self, v):
        return self.inner.fits(v)

    def load(self, v, path):
        return self.inner.load(v, path)


class ListNode(Node):
    def __init__(self, item: Node, kind: type = list):
        self.item = item
        self.kind = kind

    def schema(self, ctx):
        s: Dict[str, Any] = {"type": "array"}
        item = self.item.schema(ctx)
        if item:
            s["items"] = item
        if self.kind in (set, frozenset):
            s["uniqueItems"] = True
        return s

    def fits(self, v):
        return isinstance(v, list) and all(self.item.fits(x) for x in v)

    def load(self, v, path):
        return self.kind(self.item.load(x, path + (i,)) for i, x in enumerate(v))


class TupleNode(Node):
    def __init__(self, items: List[Node]):
        self.items = items

    def schema(self, ctx):
        n = len(self.items)
        if n == 0:
            return {"type": "array", "maxItems": 0}
        return {
            "type": "array",
            "prefixItems": [i.schema(ctx) for i in self.items],
            "items": False,
            "minItems": n,
            "maxItems": n,
        }

    def fits(self, v):
        return isinstance(v, list) and len(v) == len(self.items) and all(n.fits(x) for n, x in zip(self.items, v))

    def load(self, v, path):
        return tuple(n.load(x, path + (i,)) for i, (n, x) in enumerate(zip(self.items, v)))


class DictNode(Node):
    def __init__(self, value: Node):
        self.value = value

    def schema(self, ctx):
        s: Dict[str, Any] = {"type": "object"}
        value = self.value.schema(ctx)
        if value:
            s["additionalProperties"] = value
        return s

    def fits(self, v):
        return isinstance(v, dict) and all(self.value.fits(x) for x in v.values())

    def load(self, v, path):
        return {k: self.value.load(x, path + (k,)) for k, x in v.items()}


class UnionNode(Node):
    def __init__(self, options: List[Node]):
        self.options = options

    def schema(self, ctx):
        return {"anyOf": [o.schema(ctx) for o in self.options]}

    def fits(self, v):
        return any(o.fits(v) for o in self.options)

    def load(self, v, path):
        for o in self.options:
            if o.fits(v):
                return o.load(v, path)
        return v  # validated against the anyOf, so some branch accepts it


class LiteralNode(Node):
    def __init__(self, values: List[Any]):
        self.values = values

    def schema(self, ctx):
        raw = [v.value if isinstance(v, enum.Enum) else v for v in self.values]
        types = {_json_name(v) for v in raw}
        s: Dict[str, Any] = {"const": raw[0]} if len(raw) == 1 else {"enum": raw}
        if len(types) == 1:
            s = {"type": types.pop(), **s}
        return s

    def fits(self, v):
        return any(_same(v, x.value if isinstance(x, enum.Enum) else x) for x in self.values)

    def load(self, v, path):
        for x in self.values:
            if _same(v, x.value if isinstance(x, enum.Enum) else x):
                return x
        return v


class EnumNode(Node):
    def __init__(self, cls: type):
        self.cls = cls
        self.values = [m.value for m in cls]  # type: ignore[attr-defined]
        for value in self.values:
            if not isinstance(value, (str, int, float, bool)) or isinstance(value, float) and not math.isfinite(value):
                raise Unsupported(cls, f"its member values must be str, int, float or bool, not {value!r}")

    def schema(self, ctx):
        s: Dict[str, Any] = {"title": self.cls.__name__}
        types = {_json_name(v) for v in self.values}
        if len(types) == 1:
            s["type"] = types.pop()
        s["enum"] = list(self.values)
        doc = self.cls.__dict__.get("__doc__")
        if doc not in _DEFAULT_ENUM_DOCS:
            s["description"] = _docstring.parse(doc).description
        return s

    def fits(self, v):
        return any(_same(v, x) for x in self.values)

    def load(self, v, path):
        for m in self.cls:  # type: ignore[attr-defined]
            if _same(v, m.value):
                return m
        return v


class Field:
    def __init__(self, name: str, node: Node, required: bool, default: Any = dataclasses.MISSING, description: str = ""):
        self.name = name
        self.node = node
        self.required = required
        self.default = default
        self.description = description


def object_schema(ctx: SchemaContext, fields: List[Field], closed: bool, extra: Optional[Node] = None) -> Dict[str, Any]:
    """{"type": "object", ...} for fields; shared by tools, dataclasses and TypedDicts."""
    props: Dict[str, Any] = {}
    for f in fields:
        s = dict(f.node.schema(ctx))
        if f.description and "description" not in s:
            s["description"] = f.description
        if f.default is not dataclasses.MISSING:
            try:
                d = to_json(f.default)
            except NotJSON:
                pass
            else:
                if ctx.default_ok(s, d):
                    s["default"] = d
        props[f.name] = s
    out: Dict[str, Any] = {"type": "object", "properties": props}
    required = [f.name for f in fields if f.required]
    if required:
        out["required"] = required
    if extra is not None:
        s = extra.schema(ctx)
        out["additionalProperties"] = s if s else True
    elif closed:
        out["additionalProperties"] = False
    return out


class _Struct(Node):
    """A dataclass or TypedDict: an object with named fields."""

    closed = True

    def __init__(self, cls: type):
        self.cls = cls
        self.fields: List[Field] = []  # filled by compile_hint after memoising, for recursion

    def schema(self, ctx):
        def build():
            s = {"title": self.cls.__name__}
            doc = _class_doc(self.cls)
            if doc.description:
                s["description"] = doc.description
            for f in self.fields:
                if not f.description:
                    f.description = doc.params.get(f.name, "")
            s.update(object_schema(ctx, self.fields, self.closed))
            return s

        return ctx.named(self, self.cls.__name__, build)

    def fits(self, v):
        if not isinstance(v, dict):
            return False
        by_name = {f.name: f for f in self.fields}
        if self.closed and any(k not in by_name for k in v):
            return False
        if any(f.required and f.name not in v for f in self.fields):
            return False
        return all(by_name[k].node.fits(x) for k, x in v.items() if k in by_name)

    def _load_fields(self, v, path):
        by_name = {f.name: f for f in self.fields}
        return {k: (by_name[k].node.load(x, path + (k,)) if k in by_name else x) for k, x in v.items()}


class DataclassNode(_Struct):
    def load(self, v, path):
        kwargs = self._load_fields(v, path)
        try:
            return self.cls(**kwargs)
        except (TypeError, ValueError) as e:
            from ._errors import InvalidArguments

            raise InvalidArguments("", path, f"{type(e).__name__}: {e}") from e


class TypedDictNode(_Struct):
    closed = False  # a TypedDict is structural: extra keys are allowed at run time

    def load(self, v, path):
        return self._load_fields(v, path)


class PydanticNode(Node):
    def __init__(self, cls: type):
        self.cls = cls

    def schema(self, ctx):
        mode = "validation" if ctx.mode == "input" else "serialization"
        s = dict(self.cls.model_json_schema(mode=mode))  # type: ignore[attr-defined]
        defs = s.pop("$defs", None)
        if defs:
            s = ctx.add_defs(defs, s)
        return s

    def fits(self, v):
        try:
            self.cls.model_validate(v)  # type: ignore[attr-defined]
        except Exception:
            return False
        return True

    def load(self, v, path):
        try:
            return self.cls.model_validate(v)  # type: ignore[attr-defined]
        except Exception as e:
            from ._errors import InvalidArguments

            errors = getattr(e, "errors", None)
            if callable(errors):
                first = errors()[0]
                raise InvalidArguments("", path + tuple(first.get("loc", ())), first.get("msg", str(e))) from e
            raise InvalidArguments("", path, str(e)) from e


def _class_doc(cls: type) -> _docstring.Docstring:
    doc = cls.__dict__.get("__doc__")
    if not doc or dataclasses.is_dataclass(cls) and doc.startswith(cls.__name__ + "("):
        return _docstring.Docstring()  # dataclass' generated "Name(a: int)" says nothing new
    return _docstring.parse(doc)


def _json_name(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    return "string"


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b and (a is None) == (b is None) and isinstance(a, str) == isinstance(b, str)


def _is_typeddict(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, dict) and hasattr(hint, "__total__") and hasattr(hint, "__required_keys__")


def _is_pydantic(hint: Any) -> bool:
    pydantic = sys.modules.get("pydantic")
    if pydantic is None or not isinstance(hint, type):
        return False
    return issubclass(hint, pydantic.BaseModel)


def compile_hint(hint: Any, globalns: Optional[dict] = None, memo: Optional[Dict[int, Node]] = None) -> Node:
    """Compiles a resolved hint; raises Unsupported naming the offending (inner) hint."""
    memo = {} if memo is None else memo
    if id(hint) in memo:
        return memo[id(hint)]
    if hint is Any or hint is object:
        return AnyNode()
    if hint is None or hint is type(None):
        return Prim(type(None))
    if hint in (str, int, float, bool):
        return Prim(hint)
    if isinstance(hint, str) or isinstance(hint, typing.ForwardRef):
        raise Unsupported(hint, "it is a forward reference that could not be resolved")
    if hasattr(hint, "__supertype__") and callable(hint):  # typing.NewType
        return compile_hint(hint.__supertype__, globalns, memo)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        inner = compile_hint(args[0], globalns, memo)
        texts = [m for m in hint.__metadata__ if isinstance(m, str)]
        return Described(inner, texts[0]) if texts else inner
    if origin in _REQUIRED_ORIGINS:
        return compile_hint(args[0], globalns, memo)
    if origin is typing.Union or _UnionType is not None and origin is _UnionType:
        return UnionNode([compile_hint(a, globalns, memo) for a in args])
    if origin is typing.Literal:
        for v in args:
            if not isinstance(v, (str, int, bool, enum.Enum)) and v is not None:
                raise Unsupported(hint, f"Literal values must be str, int, bool, None or Enum members, not {v!r}")
        return LiteralNode(list(args))
    if hint in (tuple, typing.Tuple):
        return ListNode(AnyNode(), tuple)
    if origin is None and hint in (list, set, frozenset, dict):
        origin = hint
    if not args and origin is not tuple:
        if origin in _LIST_ORIGINS:
            return ListNode(AnyNode(), list)
        if origin in _SET_ORIGINS:
            return ListNode(AnyNode(), frozenset if origin is frozenset else set)
        if origin in _DICT_ORIGINS:
            return DictNode(AnyNode())
    if origin is tuple:
        if args in ((), ((),)):
            return TupleNode([])
        if len(args) == 2 and args[1] is Ellipsis:
            return ListNode(compile_hint(args[0], globalns, memo), tuple)
        return TupleNode([compile_hint(a, globalns, memo) for a in args])
    if origin in _LIST_ORIGINS:
        return ListNode(compile_hint(args[0], globalns, memo), list)
    if origin in _SET_ORIGINS:
        return ListNode(compile_hint(args[0], globalns, memo), frozenset if origin is frozenset else set)
    if origin in _DICT_ORIGINS:
        key = args[0]
        if key is not str and key is not Any:
            raise Unsupported(hint, f"dict keys must be str (JSON object keys are strings), not {describe_hint(key)}")
        return DictNode(compile_hint(args[1], globalns, memo))
    if isinstance(hint, type):
        if issubclass(hint, enum.Enum):
            return EnumNode(hint)
        if _is_pydantic(hint):
            if not hasattr(hint, "model_json_schema"):
                raise Unsupported(hint, "pydantic v1 models are not supported; use pydantic 2")
            return PydanticNode(hint)
        if dataclasses.is_dataclass(hint) or _is_typeddict(hint):
            return _compile_struct(hint, memo)
    raise Unsupported(hint, "there is no JSON Schema for it")


def _compile_struct(cls: type, memo: Dict[int, Node]) -> Node:
    node: _Struct = DataclassNode(cls) if dataclasses.is_dataclass(cls) else TypedDictNode(cls)
    memo[id(cls)] = node
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception as e:
        raise Unsupported(cls, f"its annotations could not be resolved ({type(e).__name__}: {e})") from e
    if isinstance(node, DataclassNode):
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            default = f.default
            if default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                try:
                    default = f.default_factory()  # type: ignore[misc]
                except Exception:
                    default = dataclasses.MISSING
                required = False
            else:
                required = default is dataclasses.MISSING
            node.fields.append(Field(f.name, _field_node(cls, f.name, hints[f.name], memo), required, default))
    else:
        required_keys = cls.__required_keys__  # type: ignore[attr-defined]
        for name, hint in hints.items():
            node.fields.append(Field(name, _field_node(cls, name, hint, memo), name in required_keys))
    return node


def _field_node(cls: type, name: str, hint: Any, memo: Dict[int, Node]) -> Node:
    try:
        return compile_hint(hint, None, memo)
    except Unsupported as e:
        raise Unsupported(e.hint, f"field {cls.__name__}.{name}: {e.reason}") from e


def to_json(value: Any, _depth: int = 0) -> Any:
    """A tool's return value as JSON data (dataclasses, Enums, pydantic models, tuples and sets included)."""
    if _depth > 500:
        raise NotJSON("the value nests too deeply")
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, enum.Enum):
        return to_json(value.value, _depth + 1)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotJSON(f"{value!r} is not a JSON number")
        return float(value)
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if isinstance(k, enum.Enum):
                k = k.value
            if not isinstance(k, str):
                raise NotJSON(f"object keys must be str, not {type(k).__name__} ({k!r})")
            out[k] = to_json(v, _depth + 1)
        return out
    if isinstance(value, (list, tuple, set, frozenset)):
        return [to_json(v, _depth + 1) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name), _depth + 1) for f in dataclasses.fields(value)}
    dump = getattr(value, "model_dump", None)
    if callable(dump) and _is_pydantic(type(value)):
        return dump(mode="json")
    raise NotJSON(f"a {type(value).__module__}.{type(value).__qualname__} is not JSON data")


def json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
