"""forge_tools: typed Python functions as MCP tools.

    from forge_tools import tool

    @tool
    def add(a: int, b: int = 1) -> int:
        \"\"\"Adds two numbers.\"\"\"
        return a + b

The JSON Schemas (2020-12) come from the type hints and the docstring, at
decoration time. `python -m forge_tools serve FILE.py` serves a file's tools
as a local MCP stdio server (unsandboxed); `forge serve --tools FILE.py`
serves them with every call in a sandbox. A loader reads a module's tools with
tool_table() and calls them with dispatch(). No runtime dependencies.
"""

from ._errors import CallError, InvalidArguments, ToolDefinitionError, UnknownTool
from ._schema import to_json
from ._tool import (
    DEFAULT_TIMEOUT,
    Tool,
    Toolbox,
    adispatch,
    dispatch,
    error_result,
    get_tool,
    load,
    tool,
    tool_table,
    tools_of,
)

__version__ = "0.1.0"

__all__ = [
    "tool", "Tool", "Toolbox", "get_tool", "tools_of", "tool_table", "dispatch", "adispatch", "load",
    "error_result", "to_json", "DEFAULT_TIMEOUT",
    "ToolDefinitionError", "CallError", "UnknownTool", "InvalidArguments", "__version__",
]
