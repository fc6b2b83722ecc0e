"""`python -m forge_tools serve FILE.py`: a plain MCP stdio server, for local development.

Newline-delimited JSON-RPC 2.0 on stdin/stdout, standard library only. The
tools run in this process, unsandboxed. Calls run concurrently (a slow tool
does not hold up ping or other calls) and notifications/cancelled cancels a
pending call. Before any tool is imported, fd 1 is moved aside and pointed at
stderr, so that a tool's print() (or a C extension's write to fd 1) cannot
corrupt the protocol stream.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import traceback
from typing import Any, Dict, Optional, TextIO

from . import __version__
from ._errors import CallError, InvalidArguments, UnknownTool
from ._tool import Toolbox, load

__all__ = ["Server", "serve", "PROTOCOL_VERSIONS"]

PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18")
"""Protocol versions this server speaks, newest first (both have structured tool output)."""

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603
_MAX_LINE = 64 << 20
_TOO_LONG: Any = object()  # the reader's mark for an oversized line


class Server:
    """The MCP side of a Toolbox: one JSON-RPC message in, at most one out."""

    def __init__(self, toolbox: Toolbox, name: str = "forge_tools", instructions: str = "", log: TextIO = sys.stderr):
        self.toolbox = toolbox
        self.name = name
        self.instructions = instructions
        self.log = log
        self.protocol: Optional[str] = None
        self._tasks: Dict[Any, "asyncio.Task[Any]"] = {}

    def _error(self, id_: Any, code: int, message: str, data: Any = None) -> Dict[str, Any]:
        err: Dict[str, Any] = {"code": code, "message": message}
        if data is not None:
            err["data"] = data
        return {"jsonrpc": "2.0", "id": id_, "error": err}

    def parse(self, line: bytes) -> Any:
        """A line as a message, or an error response for a line that is not JSON."""
        if line is _TOO_LONG:
            return _Reply(self._error(None, PARSE_ERROR, f"parse error: a message longer than {_MAX_LINE >> 20} MiB"))
        try:
            return json.loads(line.decode("utf-8"), parse_constant=_no_constant)
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            return _Reply(self._error(None, PARSE_ERROR, f"parse error: {type(e).__name__}: {e}"))

    async def handle(self, msg: Any) -> Optional[Dict[str, Any]]:
        """The response to one decoded message; None for notifications and responses."""
        if isinstance(msg, _Reply):
            return msg.response
        if isinstance(msg, list):
            return self._error(None, INVALID_REQUEST, "invalid request: batches are not supported (MCP 2025-06-18 and later)")
        if not isinstance(msg, dict):
            return self._error(None, INVALID_REQUEST, "invalid request: a message must be a JSON object")
        has_id = "id" in msg
        id_ = msg.get("id")
        if has_id and (isinstance(id_, bool) or not isinstance(id_, (str, int))):
            return self._error(None, INVALID_REQUEST, "invalid request: id must be a string or an integer")
        if msg.get("jsonrpc") != "2.0":
            return self._error(id_ if has_id else None, INVALID_REQUEST, 'invalid request: "jsonrpc" must be "2.0"')
        method = msg.get("method")
        if method is None and has_id and ("result" in msg or "error" in msg):
            return None  # a response to a request we never send: nothing to do
        if not isinstance(method, str):
            return self._error(id_ if has_id else None, INVALID_REQUEST, 'invalid request: "method" must be a string')
        params = msg.get("params", {})
        if not has_id:
            self._notification(method, params)
            return None
        if params is not None and not isinstance(params, dict):
            return self._error(id_, INVALID_PARAMS, "invalid params: params must be an object")
        params = params or {}
        try:
            result = await self._request(id_, method, params)
        except _RPCError as e:
            return self._error(id_, e.code, e.message, e.data)
        except asyncio.CancelledError:
            return None  # cancelled by the client: no response, as MCP asks
        except Exception as e:  # a bug here, not in a tool
            traceback.print_exc(file=self.log)
            return self._error(id_, INTERNAL_ERROR, f"internal error: {type(e).__name__}: {e}")
        return {"jsonrpc": "2.0", "id": id_, "result": result}

    def _notification(self, method: str, params: Any) -> None:
        if method == "notifications/cancelled" and isinstance(params, dict):
            task = self._tasks.get(params.get("requestId"))
            if task is not None:
                task.cancel()
        # notifications/initialized and anything unknown: nothing to do, and never a reply.

    async def _request(self, id_: Any, method: str, params: Dict[str, Any]) -> Any:
        if method == "initialize":
            return self._initialize(params)
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": [t.mcp() for t in self.toolbox.tools.values()]}
        if method == "tools/call":
            return await self._call(id_, params)
        raise _RPCError(METHOD_NOT_FOUND, f"method not found: {method}")

    def _initialize(self, params: Dict[str, Any]) -> Dict[str, Any]:
        asked = params.get("protocolVersion")
        if not isinstance(asked, str):
            raise _RPCError(INVALID_PARAMS, "invalid params: initialize needs protocolVersion (a string)")
        self.protocol = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0]
        out: Dict[str, Any] = {
            "protocolVersion": self.protocol,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": self.name, "version": __version__},
        }
        if self.instructions:
            out["instructions"] = self.instructions
        return out

    async def _call(self, id_: Any, params: Dict[str, Any]) -> Dict[str, Any]:
        name = params.get("name")
        arguments = params.get("arguments", {})
        if not isinstance(name, str):
            raise _RPCError(INVALID_PARAMS, "invalid params: tools/call needs name (a string)")
        if arguments is not None and not isinstance(arguments, dict):
            raise _RPCError(INVALID_PARAMS, "invalid params: arguments must be an object")
        task = asyncio.ensure_future(self.toolbox.acall(name, arguments))
        self._tasks[id_] = task
        try:
            result = await task
        except UnknownTool as e:
            raise _RPCError(INVALID_PARAMS, str(e), {"tool": name}) from None
        except InvalidArguments as e:
            raise _RPCError(INVALID_PARAMS, str(e), {"tool": name, "field": e.field, "path": list(e.path)}) from None
        except CallError as e:  # pragma: no cover - every CallError is one of the above
            raise _RPCError(INVALID_PARAMS, str(e)) from None
        finally:
            self._tasks.pop(id_, None)
        if result.get("isError"):
            meta = result.get("_meta", {}).get("forge/error", {})
            print(f"forge_tools: tool {name!r} failed: {meta.get('type')}: {meta.get('message')}", file=self.log)
        return result


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # Python's json accepts NaN and Infinity; JSON does not


class _RPCError(Exception):
    def __init__(self, code: int, message: str, data: Any = None):
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


class _Reply:
    """A response decided while parsing (a parse error)."""

    def __init__(self, response: Dict[str, Any]):
        self.response = response


def serve(path: str, stdin: Any = None, stdout: Any = None, log: TextIO = sys.stderr) -> int:
    """Serves the tools of path over stdio until stdin closes; returns the exit status."""
    if stdout is None:
        # Keep the real stdout for the protocol; everything else written to fd 1 goes to stderr.
        stdout = os.fdopen(os.dup(1), "wb", buffering=0)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
    if stdin is None:
        stdin = sys.stdin.buffer
    try:
        module = load(path)
        toolbox = Toolbox.from_module(module)
    except Exception:
        print(f"forge_tools: cannot load tools from {path}:", file=log)
        traceback.print_exc(file=log)
        return 1
    names = ", ".join(toolbox.tools) or "none"
    print(
        f"forge_tools {__version__}: serving {len(toolbox.tools)} tools from {path} over stdio ({names}).\n"
        "forge_tools: UNSANDBOXED: the tools run in this process, with this user's files, network and "
        "rights, and memory limits are not enforced. For local development only; "
        "`forge serve --tools` runs every call in a sandbox.",
        file=log,
        flush=True,
    )
    server = Server(toolbox, instructions=f"Tools from {os.path.basename(path)} (forge_tools, unsandboxed).", log=log)
    try:
        asyncio.run(_run(server, stdin, stdout))
    except KeyboardInterrupt:
        return 130
    return 0


async def _run(server: Server, stdin: Any, stdout: Any) -> None:
    loop = asyncio.get_running_loop()
    lines: "asyncio.Queue[Optional[bytes]]" = asyncio.Queue()
    write_lock = threading.Lock()

    def reader() -> None:
        try:
            while True:
                line = stdin.readline(_MAX_LINE)
                if not line:
                    break
                if len(line) >= _MAX_LINE and not line.endswith(b"\n"):
                    while line and not line.endswith(b"\n"):  # skip the rest of it
                        line = stdin.readline(_MAX_LINE)
                    line = _TOO_LONG
                loop.call_soon_threadsafe(lines.put_nowait, line)
        finally:
            loop.call_soon_threadsafe(lines.put_nowait, None)

    def send(msg: Dict[str, Any]) -> None:
        try:
            data = json.dumps(msg, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
        except UnicodeEncodeError:  # a lone surrogate in a string: escaped, the stream stays UTF-8
            data = json.dumps(msg, separators=(",", ":")).encode("ascii") + b"\n"
        with write_lock:
            stdout.write(data)
            stdout.flush()

    async def one(line: bytes) -> None:
        response = await server.handle(server.parse(line))
        if response is not None:
            send(response)

    threading.Thread(target=reader, name="forge_tools-stdin", daemon=True).start()
    pending: set = set()
    while True:
        line = await lines.get()
        if line is None:
            break
        if line is not _TOO_LONG and not line.strip():
            continue
        task = asyncio.ensure_future(one(line))
        pending.add(task)
        task.add_done_callback(pending.discard)
    if pending:  # stdin closed: let calls in flight finish and answer
        await asyncio.wait(pending)
