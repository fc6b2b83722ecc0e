# Run by forge inside a hosted-tools sandbox (never on the host): imports the
# tools module from its read-only snapshot (forge_tools._hosted.boot) and
# defines what the host calls. The host formats FORGE_MODULE in. A zygote
# template of hosted calls imported forge_tools._hosted already.
def _forge_boot(path):
    import sys

    if "/run/forge/sdk" not in sys.path:
        sys.path.insert(0, "/run/forge/sdk")
    from forge_tools._hosted import boot

    return boot(path)


_forge_table, _forge_call = _forge_boot(FORGE_MODULE)
del _forge_boot
