"""python -m forge_tools: serve, table and bench."""

from __future__ import annotations

import argparse
import json
import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m forge_tools", description="Typed Python functions as MCP tools.")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve a file's tools as an MCP stdio server (unsandboxed, for local development)")
    s.add_argument("path", help="a tools file (FILE.py) or a package directory")
    t = sub.add_parser("table", help="print the tool table of a file as JSON")
    t.add_argument("path")
    b = sub.add_parser("bench", help="measure cold start (import + decorate) and in-process dispatch")
    b.add_argument("--tools", type=int, default=50, help="tools decorated in the cold-start run (default 50)")
    b.add_argument("--runs", type=int, default=20, help="cold-start runs, each a fresh interpreter (default 20)")
    b.add_argument("--calls", type=int, default=20000, help="dispatched calls per measurement (default 20000)")
    b.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = p.parse_args(argv)
    if args.command == "serve":
        from ._server import serve

        return serve(args.path)
    if args.command == "table":
        from ._tool import load, tool_table

        json.dump(tool_table(load(args.path)), sys.stdout, indent=2, ensure_ascii=False)
        print()
        return 0
    from ._bench import main as bench

    return bench(args.tools, args.runs, args.calls, args.json)


if __name__ == "__main__":
    sys.exit(main())
