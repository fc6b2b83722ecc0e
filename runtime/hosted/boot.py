# Run by forge inside a hosted-tools sandbox (never on the host): imports the
# tools module from its read-only snapshot and defines what the host calls.
# The host formats FORGE_MODULE in; every reply is one line after a marker
# the host chose: the cell's value when small, else a line on stdout (so that
# what the tools print stays apart).
def _forge_boot(path):
    import json  # here, not at the first call: a pooled sandbox pays for it while it waits
    import sys

    sys.path.insert(0, "/run/forge/sdk")
    import forge_tools

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

    # One call of a stand-in tool while the sandbox waits in the pool: the
    # code paths of validation, conversion and results are run once, so the
    # first real call does not pay for them.
    @forge_tools.tool(name="forge_warmup")
    def warmup(a: int, b: str = "x") -> dict:
        return {"a": a, "b": b}

    forge_tools.Toolbox([forge_tools.get_tool(warmup)]).call("forge_warmup", {"a": 1}, 5.0, inline=True)
    json.dumps(json.loads('{"a": [1, 2.5, "x", null, true]}'), separators=(",", ":"))
    return table, call


_forge_table, _forge_call = _forge_boot(FORGE_MODULE)
del _forge_boot
