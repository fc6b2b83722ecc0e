"""One claim through the unchanged k8s-agent-sandbox client on a real cluster
(test/k8s TestAgentSandbox runs it): SandboxClient.create_sandbox claims a
forge pod from a SandboxWarmPool; a second SandboxClient in direct mode
(api_url = the pod's IP from the Sandbox's status, the forge token in
extra_headers) attaches to the claim with get_sandbox, runs commands and
moves files. Prints one JSON object: what it saw and the timings (ms).

Usage: KUBECONFIG=... python cluster_claim.py NAMESPACE WARMPOOL TOKEN
       KUBECONFIG=... python cluster_claim.py NAMESPACE WARMPOOL --expect-failure
(the second: a pool whose pods never become Ready; prints the error the
client raised and when)
"""
import json
import sys
import time

from k8s_agent_sandbox import SandboxClient
from k8s_agent_sandbox.models import SandboxDirectConnectionConfig


def ms(t0):
    return round((time.monotonic() - t0) * 1000, 1)


def main(ns, pool, token):
    out = {}
    claimer = SandboxClient()
    t0 = time.monotonic()
    sb = claimer.create_sandbox(warmpool=pool, namespace=ns, sandbox_ready_timeout=120)
    out["claim_ready_ms"] = ms(t0)
    ip = sb.get_pod_ip()
    out["pod_ip"], out["sandbox"], out["claim"] = ip, sb.sandbox_id, sb.claim_name
    direct = SandboxClient(connection_config=SandboxDirectConnectionConfig(
        api_url="http://%s:8080/agent-sandbox" % ip, extra_headers={"Authorization": "Bearer " + token}))
    h = direct.get_sandbox(sb.claim_name, namespace=ns)
    r = h.commands.run("python3 -c 'print(6 * 7)'")
    out["first_result_ms"] = ms(t0)
    out["first"] = r.model_dump()
    t1 = time.monotonic()
    r = h.commands.run("python3 -c 'print(1)'")
    out["next_run_ms"] = ms(t1)
    h.files.write("data/in.csv", "a,b\n1,2\n3,4\n")
    r = h.commands.run("python3 -c \"import csv; print(sum(int(r['b']) for r in csv.DictReader(open('data/in.csv'))))\"")
    out["csv"] = r.model_dump()
    h.commands.run("python3 -c \"open('data/out.txt', 'w').write('from the sandbox')\"")
    out["read_back"] = h.files.read("data/out.txt").decode()
    out["listing"] = sorted(e.name for e in h.files.list("data"))
    out["exists"] = h.files.exists("data/in.csv")
    r = h.commands.run("python3 -c \"import os; print(os.getuid(), sorted(os.listdir('/sys/class/net')))\"")
    out["inside"] = r.stdout.strip()
    sb.terminate()
    print(json.dumps(out))


def expect_failure(ns, pool):
    t0 = time.monotonic()
    try:
        SandboxClient().create_sandbox(warmpool=pool, namespace=ns, sandbox_ready_timeout=20)
    except Exception as e:  # what the client raises is what a user sees
        print(json.dumps({"error": "%s: %s" % (type(e).__name__, e), "elapsed_ms": ms(t0)}))
        return
    print(json.dumps({"error": None, "elapsed_ms": ms(t0)}))


if __name__ == "__main__":
    if sys.argv[3] == "--expect-failure":
        expect_failure(*sys.argv[1:3])
    else:
        main(*sys.argv[1:4])
