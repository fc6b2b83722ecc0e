"""forge's side of hosted tools inside a sandbox (runtime/hosted; not part of the public API).

boot(path) imports the tools module at path and returns the two functions the host calls. This
module is forge's own code: in zygote mode a hosted tools template imports it (and so runs the
warm-up below once) before it forks; the tools module itself is imported only by boot, in a child,
which is a sandbox by then. Every reply is one line after a marker the host chose: the cell's value
when small, else a line on stdout (so that what the tools print stays apart).
"""

import json
import sys

import forge_tools


def boot(path):
    box = forge_tools.Toolbox.from_module(forge_tools.load(path))

    def reply(marker, value):
        sys.stdout.flush()
        sys.stdout.write("\n" + marker + json.dumps(value, separators=(",", ":")) + "\n")
        sys.stdout.flush()

    def table(marker):
        reply(marker, box.table())

    def call(marker, name, raw, timeout):
        try:
            # inline: the host enforces the timeout (it kills the sandbox), so
            # a sync tool runs right here, without a hop to a worker thread.
            result = box.call(name, json.loads(raw), timeout, inline=True)
        except (forge_tools.InvalidArguments, forge_tools.UnknownTool) as e:
            result = {"invalid": str(e)}
        text = json.dumps(result, separators=(",", ":"))
        if len(text) <= 60000:
            return marker + text  # the cell's value: no trip through stdout
        reply(marker, result)

    return table, call


def _warm():
    """One call of a stand-in tool, at import: the code paths of validation, conversion and
    results run once (in a zygote template, once for all its children), so that the first real
    call does not pay for them."""

    @forge_tools.tool(name="forge_warmup")
    def warmup(a: int, b: str = "x") -> dict:
        return {"a": a, "b": b}

    forge_tools.Toolbox([forge_tools.get_tool(warmup)]).call("forge_warmup", {"a": 1}, 5.0, inline=True)
    json.dumps(json.loads('{"a": [1, 2.5, "x", null, true]}'), separators=(",", ":"))


_warm()
del _warm
