"""Schema synthesis: every supported hint, as a table, and the errors of unsupported ones."""

import collections.abc
import dataclasses
import enum
import sys
import typing
from typing import Annotated, Any, Dict, FrozenSet, List, Literal, NewType, Optional, Set, Tuple, TypedDict, Union

import pytest

from conftest import require_pydantic
from forge_tools import ToolDefinitionError, get_tool, tool
from forge_tools._schema import SchemaContext, compile_hint


def schema_of(hint, mode="input"):
    ctx = SchemaContext(mode)
    s = compile_hint(hint).schema(ctx)
    if ctx.defs:
        s = dict(s, **{"$defs": ctx.defs})
    return s


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    """How loud."""

    LOW = 1
    HIGH = 2


class Movie(TypedDict):
    """A film.

    Attributes:
        title: Its title.
    """

    title: str
    year: int


class Partial(TypedDict, total=False):
    title: str
    year: int


class Mixed(Movie, total=False):
    rating: float


@dataclasses.dataclass
class Point:
    """A point.

    Args:
        x: Horizontal.
        y: Vertical.
    """

    x: float
    y: float = 0.0
    tags: List[str] = dataclasses.field(default_factory=list)
    cache: Dict[str, int] = dataclasses.field(default_factory=dict, init=False)


@dataclasses.dataclass
class Tree:
    value: int
    children: "List[Tree]" = dataclasses.field(default_factory=list)


UserId = NewType("UserId", int)

POINT = {
    "title": "Point",
    "description": "A point.",
    "type": "object",
    "properties": {
        "x": {"type": "number", "description": "Horizontal."},
        "y": {"type": "number", "description": "Vertical.", "default": 0.0},
        "tags": {"type": "array", "items": {"type": "string"}, "default": []},
    },
    "required": ["x"],
    "additionalProperties": False,
}

CASES = [
    ("str", str, {"type": "string"}),
    ("int", int, {"type": "integer"}),
    ("float", float, {"type": "number"}),
    ("bool", bool, {"type": "boolean"}),
    ("None", None, {"type": "null"}),
    ("NoneType", type(None), {"type": "null"}),
    ("Any", Any, {}),
    ("object", object, {}),
    ("list[int]", list[int], {"type": "array", "items": {"type": "integer"}}),
    ("typing.List[str]", List[str], {"type": "array", "items": {"type": "string"}}),
    ("bare list", list, {"type": "array"}),
    ("bare typing.List", List, {"type": "array"}),
    ("Sequence[str]", collections.abc.Sequence[str], {"type": "array", "items": {"type": "string"}}),
    ("set[int]", set[int], {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}),
    ("typing.Set[str]", Set[str], {"type": "array", "items": {"type": "string"}, "uniqueItems": True}),
    ("FrozenSet[int]", FrozenSet[int], {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}),
    ("dict[str, int]", dict[str, int], {"type": "object", "additionalProperties": {"type": "integer"}}),
    ("typing.Dict[str, float]", Dict[str, float], {"type": "object", "additionalProperties": {"type": "number"}}),
    ("dict[str, Any]", Dict[str, Any], {"type": "object"}),
    ("bare dict", dict, {"type": "object"}),
    ("tuple[int, str]", tuple[int, str], {
        "type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}],
        "items": False, "minItems": 2, "maxItems": 2,
    }),
    ("typing.Tuple[bool]", Tuple[bool], {
        "type": "array", "prefixItems": [{"type": "boolean"}], "items": False, "minItems": 1, "maxItems": 1,
    }),
    ("tuple[int, ...]", tuple[int, ...], {"type": "array", "items": {"type": "integer"}}),
    ("Tuple[()]", Tuple[()], {"type": "array", "maxItems": 0}),
    ("bare tuple", tuple, {"type": "array"}),
    ("Optional[int]", Optional[int], {"anyOf": [{"type": "integer"}, {"type": "null"}]}),
    ("Union[int, str]", Union[int, str], {"anyOf": [{"type": "integer"}, {"type": "string"}]}),
    ("Literal one", Literal["a"], {"type": "string", "const": "a"}),
    ("Literal strs", Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}),
    ("Literal mixed", Literal[1, "a", None], {"enum": [1, "a", None]}),
    ("Literal bool", Literal[True], {"type": "boolean", "const": True}),
    ("Literal of an Enum member", Literal[Color.RED], {"type": "string", "const": "red"}),
    ("Enum", Color, {"title": "Color", "type": "string", "enum": ["red", "blue"]}),
    ("IntEnum with a docstring", Level, {"title": "Level", "type": "integer", "enum": [1, 2], "description": "How loud."}),
    ("TypedDict", Movie, {
        "title": "Movie", "description": "A film.", "type": "object",
        "properties": {"title": {"type": "string", "description": "Its title."}, "year": {"type": "integer"}},
        "required": ["title", "year"],
    }),
    ("TypedDict total=False", Partial, {
        "title": "Partial", "type": "object", "properties": {"title": {"type": "string"}, "year": {"type": "integer"}},
    }),
    ("TypedDict inherited, mixed totality", Mixed, {
        "title": "Mixed", "type": "object",
        "properties": {"title": {"type": "string"}, "year": {"type": "integer"}, "rating": {"type": "number"}},
        "required": ["title", "year"],
    }),
    ("dataclass (init=False fields left out)", Point, POINT),
    ("list of dataclasses", List[Point], {"type": "array", "items": POINT}),
    ("nested containers", Dict[str, List[Optional[int]]], {
        "type": "object",
        "additionalProperties": {"type": "array", "items": {"anyOf": [{"type": "integer"}, {"type": "null"}]}},
    }),
    ("recursive dataclass", Tree, {
        "$ref": "#/$defs/Tree",
        "$defs": {"Tree": {
            "title": "Tree", "type": "object",
            "properties": {
                "value": {"type": "integer"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/Tree"}, "default": []},
            },
            "required": ["value"], "additionalProperties": False,
        }},
    }),
    ("Annotated description", Annotated[int, "How many."], {"type": "integer", "description": "How many."}),
    ("Annotated: the first string is the description", Annotated[str, 3, "Name.", "ignored"], {
        "type": "string", "description": "Name.",
    }),
    ("Annotated inside a list", Annotated[List[Annotated[str, "A tag."]], "Tags."], {
        "type": "array", "items": {"type": "string", "description": "A tag."}, "description": "Tags.",
    }),
    ("Annotated without a string", Annotated[int, 42], {"type": "integer"}),
    ("NewType", UserId, {"type": "integer"}),
]

if sys.version_info >= (3, 10):
    CASES += [
        ("X | Y", eval("int | str"), {"anyOf": [{"type": "integer"}, {"type": "string"}]}),
        ("X | None", eval("list[int] | None"), {"anyOf": [{"type": "array", "items": {"type": "integer"}}, {"type": "null"}]}),
    ]

if sys.version_info >= (3, 11):
    class Req(TypedDict, total=False):
        a: typing.Required[int]
        b: str

    class NotReq(TypedDict):
        a: int
        b: typing.NotRequired[str]

    CASES += [
        ("TypedDict Required[]", Req, {
            "title": "Req", "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
            "required": ["a"],
        }),
        ("TypedDict NotRequired[]", NotReq, {
            "title": "NotReq", "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
            "required": ["a"],
        }),
    ]


@pytest.mark.parametrize("hint,want", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hint_schema(hint, want):
    assert schema_of(hint) == want


# Tool-level schemas: parameters, defaults, descriptions, outputs.


@tool
def _documented(a: int, b: str = "x", c: Optional[Color] = None, d: Annotated[float, "From Annotated."] = 1.5) -> int:
    """Does things.

    A second paragraph.

    Args:
        a (int): The a.
            It continues here.
        b: The b.
        d: Overridden by Annotated.

    Returns:
        int: A number.
    """
    return a


def test_tool_input_schema():
    t = get_tool(_documented)
    assert t.description == "Does things.\n\nA second paragraph."
    assert t.input_schema == {
        "type": "object",
        "properties": {
            "a": {"type": "integer", "description": "The a. It continues here."},
            "b": {"type": "string", "description": "The b.", "default": "x"},
            "c": {"anyOf": [{"title": "Color", "type": "string", "enum": ["red", "blue"]}, {"type": "null"}], "default": None},
            "d": {"type": "number", "description": "From Annotated.", "default": 1.5},
        },
        "required": ["a"],
        "additionalProperties": False,
    }
    assert t.output_schema == {
        "type": "object",
        "properties": {"result": {"type": "integer", "description": "A number."}},
        "required": ["result"],
    }


_SENTINEL = object()


def _defaults(x: Color = Color.BLUE, p: Tuple[int, int] = (1, 2), o: Any = _SENTINEL, s: str = 5, n: List[int] = None):  # type: ignore[assignment]
    pass


def test_defaults():
    """Defaults make a field optional; they appear as "default" when they are JSON and fit the type."""
    props = get_tool(tool(_defaults)).input_schema["properties"]
    assert props["x"]["default"] == "blue"
    assert props["p"]["default"] == [1, 2]
    assert "default" not in props["o"]  # not JSON
    assert "default" not in props["s"]  # does not fit str
    if sys.version_info >= (3, 11):  # 3.9 and 3.10 read `= None` as Optional[...]
        assert "default" not in props["n"]
    assert "required" not in get_tool(_defaults).input_schema


def _out_int() -> int: ...
def _out_point() -> Point: ...
def _out_dict() -> Dict[str, int]: ...
def _out_optional_point() -> Optional[Point]: ...
def _out_tree() -> Tree: ...
def _out_none() -> None: ...
def _out_missing(): ...
def _out_movie() -> Movie: ...


@pytest.mark.parametrize("fn,want", [
    (_out_int, {"type": "object", "properties": {"result": {"type": "integer"}}, "required": ["result"]}),
    (_out_point, POINT),
    (_out_dict, {"type": "object", "additionalProperties": {"type": "integer"}}),
    (_out_optional_point, {
        "type": "object", "properties": {"result": {"anyOf": [POINT, {"type": "null"}]}}, "required": ["result"],
    }),
    (_out_tree, {"type": "object", "$ref": "#/$defs/Tree", "$defs": schema_of(Tree)["$defs"]}),
    (_out_none, None),
    (_out_missing, None),
    (_out_movie, schema_of(Movie)),
], ids=["int wrapped", "dataclass", "dict", "Optional wrapped", "recursive: object at the root", "None", "no annotation", "TypedDict"])
def test_output_schema(fn, want):
    """Object return types are the outputSchema; others are wrapped as {"result": ...} (MCP structured output)."""
    assert get_tool(tool(fn)).output_schema == want


def test_table_entry_is_plain_json():
    import json

    @tool(name="renamed", description="Custom.", timeout=2, memory="1.5g", persistent=True)
    def f(a: int) -> Point:
        """Ignored."""
        return Point(a)

    spec = get_tool(f).spec()
    assert json.loads(json.dumps(spec)) == spec
    assert spec["name"] == "renamed" and spec["description"] == "Custom."
    assert (spec["timeout"], spec["memory"], spec["persistent"]) == (2.0, 1610612736, True)
    assert set(spec) == {"name", "description", "inputSchema", "outputSchema", "timeout", "memory", "persistent"}


@pytest.mark.parametrize("memory,want", [
    (1024, 1024), ("1048576", 1048576), ("1024k", 1 << 20), ("512m", 512 << 20), ("256M", 256 << 20),
    ("128mb", 128 << 20), ("2gib", 2 << 30), ("1.5g", 1610612736), (" 1T ", 1 << 40),
])
def test_memory_sizes(memory, want):
    """memory takes forge's size syntax (cgroups.ParseBytes) and the table holds bytes."""

    @tool(memory=memory)
    def f() -> None: ...

    assert get_tool(f).memory == want


def test_pydantic_models():
    pydantic = require_pydantic()

    class Address(pydantic.BaseModel):
        city: str
        zip: Optional[str] = None

    class User(pydantic.BaseModel):
        name: str = pydantic.Field(description="Full name.")
        age: int = pydantic.Field(gt=0)
        address: Address

    @tool
    def register(user: User, note: str = "") -> User:
        """Registers a user."""
        return user

    t = get_tool(register)
    user = t.input_schema["properties"]["user"]
    assert user["properties"]["name"]["description"] == "Full name."
    assert user["properties"]["age"]["exclusiveMinimum"] == 0
    assert user["properties"]["address"] == {"$ref": "#/$defs/Address"}
    assert t.input_schema["$defs"]["Address"]["properties"]["city"] == {"title": "City", "type": "string"}
    assert t.output_schema["type"] == "object" and t.output_schema["title"] == "User"
    assert "Address" in t.output_schema["$defs"]


def test_pydantic_defs_that_clash_are_renamed():
    pydantic = require_pydantic()

    class Item(pydantic.BaseModel):
        a: int

    class Box(pydantic.BaseModel):
        item: Item

    other = type("Item", (pydantic.BaseModel,), {"__annotations__": {"b": str}})
    other_box = type("OtherBox", (pydantic.BaseModel,), {"__annotations__": {"item": other}})

    @tool
    def f(x: Box, y: other_box) -> None: ...

    s = get_tool(f).input_schema
    assert set(s["$defs"]) == {"Item", "Item2"}
    assert s["properties"]["x"]["properties"]["item"] == {"$ref": "#/$defs/Item"}
    assert s["properties"]["y"]["properties"]["item"] == {"$ref": "#/$defs/Item2"}
    assert s["$defs"]["Item2"]["properties"] == {"b": {"title": "B", "type": "string"}}


# Errors at decoration time: each names the function, the parameter and the hint.


class Bad(enum.Enum):
    X = object()


def _unsupported_bytes(data: bytes) -> None: ...
def _unsupported_nested(items: List[complex]) -> None: ...
def _unsupported_key(m: Dict[int, str]) -> None: ...
def _unsupported_enum(e: Bad) -> None: ...
def _unsupported_literal(v: Literal[b"x"]) -> None: ...
def _unsupported_return(a: int) -> bytes: ...
def _unsupported_class(a: collections.OrderedDict) -> None: ...
def _unsupported_field(p: "BadField") -> None: ...
def _missing(a: int, b) -> None: ...
def _star_args(*items: int) -> None: ...
def _forward(a: "Undefined") -> None: ...  # noqa: F821


@dataclasses.dataclass
class BadField:
    blob: bytes


@pytest.mark.parametrize("fn,parts", [
    (_unsupported_bytes, ["_unsupported_bytes", "parameter 'data'", "bytes"]),
    (_unsupported_nested, ["_unsupported_nested", "parameter 'items'", "List[complex]", "(complex:"]),
    (_unsupported_key, ["_unsupported_key", "parameter 'm'", "Dict[int, str]", "keys must be str"]),
    (_unsupported_enum, ["_unsupported_enum", "parameter 'e'", "Bad", "member values"]),
    (_unsupported_literal, ["_unsupported_literal", "parameter 'v'", "Literal[b'x']"]),
    (_unsupported_return, ["_unsupported_return", "the return type", "bytes"]),
    (_unsupported_class, ["_unsupported_class", "parameter 'a'", "collections.OrderedDict"]),
    (_unsupported_field, ["_unsupported_field", "parameter 'p'", "BadField", "field BadField.blob"]),
    (_missing, ["_missing", "parameter 'b'", "no type hint", "typing.Any"]),
    (_star_args, ["_star_args", "parameter 'items'", "*items"]),
    (_forward, ["_forward", "parameter 'a'", "Undefined", "cannot be resolved"]),
], ids=lambda v: v.__name__ if callable(v) else None)
def test_unsupported_hints_fail_at_decoration(fn, parts):
    with pytest.raises(ToolDefinitionError) as err:
        tool(fn)
    for part in parts:
        assert part in str(err.value)


@pytest.mark.parametrize("kwargs,part", [
    ({"name": "has space"}, "not a valid tool name"),
    ({"name": "x" * 129}, "not a valid tool name"),
    ({"name": "trailing\n"}, "not a valid tool name"),
    ({"timeout": 0}, "timeout=0"),
    ({"timeout": True}, "timeout=True"),
    ({"timeout": float("inf")}, "timeout=inf"),
    ({"memory": "12 parsecs"}, "memory='12 parsecs' is not a size"),
    ({"memory": 0}, "out of range"),
    ({"memory": 1.5}, "is not a size"),
    ({"persistent": "yes"}, "persistent="),
    ({"description": 3}, "description must be a str"),
])
def test_bad_options(kwargs, part):
    with pytest.raises(ToolDefinitionError) as err:
        @tool(**kwargs)
        def f() -> None: ...
    assert part in str(err.value) and "f" in str(err.value)


def test_misuse():
    with pytest.raises(ToolDefinitionError, match="name="):
        tool("add")
    with pytest.raises(ToolDefinitionError, match="functions"):
        tool(len)
