"""Latency of the unchanged k8s-agent-sandbox client's commands.run, direct
mode, on this host (scripts/test-agentsandbox.sh --bench): forge's
agent-sandbox face (each command in a forge sandbox) beside the reference
python-runtime (examples/python-runtime-sandbox/main.py of agent-sandbox
v1.0.1 under uvicorn: the command runs as a plain child of the API server,
no isolation) and a bare subprocess on the host. Prints medians and ratios.

Environment: FORGE_AS_URL, FORGE_AS_TOKEN, REFERENCE_URL, BENCH_RUNS (200).
"""
import os
import statistics
import subprocess
import time

from conftest import open_sandbox
from k8s_agent_sandbox.models import SandboxDirectConnectionConfig
from k8s_agent_sandbox.sandbox import Sandbox
from conftest import helper

N = int(os.environ.get("BENCH_RUNS", "200"))
# echo measures the path (client, API, process start); python3 the same with
# an interpreter start, which depends on what each side's python3 loads.
CMDS = [("echo 1", ["echo", "1"]), ("python3 -c 'print(1)'", ["python3", "-c", "print(1)"])]


def timed(fs):
    """Medians and p95s of each f, the runs interleaved so that the load of
    this shared machine hits them alike."""
    for f in fs:
        for _ in range(5):
            f()
    out = [[] for _ in fs]
    for _ in range(N):
        for k, f in enumerate(fs):
            t0 = time.perf_counter()
            f()
            out[k].append((time.perf_counter() - t0) * 1000)
    res = []
    for o in out:
        o.sort()
        res.append((statistics.median(o), o[int(len(o) * 0.95)]))
    return res


def main():
    forge = open_sandbox()
    ref = Sandbox(claim_name="ref", sandbox_id="ref", namespace="default",
                  connection_config=SandboxDirectConnectionConfig(api_url=os.environ["REFERENCE_URL"]), k8s_helper=helper())

    for cmd, argv in CMDS:
        def check(sb):
            r = sb.commands.run(cmd)
            assert r.stdout == "1\n", r

        names = ["forge agent-sandbox face (a forge sandbox per session)", "reference python-runtime (no isolation)",
                 "bare subprocess on the host"]
        rows = list(zip(names, timed([lambda: check(forge), lambda: check(ref),
                                      lambda: subprocess.run(argv, check=True, capture_output=True)])))
        base = rows[1][1][0]
        print("commands.run(%r), %d runs each, interleaved, ms:" % (cmd, N))
        for name, (p50, p95) in rows:
            print("  %-58s p50 %7.2f  p95 %7.2f  (%.2f x reference)" % (name, p50, p95, p50 / base))


if __name__ == "__main__":
    main()
