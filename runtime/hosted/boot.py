# Run by forge inside a hosted-tools sandbox (never on the host): imports the
# tools module from its read-only snapshot and defines what the host calls.
# The host formats FORGE_MODULE in; every reply is one line after a marker
# the host chose, on stdout, so that what the tools print stays apart.
def _forge_boot(path):
    import json  # here, not at the first call: a pooled sandbox pays for it while it waits
    import sys
    import threading

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
            result = box.call(name, json.loads(raw), timeout)
        except (forge_tools.InvalidArguments, forge_tools.UnknownTool) as e:
            result = {"invalid": str(e)}
        reply(marker, result)

    # forge_tools runs sync tools on a worker thread: start one now.
    threading.Thread(target=lambda: None).start()
    return table, call


_forge_table, _forge_call = _forge_boot(FORGE_MODULE)
del _forge_boot
