"""The @tool decorator, the tool table of a module, and dispatch.

@tool leaves the function as it was (same object, same behaviour when called
directly) and attaches a Tool to it as __forge_tool__. Everything a client
will see is computed at decoration time, so a bad hint fails at import.

A module's tools are the decorated functions in its namespace (defined there
or imported into it), in definition order. That is what a loader reads:
tool_table(module) is plain JSON data, and dispatch(module, name, arguments)
validates the arguments against the inputSchema, runs the function with a
timeout and returns an MCP CallToolResult; an exception raised by the tool is
a result with isError, never an exception of dispatch.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import math
import os
import queue
import re
import sys
import threading
import types
import typing
from types import ModuleType
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

from . import _docstring
from ._errors import InvalidArguments, ToolDefinitionError, UnknownTool
from ._jsonschema import SchemaError, validate
from ._schema import (
    Field,
    NotJSON,
    SchemaContext,
    Unsupported,
    compile_hint,
    describe_hint,
    json_text,
    object_schema,
    to_json,
)

__all__ = [
    "tool", "Tool", "Toolbox", "get_tool", "tools_of", "tool_table", "dispatch", "adispatch",
    "load", "DEFAULT_TIMEOUT",
]

DEFAULT_TIMEOUT = 30.0
"""Seconds a call may take when neither @tool nor the caller sets a timeout (forge's default too)."""

ERROR_META = "forge/error"
"""The _meta key of an isError result that carries the exception's type and message."""

_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
_SIZE_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)\s*([a-z]*)$")
_UNITS = {
    "": 1, "b": 1,
    "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10,
    "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
    "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
    "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40,
}
_MEMORY_FORMS = "use a positive size in bytes or with a binary unit: 1048576, 1024k, 512m, 1.5g, 256M, 128mb, 2gib"


class _Param:
    __slots__ = ("name", "node", "positional_only", "default")

    def __init__(self, name: str, node: Any, positional_only: bool, default: Any):
        self.name, self.node, self.positional_only, self.default = name, node, positional_only, default


class Tool:
    """One tool: its function, its schemas and its limits. Made by @tool."""

    def __init__(
        self,
        fn: Callable[..., Any],
        name: Optional[str] = None,
        description: Optional[str] = None,
        timeout: Optional[float] = None,
        memory: Union[int, str, None] = None,
        persistent: bool = False,
    ):
        if not inspect.isfunction(fn):
            raise ToolDefinitionError(f"@tool applies to functions (def or async def), not to {fn!r}")
        self.fn = fn
        self.qualname = f"{fn.__module__}.{fn.__qualname__}"
        self.name = fn.__name__ if name is None else name
        if not isinstance(self.name, str) or not _NAME_RE.fullmatch(self.name):
            raise ToolDefinitionError(
                f"@tool {self.qualname}: name {self.name!r} is not a valid tool name "
                "(1 to 128 of A-Z, a-z, 0-9, '_', '-' and '.')"
            )
        self.is_async = inspect.iscoroutinefunction(fn)
        self.timeout = _check_timeout(self.qualname, timeout)
        self.memory = _parse_memory(self.qualname, memory)
        if not isinstance(persistent, bool):
            raise ToolDefinitionError(f"@tool {self.qualname}: persistent={persistent!r} must be True or False")
        self.persistent = persistent
        doc = _docstring.parse(fn.__doc__)
        if description is not None and not isinstance(description, str):
            raise ToolDefinitionError(f"@tool {self.qualname}: description must be a str, not {description!r}")
        self.description = doc.description if description is None else description
        self._params: List[_Param] = []
        self._extra: Any = None
        hints = self._hints()
        self.input_schema = self._input_schema(doc, hints)
        self.output_schema, self._wrap, self._returns_none = self._output_schema(doc, hints)

    # Schemas ---------------------------------------------------------------

    def _hints(self) -> Dict[str, Any]:
        try:
            return typing.get_type_hints(self.fn, include_extras=True)
        except Exception:
            pass
        # Find which annotation fails, so the error can name it.
        for pname, ann in self.fn.__annotations__.items():
            probe = types.FunctionType(_probe.__code__, self.fn.__globals__)
            probe.__annotations__ = {"x": ann}
            try:
                typing.get_type_hints(probe, include_extras=True)
            except Exception as e:
                what = "the return type" if pname == "return" else f"parameter {pname!r}"
                raise ToolDefinitionError(
                    f"@tool {self.qualname}: {what} has a type hint that cannot be resolved: "
                    f"{ann!r} ({type(e).__name__}: {e}); define the names it uses before the tool"
                ) from e
        raise ToolDefinitionError(f"@tool {self.qualname}: its type hints cannot be resolved")  # pragma: no cover

    def _compile(self, what: str, hint: Any, memo: Dict[int, Any]) -> Any:
        try:
            return compile_hint(hint, self.fn.__globals__, memo)
        except Unsupported as e:
            inner = "" if e.hint is hint else f" ({describe_hint(e.hint)}: {e.reason})"
            reason = "" if inner else f": {e.reason}"
            raise ToolDefinitionError(
                f"@tool {self.qualname}: {what} has an unsupported type hint {describe_hint(hint)}{inner}{reason}. "
                "Supported: str, int, float, bool, None, Any, list, dict[str, T], tuple, set, Optional/Union, "
                "Literal, Enum, TypedDict, dataclasses, pydantic models, Annotated[T, 'description']"
            ) from e

    def _input_schema(self, doc: _docstring.Docstring, hints: Dict[str, Any]) -> Dict[str, Any]:
        sig = inspect.signature(self.fn)
        memo: Dict[int, Any] = {}
        ctx = SchemaContext("input")
        fields: List[Field] = []
        for p in sig.parameters.values():
            what = f"parameter {p.name!r}"
            if p.kind is p.VAR_POSITIONAL:
                raise ToolDefinitionError(
                    f"@tool {self.qualname}: {what} is *{p.name}; tool arguments are a JSON object, "
                    "so take a list parameter instead"
                )
            if p.name not in hints:
                raise ToolDefinitionError(
                    f"@tool {self.qualname}: {what} has no type hint; annotate it "
                    "(typing.Any accepts any JSON value)"
                )
            node = self._compile(what, hints[p.name], memo)
            if p.kind is p.VAR_KEYWORD:
                self._extra = node
                continue
            has_default = p.default is not p.empty
            self._params.append(_Param(p.name, node, p.kind is p.POSITIONAL_ONLY, p.default))
            fields.append(
                Field(p.name, node, not has_default, p.default if has_default else dataclasses.MISSING,
                      doc.params.get(p.name, ""))
            )
        schema = object_schema(ctx, fields, closed=True, extra=self._extra)
        if ctx.defs:
            schema["$defs"] = ctx.defs
        return schema

    def _output_schema(self, doc: _docstring.Docstring, hints: Dict[str, Any]) -> Tuple[Optional[Dict[str, Any]], bool, bool]:
        if "return" not in self.fn.__annotations__:
            return None, False, False
        hint = hints.get("return")
        if hint is None or hint is type(None):
            return None, False, True
        ctx = SchemaContext("output")
        s = dict(self._compile("the return type", hint, {}).schema(ctx))
        target = s
        if "$ref" in s and set(s) <= {"$ref", "description"}:
            target = ctx.defs.get(s["$ref"][len("#/$defs/"):], s)
        if target.get("type") == "object":
            out = s if target is s else {"type": "object", **s}
            if doc.returns and "description" not in out:
                out["description"] = doc.returns
            wrap = False
        else:
            if doc.returns and "description" not in s:
                s["description"] = doc.returns
            out = {"type": "object", "properties": {"result": s}, "required": ["result"]}
            wrap = True
        if ctx.defs:
            out["$defs"] = ctx.defs
        return out, wrap, False

    # The table -------------------------------------------------------------

    def spec(self) -> Dict[str, Any]:
        """This tool's entry in the tool table: plain, JSON-serialisable data."""
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
            "outputSchema": self.output_schema,
            "timeout": self.timeout,
            "memory": self.memory,
            "persistent": self.persistent,
        }

    def mcp(self) -> Dict[str, Any]:
        """This tool as an MCP Tool (tools/list)."""
        out: Dict[str, Any] = {"name": self.name}
        if self.description:
            out["description"] = self.description
        out["inputSchema"] = self.input_schema
        if self.output_schema is not None:
            out["outputSchema"] = self.output_schema
        return out

    # Calls -----------------------------------------------------------------

    def bind(self, arguments: Any) -> Tuple[List[Any], Dict[str, Any]]:
        """Validates arguments against the inputSchema and converts them; raises InvalidArguments."""
        if arguments is None:
            arguments = {}
        try:
            validate(self.input_schema, arguments)
        except SchemaError as e:
            raise InvalidArguments(self.name, e.path, e.message) from None
        args: List[Any] = []
        kwargs: Dict[str, Any] = {}
        known = set()
        try:
            for p in self._params:
                known.add(p.name)
                if p.name in arguments:
                    value = p.node.load(arguments[p.name], (p.name,))
                elif p.positional_only:
                    value = p.default
                else:
                    continue
                if p.positional_only:
                    args.append(value)
                else:
                    kwargs[p.name] = value
            if self._extra is not None:
                for k, v in arguments.items():
                    if k not in known:
                        kwargs[k] = self._extra.load(v, (k,))
        except InvalidArguments as e:
            raise InvalidArguments(self.name, e.path, e.reason) from e.__cause__
        return args, kwargs

    def call(self, arguments: Any = None, timeout: Optional[float] = None, *, inline: bool = False) -> Dict[str, Any]:
        """Calls the tool and returns an MCP CallToolResult; raises only InvalidArguments.

        inline runs a sync tool on the calling thread, with no timeout of its own: for a
        caller that enforces one from outside (forge kills the sandbox), which saves the
        hand-over to a worker thread."""
        args, kwargs = self.bind(arguments)
        limit = self._limit(timeout)
        try:
            if self.is_async:
                value = _background_loop().run(self.fn(*args, **kwargs), limit)
            elif inline:
                value = self.fn(*args, **kwargs)
                if inspect.iscoroutine(value):  # a sync wrapper around an async function
                    value = _background_loop().run(value, limit)
            else:
                value = _WORKERS.run(self.fn, args, kwargs, limit)
                if inspect.iscoroutine(value):  # a sync wrapper around an async function
                    value = _background_loop().run(value, limit)
        except _Timeout:
            return self._timeout_result(limit)
        except KeyboardInterrupt:  # the caller's Ctrl-C while it waits
            raise
        except BaseException as e:  # the tool's own failure, SystemExit included
            return error_result(e)
        return self.result(value)

    async def acall(self, arguments: Any = None, timeout: Optional[float] = None) -> Dict[str, Any]:
        """call() for a caller that runs an event loop: async tools run on that loop."""
        import asyncio

        args, kwargs = self.bind(arguments)
        limit = self._limit(timeout)
        try:
            if self.is_async:
                value = await _guard(self.fn(*args, **kwargs), limit)
            else:
                value = await _guard(_WORKERS.submit(self.fn, args, kwargs).wrap(), limit)
                if inspect.iscoroutine(value):  # a sync wrapper around an async function
                    value = await _guard(value, limit)
        except _Timeout:
            return self._timeout_result(limit)
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # the tool's own failure
            return error_result(e)
        return self.result(value)

    def _limit(self, timeout: Optional[float]) -> float:
        if timeout is not None:
            return _check_timeout(self.qualname, timeout) or DEFAULT_TIMEOUT
        return self.timeout if self.timeout is not None else DEFAULT_TIMEOUT

    def _timeout_result(self, limit: float) -> Dict[str, Any]:
        return error_result(TimeoutError(f"tool {self.name!r} did not finish within {limit:g} s"))

    def result(self, value: Any) -> Dict[str, Any]:
        """A return value as a CallToolResult: structuredContent checked against the outputSchema."""
        if self._returns_none:
            return {"content": [], "isError": False}
        try:
            data = to_json(value)
        except NotJSON as e:
            return error_result(TypeError(f"tool {self.name!r} returned a value that is not JSON data: {e}"))
        if self.output_schema is None:
            return {"content": [_text(data)], "isError": False}
        structured = {"result": data} if self._wrap else data
        try:
            validate(self.output_schema, structured)
        except SchemaError as e:
            from ._jsonschema import format_path

            where = format_path(e.path[1:] if self._wrap else e.path, root="return value")
            return error_result(TypeError(
                f"tool {self.name!r} returned a value that does not match its return type: {where}: {e.message}"
            ))
        return {"content": [_text(data)], "structuredContent": structured, "isError": False}

    def __repr__(self) -> str:
        return f"<Tool {self.name!r} ({self.qualname})>"


def _probe() -> None:
    """A code object for stand-ins that carry one annotation, to find which hint fails."""


def _text(data: Any) -> Dict[str, Any]:
    return {"type": "text", "text": data if isinstance(data, str) else json_text(data)}


def error_result(e: BaseException) -> Dict[str, Any]:
    """An exception as an isError CallToolResult: 'Type: message' in the text, both in _meta."""
    kind = type(e).__name__
    message = str(e)
    return {
        "content": [{"type": "text", "text": f"{kind}: {message}" if message else kind}],
        "isError": True,
        "_meta": {ERROR_META: {"type": kind, "message": message}},
    }


def _check_timeout(where: str, timeout: Any) -> Optional[float]:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not math.isfinite(timeout) or timeout <= 0:
        raise ToolDefinitionError(f"@tool {where}: timeout={timeout!r} must be a positive number of seconds")
    return float(timeout)


def _parse_memory(where: str, memory: Any) -> Optional[int]:
    """Bytes, from an int or a size such as "512m" (forge's syntax: cgroups.ParseBytes)."""
    if memory is None:
        return None
    if isinstance(memory, int) and not isinstance(memory, bool):
        n = memory
    elif isinstance(memory, str):
        m = _SIZE_RE.match(memory.strip().lower()) if len(memory) <= 64 else None
        if m is None or m.group(2) not in _UNITS:
            raise ToolDefinitionError(f"@tool {where}: memory={memory!r} is not a size; {_MEMORY_FORMS}")
        whole, _, frac = m.group(1).partition(".")
        unit = _UNITS[m.group(2)]
        n = int(whole) * unit + (int(frac) * unit // 10 ** len(frac) if frac else 0)  # fractions of a byte dropped
    else:
        raise ToolDefinitionError(f"@tool {where}: memory={memory!r} is not a size; {_MEMORY_FORMS}")
    if n <= 0 or n >= 1 << 63:
        raise ToolDefinitionError(f"@tool {where}: memory={memory!r} is out of range; {_MEMORY_FORMS}")
    return n


# Running calls --------------------------------------------------------------


class _Timeout(Exception):
    """A call that went past its limit (never confused with a TimeoutError the tool raises)."""


class _Future:
    """The outcome of one sync call. Lighter than concurrent.futures (which imports
    logging), since cold start counts: sandboxes import the framework."""

    __slots__ = ("_done", "_value", "_error", "_callbacks")

    def __init__(self) -> None:
        self._done = threading.Event()
        self._value: Any = None
        self._error: Optional[BaseException] = None
        self._callbacks: List[Callable[[], None]] = []

    def set(self, value: Any, error: Optional[BaseException]) -> None:
        self._value, self._error = value, error
        self._done.set()
        for cb in self._callbacks:
            cb()

    def result(self, timeout: float) -> Any:
        """The value; raises the call's exception, or _Timeout when it is not done in time."""
        if not self._done.wait(timeout):
            raise _Timeout()
        if self._error is not None:
            raise self._error
        return self._value

    def wrap(self) -> Any:
        """An asyncio future of the running loop that completes with this one."""
        import asyncio

        loop = asyncio.get_running_loop()
        fut = loop.create_future()

        def copy() -> None:
            if fut.done():  # cancelled, or already copied
                return
            if self._error is not None:
                fut.set_exception(self._error)
            else:
                fut.set_result(self._value)

        def later() -> None:
            try:
                loop.call_soon_threadsafe(copy)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass

        self._callbacks.append(later)
        if self._done.is_set():
            loop.call_soon(copy)
        return fut


class _Worker(threading.Thread):
    def __init__(self, pool: "_Workers"):
        super().__init__(name="forge_tools-worker", daemon=True)
        self.pool = pool
        self.jobs: "queue.SimpleQueue[Any]" = queue.SimpleQueue()

    def run(self) -> None:
        while True:
            fut, fn, args, kwargs = self.jobs.get()
            try:
                value = fn(*args, **kwargs)
            except BaseException as e:  # handed to the caller, SystemExit included
                fut.set(None, e)
            else:
                fut.set(value, None)
            value = None
            del fut, fn, args, kwargs, value  # nothing of the call outlives it on an idle thread
            self.pool.idle(self)


class _Workers:
    """Daemon threads for sync tools. A call past its timeout keeps its thread (Python
    cannot kill a thread) and a new one serves the next call; under forge the sandbox
    is killed instead. Daemon threads never hold up the interpreter's exit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: List[_Worker] = []

    def idle(self, w: _Worker) -> None:
        with self._lock:
            self._idle.append(w)

    def submit(self, fn: Callable[..., Any], args: List[Any], kwargs: Dict[str, Any]) -> _Future:
        fut = _Future()
        with self._lock:
            w = self._idle.pop() if self._idle else None
        if w is None:
            w = _Worker(self)
            w.start()
        w.jobs.put((fut, fn, args, kwargs))
        return fut

    def run(self, fn: Callable[..., Any], args: List[Any], kwargs: Dict[str, Any], timeout: float) -> Any:
        return self.submit(fn, args, kwargs).result(timeout)


_WORKERS = _Workers()


async def _guard(aw: Any, timeout: float) -> Any:
    import asyncio

    task = asyncio.ensure_future(aw)
    try:
        done, _ = await asyncio.wait({task}, timeout=timeout)
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not done:
        task.cancel()
        await asyncio.wait({task}, timeout=1.0)  # let its finally blocks run
        raise _Timeout()
    return task.result()


class _Loop:
    """One event loop on a daemon thread for async tools called from sync code."""

    def __init__(self) -> None:
        import asyncio

        self.loop = asyncio.new_event_loop()
        t = threading.Thread(target=self.loop.run_forever, name="forge_tools-loop", daemon=True)
        t.start()

    def run(self, coro: Any, timeout: float) -> Any:
        import asyncio
        import concurrent.futures

        fut = asyncio.run_coroutine_threadsafe(_guard(coro, timeout), self.loop)
        try:
            # _guard ends the call at timeout; the extra second covers a coroutine that blocks the loop.
            return fut.result(timeout + 1.0)
        except concurrent.futures.TimeoutError:
            if fut.done():  # the tool raised TimeoutError itself (an alias on 3.11+)
                raise
            fut.cancel()
            raise _Timeout() from None


_LOOP: Optional[_Loop] = None
_LOOP_LOCK = threading.Lock()


def _background_loop() -> _Loop:
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            _LOOP = _Loop()
        return _LOOP


# The decorator and the table -----------------------------------------------


@typing.overload
def tool(fn: Callable[..., Any]) -> Callable[..., Any]: ...
@typing.overload
def tool(
    *, name: Optional[str] = None, description: Optional[str] = None, timeout: Optional[float] = None,
    memory: Union[int, str, None] = None, persistent: bool = False,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]: ...


def tool(fn: Any = None, *, name: Optional[str] = None, description: Optional[str] = None,
         timeout: Optional[float] = None, memory: Union[int, str, None] = None,
         persistent: bool = False) -> Any:
    """Makes a function an MCP tool; use as @tool or @tool(name=..., ...).

    Args:
        fn: the function (when used as a bare @tool).
        name: the tool's name; the function's name by default.
        description: the tool's description; the docstring's text by default.
        timeout: seconds one call may take (forge_tools' default is 30).
        memory: memory limit of one call, bytes or a size like "512m"; enforced by forge's
            sandbox, not by the standalone server.
        persistent: under forge, keep one warm worker per principal for this tool.

    The function is returned unchanged, with its Tool as __forge_tool__.
    """

    def wrap(f: Callable[..., Any]) -> Callable[..., Any]:
        f.__forge_tool__ = Tool(f, name, description, timeout, memory, persistent)  # type: ignore[attr-defined]
        return f

    if fn is None:
        return wrap
    if isinstance(fn, str):
        raise ToolDefinitionError(f"@tool({fn!r}): pass the name as @tool(name={fn!r})")
    return wrap(fn)


def get_tool(fn: Any) -> Optional[Tool]:
    """The Tool of a decorated function, or None."""
    t = getattr(fn, "__forge_tool__", None) if inspect.isfunction(fn) else None
    if not isinstance(t, Tool):
        return None
    if t.fn is not fn:
        # functools.wraps copied __forge_tool__ onto a wrapper: calls would skip the wrapper.
        raise ToolDefinitionError(
            f"{fn.__module__}.{fn.__qualname__} wraps the tool {t.qualname}: put @tool above (outside) the other decorators"
        )
    return t


def tools_of(module: ModuleType) -> List[Tool]:
    """The tools in a module's namespace, in definition order; two tools of one name are an error."""
    out: Dict[str, Tool] = {}
    for value in list(vars(module).values()):
        t = get_tool(value)
        if t is None:
            continue
        prev = out.get(t.name)
        if prev is not None and prev is not t:
            raise ToolDefinitionError(
                f"module {module.__name__}: tools {prev.qualname} and {t.qualname} are both named {t.name!r}; "
                "rename one with @tool(name=...)"
            )
        out[t.name] = t
    return list(out.values())


class Toolbox:
    """The tools of one module, by name: what a server or forge's loader keeps."""

    def __init__(self, tools: Iterable[Tool]):
        self.tools: Dict[str, Tool] = {}
        for t in tools:
            if t.name in self.tools and self.tools[t.name] is not t:
                raise ToolDefinitionError(f"two tools are named {t.name!r}: {self.tools[t.name].qualname} and {t.qualname}")
            self.tools[t.name] = t

    @classmethod
    def from_module(cls, module: ModuleType) -> "Toolbox":
        return cls(tools_of(module))

    def table(self) -> List[Dict[str, Any]]:
        return [t.spec() for t in self.tools.values()]

    def get(self, name: Any) -> Tool:
        t = self.tools.get(name) if isinstance(name, str) else None
        if t is None:
            raise UnknownTool(name, tuple(self.tools))
        return t

    def call(self, name: str, arguments: Any = None, timeout: Optional[float] = None, *, inline: bool = False) -> Dict[str, Any]:
        return self.get(name).call(arguments, timeout, inline=inline)

    async def acall(self, name: str, arguments: Any = None, timeout: Optional[float] = None) -> Dict[str, Any]:
        return await self.get(name).acall(arguments, timeout)


def tool_table(module: ModuleType) -> List[Dict[str, Any]]:
    """The tool table of a module: name, description, inputSchema, outputSchema, timeout,
    memory (bytes) and persistent of each tool, as JSON-serialisable data."""
    return Toolbox.from_module(module).table()


def dispatch(module: ModuleType, name: str, arguments: Any = None, *, timeout: Optional[float] = None) -> Dict[str, Any]:
    """Calls a tool of module by name; returns a CallToolResult. Raises UnknownTool or
    InvalidArguments (the caller's mistakes); the tool's exceptions become isError results."""
    return Toolbox.from_module(module).call(name, arguments, timeout)


async def adispatch(module: ModuleType, name: str, arguments: Any = None, *, timeout: Optional[float] = None) -> Dict[str, Any]:
    """dispatch() from async code."""
    return await Toolbox.from_module(module).acall(name, arguments, timeout)


def load(path: Union[str, "os.PathLike[str]"]) -> ModuleType:
    """Imports a tools file (or a package directory) as python would run it: its
    directory (the package's parent) goes first on sys.path, so sibling imports work."""
    path = os.path.abspath(os.fspath(path))
    if os.path.isdir(path):
        init = os.path.join(path, "__init__.py")
        if not os.path.isfile(init):
            raise ImportError(f"{path} is a directory without __init__.py; pass a .py file or a package")
        base, location, search = os.path.basename(path), init, [path]
    elif os.path.isfile(path):
        base, location, search = os.path.splitext(os.path.basename(path))[0], path, None
    else:
        raise FileNotFoundError(f"no such tools file or package: {path}")
    name = base if base.isidentifier() and base not in sys.modules else f"forge_tools_user_{abs(hash(path))}"
    spec = importlib.util.spec_from_file_location(name, location, submodule_search_locations=search)
    if spec is None or spec.loader is None:  # pragma: no cover
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    parent = os.path.dirname(path)
    if parent not in sys.path:
        sys.path.insert(0, parent)
    sys.modules[name] = module  # dataclasses and typing look classes' modules up here
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module
