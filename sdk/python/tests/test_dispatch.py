"""Dispatch: sync and async calls, timeouts, exceptions as results, conversion, the module table."""

import asyncio
import dataclasses
import enum
import json
import sys
import threading
import time
import types
from typing import Dict, FrozenSet, List, Optional, Set, Tuple, Union

import pytest

from conftest import require_pydantic
from forge_tools import (
    InvalidArguments, Toolbox, ToolDefinitionError, UnknownTool, adispatch, dispatch, get_tool, load, tool, tool_table,
    tools_of,
)


class Shape(enum.Enum):
    CIRCLE = "circle"
    SQUARE = "square"


@dataclasses.dataclass
class Point:
    x: float
    y: float = 0.0


@dataclasses.dataclass
class Positive:
    n: int

    def __post_init__(self):
        if self.n <= 0:
            raise ValueError("n must be positive")


def module_of(*fns):
    m = types.ModuleType("tools_under_test")
    for f in fns:
        setattr(m, f.__name__, f)
    return m


def test_decorated_functions_stay_callable():
    @tool
    def add(a: int, b: int = 1) -> int:
        return a + b

    @tool(timeout=3)
    async def aadd(a: int, b: int = 1) -> int:
        return a + b

    assert add(2) == 3 and add.__name__ == "add"
    assert asyncio.run(aadd(2, b=5)) == 7
    assert get_tool(add).is_async is False and get_tool(aadd).is_async is True


def test_sync_and_async_calls():
    @tool
    def add(a: int, b: int = 1) -> int:
        return a + b

    @tool
    async def greet(name: str) -> str:
        await asyncio.sleep(0)
        return f"hi {name}"

    m = module_of(add, greet)
    assert dispatch(m, "add", {"a": 2}) == {
        "content": [{"type": "text", "text": "3"}], "structuredContent": {"result": 3}, "isError": False,
    }
    assert dispatch(m, "greet", {"name": "ann"})["structuredContent"] == {"result": "hi ann"}
    assert dispatch(m, "greet", {"name": "ann"})["content"] == [{"type": "text", "text": "hi ann"}]
    assert asyncio.run(adispatch(m, "greet", {"name": "bo"}))["structuredContent"] == {"result": "hi bo"}
    assert asyncio.run(adispatch(m, "add", {"a": 1, "b": 1}))["structuredContent"] == {"result": 2}


def test_exceptions_are_results():
    @tool
    def boom(x: int) -> int:
        raise ValueError(f"bad x: {x}")

    @tool
    async def aboom() -> int:
        raise KeyError("k")

    @tool
    def leaves() -> int:
        sys.exit(3)

    m = module_of(boom, aboom, leaves)
    res = dispatch(m, "boom", {"x": 4})
    assert res["isError"] is True and "structuredContent" not in res
    assert res["content"] == [{"type": "text", "text": "ValueError: bad x: 4"}]
    assert res["_meta"]["forge/error"] == {"type": "ValueError", "message": "bad x: 4"}
    assert dispatch(m, "aboom")["_meta"]["forge/error"]["type"] == "KeyError"
    assert asyncio.run(adispatch(m, "boom", {"x": 1}))["isError"] is True
    assert dispatch(m, "leaves")["_meta"]["forge/error"] == {"type": "SystemExit", "message": "3"}


def test_timeouts():
    release = threading.Event()

    @tool(timeout=0.2)
    def stuck() -> int:
        release.wait(10)
        return 1

    @tool(timeout=0.2)
    async def astuck() -> int:
        await asyncio.sleep(10)
        return 1

    @tool
    def own_timeout() -> int:
        raise TimeoutError("the upstream timed out")

    m = module_of(stuck, astuck, own_timeout)
    for name in ("stuck", "astuck"):
        start = time.monotonic()
        res = dispatch(m, name)
        assert time.monotonic() - start < 2
        assert res["isError"] is True
        assert res["_meta"]["forge/error"] == {"type": "TimeoutError", "message": f"tool {name!r} did not finish within 0.2 s"}
    start = time.monotonic()
    assert asyncio.run(adispatch(m, "astuck"))["_meta"]["forge/error"]["type"] == "TimeoutError"
    assert asyncio.run(adispatch(m, "stuck"))["_meta"]["forge/error"]["type"] == "TimeoutError"
    assert time.monotonic() - start < 3
    # The caller's timeout overrides the tool's.
    assert "within 0.05 s" in dispatch(m, "stuck", timeout=0.05)["content"][0]["text"]
    release.set()
    # A TimeoutError raised by the tool is the tool's own error, not a timeout of the call.
    assert dispatch(m, "own_timeout")["_meta"]["forge/error"] == {"type": "TimeoutError", "message": "the upstream timed out"}
    # The stuck worker finished; the next call still works.
    assert dispatch(m, "stuck", timeout=5)["structuredContent"] == {"result": 1}


def test_inline_calls_run_on_the_calling_thread():
    @tool
    def where() -> str:
        return threading.current_thread().name

    @tool
    async def awhere() -> str:
        return "async"

    t = get_tool(where)
    me = threading.current_thread().name
    assert t.call({}, inline=True)["structuredContent"] == {"result": me}
    assert t.call({})["structuredContent"] != {"result": me}  # a worker thread
    assert Toolbox([t]).call("where", {}, inline=True)["structuredContent"] == {"result": me}
    assert get_tool(awhere).call({}, inline=True)["structuredContent"] == {"result": "async"}
    with pytest.raises(InvalidArguments):
        t.call({"x": 1}, inline=True)


def test_async_timeout_cancels_the_coroutine():
    cancelled = threading.Event()

    @tool(timeout=0.1)
    async def slow() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            cancelled.set()

    assert dispatch(module_of(slow), "slow")["isError"] is True
    assert cancelled.wait(2)


def test_arguments_are_converted():
    seen = {}

    @tool
    def f(shape: Shape, p: Point, pts: List[Point], pair: Tuple[int, str], tags: Set[str], frozen: FrozenSet[int],
          n: int, x: float, u: Union[Point, int], opt: Optional[Shape] = None, by_name: Dict[str, Point] = None) -> None:  # type: ignore[assignment]
        seen.update(locals())

    res = dispatch(module_of(f), "f", {
        "shape": "circle", "p": {"x": 1}, "pts": [{"x": 1, "y": 2}], "pair": [1, "a"], "tags": ["a", "b"],
        "frozen": [1], "n": 3.0, "x": 2, "u": {"x": 5}, "opt": "square", "by_name": {"o": {"x": 0}},
    })
    assert res == {"content": [], "isError": False}
    assert seen["shape"] is Shape.CIRCLE and seen["opt"] is Shape.SQUARE
    assert seen["p"] == Point(1.0, 0.0) and seen["pts"] == [Point(1, 2)] and seen["by_name"] == {"o": Point(0)}
    assert seen["pair"] == (1, "a") and seen["tags"] == {"a", "b"} and seen["frozen"] == frozenset({1})
    assert type(seen["n"]) is int and type(seen["x"]) is float
    assert seen["u"] == Point(5)


def test_positional_only_and_kwargs():
    @tool
    def f(a: int, b: int = 2, /, *, c: int = 3, **rest: str) -> Dict[str, int]:
        return {"a": a, "b": b, "c": c, "rest": len(rest)}

    t = get_tool(f)
    assert t.input_schema["additionalProperties"] == {"type": "string"}
    assert t.call({"a": 1, "z": "y"})["structuredContent"] == {"a": 1, "b": 2, "c": 3, "rest": 1}
    with pytest.raises(InvalidArguments, match=r"arguments\.z: expected string"):
        t.call({"a": 1, "z": 1})


def test_construction_errors_are_invalid_arguments():
    @tool
    def f(items: List[Positive]) -> int:
        return len(items)

    with pytest.raises(InvalidArguments) as err:
        dispatch(module_of(f), "f", {"items": [{"n": 1}, {"n": -1}]})
    assert err.value.field == "arguments.items[1]"
    assert "ValueError: n must be positive" in str(err.value)


@pytest.mark.parametrize("value,ok", [(3, True), ("x", False), (float("nan"), False), (object(), False)])
def test_results_are_checked_against_the_output_schema(value, ok):
    @tool
    def f() -> int:
        return value

    res = dispatch(module_of(f), "f")
    assert res["isError"] is (not ok), res
    if not ok:
        assert res["_meta"]["forge/error"]["type"] == "TypeError"
        assert "tool 'f' returned a value" in res["content"][0]["text"]


def test_result_shapes():
    @tool
    def point() -> Point:
        return Point(1.5)

    @tool
    def untyped():
        return {"k": (1, 2), "s": Shape.SQUARE}

    @tool
    def text():
        return "plain"

    @tool
    def nested() -> Dict[str, List[Shape]]:
        return {"a": [Shape.CIRCLE]}

    m = module_of(point, untyped, text, nested)
    assert dispatch(m, "point") == {
        "content": [{"type": "text", "text": '{"x":1.5,"y":0.0}'}], "structuredContent": {"x": 1.5, "y": 0.0}, "isError": False,
    }
    assert dispatch(m, "untyped") == {"content": [{"type": "text", "text": '{"k":[1,2],"s":"square"}'}], "isError": False}
    assert dispatch(m, "text") == {"content": [{"type": "text", "text": "plain"}], "isError": False}
    assert dispatch(m, "nested")["structuredContent"] == {"a": ["circle"]}


def test_pydantic_arguments_and_results():
    pydantic = require_pydantic()

    class Item(pydantic.BaseModel):
        name: str
        qty: int = pydantic.Field(default=1, ge=1)

    @tool
    def order(item: Item) -> Item:
        assert isinstance(item, Item)
        return Item(name=item.name.upper(), qty=item.qty * 2)

    m = module_of(order)
    assert dispatch(m, "order", {"item": {"name": "nut", "qty": 2}})["structuredContent"] == {"name": "NUT", "qty": 4}
    with pytest.raises(InvalidArguments) as err:
        dispatch(m, "order", {"item": {"name": "nut", "qty": 0}})
    assert err.value.field == "arguments.item.qty"


def test_unknown_tool():
    with pytest.raises(UnknownTool, match=r"unknown tool 'nope' \(tools: none\)"):
        dispatch(module_of(), "nope")


def test_table_of_a_module_file(tmp_path):
    path = tmp_path / "mytools.py"
    path.write_text(
        "from forge_tools import tool\n"
        "from helper import shared\n"  # a sibling import, as under `python FILE.py`
        "@tool\n"
        "def b(x: int) -> int:\n"
        "    return x\n"
        "@tool(name='a')\n"
        "def first(x: str) -> str:\n"
        "    return x\n"
        "alias = b\n"
        "def plain(x): return x\n"
    )
    (tmp_path / "helper.py").write_text(
        "from forge_tools import tool\n"
        "@tool\n"
        "def shared() -> int:\n"
        "    return 7\n"
    )
    m = load(path)
    table = tool_table(m)
    assert [t["name"] for t in table] == ["shared", "b", "a"]  # definition order, imported tools included, aliases once
    assert json.loads(json.dumps(table)) == table
    assert dispatch(m, "shared")["structuredContent"] == {"result": 7}


def test_load_a_package(tmp_path):
    pkg = tmp_path / "pkgtools"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .impl import double\n")
    (pkg / "impl.py").write_text(
        "from forge_tools import tool\n"
        "@tool\n"
        "def double(x: int) -> int:\n"
        "    return 2 * x\n"
    )
    m = load(pkg)
    assert [t.name for t in tools_of(m)] == ["double"]
    assert dispatch(m, "double", {"x": 4})["structuredContent"] == {"result": 8}


def test_duplicate_names_are_an_error():
    @tool(name="same")
    def one() -> None: ...

    @tool(name="same")
    def two() -> None: ...

    with pytest.raises(ToolDefinitionError, match="both named 'same'"):
        tool_table(module_of(one, two))
    with pytest.raises(ToolDefinitionError, match="two tools are named 'same'"):
        Toolbox([get_tool(one), get_tool(two)])


def test_tool_must_be_the_outermost_decorator():
    import functools

    def logged(fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            return fn(*a, **k)
        return wrapper

    @logged
    @tool
    def inner(x: int) -> int:
        return x

    @tool
    @logged
    def outer(x: int) -> int:
        return x

    def sync_wrapper(fn):
        @functools.wraps(fn)
        def wrapper(*a, **k):
            return fn(*a, **k)  # returns the coroutine
        return wrapper

    @tool
    @sync_wrapper
    async def hidden_async(x: int) -> int:
        await asyncio.sleep(0)
        return x + 1

    assert dispatch(module_of(hidden_async), "hidden_async", {"x": 1})["structuredContent"] == {"result": 2}
    assert asyncio.run(adispatch(module_of(hidden_async), "hidden_async", {"x": 1}))["structuredContent"] == {"result": 2}
    with pytest.raises(ToolDefinitionError, match="put @tool above"):
        tool_table(module_of(inner))
    assert dispatch(module_of(outer), "outer", {"x": 2})["structuredContent"] == {"result": 2}
    assert get_tool(outer).input_schema["required"] == ["x"]  # the signature seen through functools.wraps


def test_postponed_annotations(tmp_path):
    """`from __future__ import annotations` (hints as strings) resolves in the tools file's namespace."""
    path = tmp_path / "future_tools.py"
    path.write_text(
        "from __future__ import annotations\n"
        "import dataclasses\n"
        "from typing import List, Optional\n"
        "from forge_tools import tool\n"
        "@dataclasses.dataclass\n"
        "class Node:\n"
        "    name: str\n"
        "    children: List[Node] = dataclasses.field(default_factory=list)\n"
        "@tool\n"
        "def count(root: Node, limit: Optional[int] = None) -> int:\n"
        "    return 1 + sum(count(c) for c in root.children)\n"
    )
    m = load(path)
    assert tool_table(m)[0]["inputSchema"]["properties"]["root"] == {"$ref": "#/$defs/Node"}
    res = dispatch(m, "count", {"root": {"name": "a", "children": [{"name": "b"}, {"name": "c"}]}})
    assert res["structuredContent"] == {"result": 3}
