"""The exceptions forge_tools raises.

ToolDefinitionError is raised at decoration time, so that a tool that cannot
be described never reaches a client. The others are protocol errors of a
call (a client's mistake, -32602 in MCP); an exception raised by a tool
itself is never raised to the caller but returned as an isError result.
"""

from __future__ import annotations

from typing import Any, Tuple

__all__ = ["ToolDefinitionError", "CallError", "UnknownTool", "InvalidArguments"]


class ToolDefinitionError(TypeError):
    """A function that @tool cannot turn into a tool (an unsupported hint, a bad option)."""


class CallError(Exception):
    """A call that cannot be made: the caller's mistake, not the tool's."""


class UnknownTool(CallError, LookupError):
    """No tool of that name."""

    def __init__(self, name: Any, known: Tuple[str, ...] = ()):
        listed = ", ".join(known) if known else "none"
        super().__init__(f"unknown tool {name!r} (tools: {listed})")
        self.name = name


class InvalidArguments(CallError, ValueError):
    """Arguments that do not match a tool's inputSchema; path is where (keys and indexes)."""

    def __init__(self, tool: str, path: Tuple[Any, ...], message: str):
        from ._jsonschema import format_path

        self.tool = tool
        self.path = path
        self.field = format_path(path)
        self.reason = message
        super().__init__(f"invalid arguments for tool {tool!r}: {self.field}: {message}")
