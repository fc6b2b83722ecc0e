"""`python -m forge_tools bench`: the framework's own costs, unsandboxed.

Cold start is import forge_tools + decorating N tools, timed inside a fresh
interpreter each run (the interpreter's own start is reported beside it, not
included). Dispatch is one call through Toolbox.call (validate, convert, run
on a worker thread with a timeout, check and wrap the result), in process,
beside calling the function directly. Figures are medians (p50) and p99.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List

CLAIMS = {"cold_start_ms": 1.1, "dispatch_ms": 0.08}
"""What the original decorator framework claims, unsandboxed."""

_HINTS = [
    ("int", "a + 1"),
    ("str", "a"),
    ("float", "a * 2"),
    ("List[int]", "len(a)"),
    ("Dict[str, float]", "len(a)"),
    ("Optional[str]", "a"),
    ("Literal['x', 'y']", "a"),
    ("Tuple[int, str]", "a[0]"),
]


def tools_source(n: int) -> str:
    """A module of n typed, documented tools of varied signatures."""
    out = ["from typing import Dict, List, Literal, Optional, Tuple", "from forge_tools import tool", ""]
    for i in range(n):
        hint, body = _HINTS[i % len(_HINTS)]
        ret = "int" if "len" in body or body.startswith("a[0]") or hint == "int" else "object"
        out += [
            "@tool",
            f"def tool_{i}(a: {hint}, b: int = {i}) -> {ret}:",
            f'    """Tool number {i}.',
            "",
            "    Args:",
            "        a: The input.",
            "        b: A number.",
            '    """',
            f"    return {body}",
            "",
        ]
    return "\n".join(out)


_CHILD = """
import time
CODE = compile(SRC, "bench_tools", "exec")  # a tools module's bytecode is cached too
c0, t0 = time.process_time(), time.perf_counter()
import forge_tools
c1, t1 = time.process_time(), time.perf_counter()
ns = {"__name__": "bench_tools"}
exec(CODE, ns)
c2, t2 = time.process_time(), time.perf_counter()
import json, sys
assert len(forge_tools.Toolbox([v.__forge_tool__ for v in ns.values() if hasattr(v, "__forge_tool__")]).tools) == N
# The framework's own share: its modules imported again (the standard library stays
# loaded) and the tools decorated again, in this process.
own_import, own_decorate = [], []
for _ in range(REPEAT):
    for k in [k for k in sys.modules if k == "forge_tools" or k.startswith("forge_tools.")]:
        del sys.modules[k]
    a = time.perf_counter()
    import forge_tools
    b = time.perf_counter()
    exec(CODE, {"__name__": "bench_tools"})
    own_import.append(b - a)
    own_decorate.append(time.perf_counter() - b)
sys.stdout.write(json.dumps({"import": t1 - t0, "decorate": t2 - t1, "cpu": c2 - c0,
                             "own_import": own_import, "own_decorate": own_decorate}))
"""


def _percentile(xs: List[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def cold_start(n: int, runs: int, repeat: int = 20) -> Dict[str, float]:
    import compileall

    src = tools_source(n)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    # Measure imports from bytecode, as from an installed wheel (pip compiles it), even
    # where PYTHONDONTWRITEBYTECODE is set.
    compileall.compile_dir(os.path.dirname(os.path.abspath(__file__)), quiet=1)
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    code = f"SRC = {src!r}\nN = {n}\nREPEAT = {repeat}\n" + _CHILD
    first, cpu, bare, own_import, own_decorate = [], [], [], [], []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        bare.append(time.perf_counter() - t)
        r = json.loads(subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True).stdout)
        first.append(r["import"] + r["decorate"])
        cpu.append(r["cpu"])
        own_import += r["own_import"]
        own_decorate += r["own_decorate"]
    ms = lambda xs: statistics.median(xs) * 1e3  # noqa: E731
    return {
        "tools": n,
        "first_wall_ms": ms(first),
        "first_cpu_ms": ms(cpu),
        "interpreter_start_ms": ms(bare),
        "own_import_ms": ms(own_import),
        "own_decorate_ms": ms(own_decorate),
        "own_cold_start_ms": ms(own_import) + ms(own_decorate),
        # The least disturbed run: on a shared, loaded machine the median mostly measures the others.
        "own_cold_start_min_ms": (min(own_import) + min(own_decorate)) * 1e3,
        "decorate_per_tool_us": ms(own_decorate) / n * 1e3,
        "decorate_per_tool_min_us": min(own_decorate) / n * 1e6,
    }


def _time(fn: Any, calls: int) -> List[float]:
    for _ in range(min(1000, calls)):
        fn()
    out = []
    clock = time.perf_counter
    for _ in range(calls):
        t = clock()
        fn()
        out.append(clock() - t)
    return out


def dispatch(calls: int) -> Dict[str, float]:
    from ._tool import Toolbox, tool

    def add(a: int, b: int = 1) -> int:
        """Adds."""
        return a + b

    async def aadd(a: int, b: int = 1) -> int:
        return a + b

    box = Toolbox([tool(add).__forge_tool__, tool(aadd).__forge_tool__])
    args = {"a": 1, "b": 2}
    assert box.call("add", args)["structuredContent"] == {"result": 3}
    direct = _time(lambda: add(1, b=2), calls)
    sync = _time(lambda: box.call("add", args), calls)
    bind = _time(lambda: box.tools["add"].bind(args), calls)
    async_ = _time(lambda: box.call("aadd", args), max(1, calls // 4))

    async def in_loop() -> List[float]:
        out = []
        clock = time.perf_counter
        for _ in range(max(1, calls // 4)):
            t = clock()
            await box.acall("aadd", args)
            out.append(clock() - t)
        return out

    on_loop = asyncio.run(in_loop())
    ms = lambda xs, p: _percentile(xs, p) * 1e3  # noqa: E731
    return {
        "calls": calls,
        "direct_p50_ms": ms(direct, 50),
        "dispatch_p50_ms": ms(sync, 50),
        "dispatch_p99_ms": ms(sync, 99),
        "validate_and_bind_p50_ms": ms(bind, 50),
        "async_dispatch_p50_ms": ms(async_, 50),
        "async_in_loop_p50_ms": ms(on_loop, 50),
    }


def main(tools: int, runs: int, calls: int, as_json: bool) -> int:
    cold1 = cold_start(1, runs)
    coldn = cold_start(tools, runs)
    disp = dispatch(calls)
    result = {"python": sys.version.split()[0], "claims": CLAIMS, "cold_start_1": cold1, "cold_start_n": coldn, "dispatch": disp}
    if as_json:
        print(json.dumps(result, indent=2))
        return 0
    c = CLAIMS
    print(f"forge_tools bench, Python {result['python']}, unsandboxed, in process (p50 unless noted)")
    print(f"  interpreter start (python -c pass, wall, for scale)    {coldn['interpreter_start_ms']:8.2f} ms")
    print("  cold start: import forge_tools + decorate the tools, the framework's own share (stdlib loaded)")
    for r in (cold1, coldn):
        print(f"    {r['tools']:3d} tools  p50 {r['own_cold_start_ms']:7.3f} ms = {r['own_cold_start_ms'] / c['cold_start_ms']:5.2f} x"
              f"  min {r['own_cold_start_min_ms']:7.3f} ms = {r['own_cold_start_min_ms'] / c['cold_start_ms']:5.2f} x"
              f" the claimed {c['cold_start_ms']} ms  (decorating: p50 {r['decorate_per_tool_us']:.0f} us,"
              f" min {r['decorate_per_tool_min_us']:.0f} us per tool)")
        print(f"               first import in a fresh interpreter, stdlib modules included:"
              f" {r['first_wall_ms']:.2f} ms wall, {r['first_cpu_ms']:.2f} ms CPU")
    d = disp
    print(f"  dispatch, sync tool                            {d['dispatch_p50_ms']:8.3f} ms"
          f"  = {d['dispatch_p50_ms'] / c['dispatch_ms']:.2f} x the claimed {c['dispatch_ms']} ms  (p99 {d['dispatch_p99_ms']:.3f} ms)")
    print(f"    of which validation + conversion             {d['validate_and_bind_p50_ms']:8.3f} ms")
    print(f"    calling the function directly                {d['direct_p50_ms']:8.4f} ms")
    print(f"  dispatch, async tool from sync code            {d['async_dispatch_p50_ms']:8.3f} ms")
    print(f"  dispatch, async tool on the caller's loop      {d['async_in_loop_p50_ms']:8.3f} ms")
    return 0
