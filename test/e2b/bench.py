"""forge's E2B face, timed (issue 30 item 5): in one run, against one forge serve,

  sdk   create+first   Sandbox.create() + the first run_code('print(1)')   (e2b-code-interpreter)
  sdk   warm           run_code('print(1)') on a sandbox that has run before
  rest  create+first   POST /api/v1/execute {code, session_id: new, custom_image} (a new session)
  rest  warm           POST /api/v1/execute with that session_id again
  bare  python3 -c     python3 -c 'print(1)' as a host process: the floor of any Python

each measured interleaved (one of each per round, so a busy moment of the machine hits all
alike), then p50, p90 and the ratios printed. The REST sessions use the image the SDK's default
template maps to, so both sides run the same Python.

Run through scripts/test-e2b.sh --bench (make bench-e2b), which starts forge and sets
E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY (a forge token, also the REST bearer) and FORGE_URL.
Options: --cold N (rounds of create+first, default 20), --warm N (warm rounds, default 200),
--json FILE (the figures as JSON too).
"""

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.parse
import uuid

from e2b_code_interpreter import Sandbox

CODE = "print(1)"


class Rest:
    """forge's own REST API over one kept-alive connection (as the SDK keeps its own)."""

    def __init__(self, base, token):
        u = urllib.parse.urlsplit(base)
        self.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
        self.headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}

    def call(self, method, path, body=None):
        self.conn.request(method, path, body=None if body is None else json.dumps(body), headers=self.headers)
        resp = self.conn.getresponse()
        data = resp.read()
        if resp.status >= 300:
            raise RuntimeError(f"{method} {path}: {resp.status} {data[:300]!r}")
        return json.loads(data) if data else None

    def execute(self, session_id, image):
        out = self.call("POST", "/api/v1/execute", {"code": CODE, "session_id": session_id, "custom_image": image})
        if not out.get("success") or out.get("stdout") != "1\n":
            raise RuntimeError(f"execute: {out}")

    def destroy(self, session_id):
        self.call("DELETE", "/api/v1/sandboxes/" + session_id)


def timed(f):
    start = time.perf_counter()
    f()
    return (time.perf_counter() - start) * 1000


def sdk_run(sbx):
    execution = sbx.run_code(CODE)
    if execution.error is not None or execution.logs.stdout != ["1\n"]:
        raise RuntimeError(f"run_code: {execution}")


# The system's python3 (not a version manager's shim, which is a shell script and costs more
# than the interpreter): what bare Python costs on this machine.
BARE = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else shutil.which("python3")


def bare():
    subprocess.run([BARE, "-c", CODE], check=True, stdout=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cold", type=int, default=20)
    ap.add_argument("--warm", type=int, default=200)
    ap.add_argument("--json", dest="json_out")
    args = ap.parse_args()

    base = os.environ["FORGE_URL"]
    rest = Rest(base, os.environ["E2B_API_KEY"])
    samples = {k: [] for k in ("sdk_cold", "sdk_warm", "rest_cold", "rest_warm", "bare")}

    # The image the SDK's default template runs (e2b.default_template: the data image when
    # present, which scripts/test-e2b.sh checks): the REST sessions use the same.
    image = os.environ.get("FORGE_TEST_E2B_IMAGE", "forge/python-data:3.13")

    # Warm-up (not counted): the first sandbox of a tenant fills its pools.
    for _ in range(2):
        with Sandbox.create(timeout=120) as s:
            sdk_run(s)
        sid = "bench-" + uuid.uuid4().hex[:16]
        rest.execute(sid, image)
        rest.destroy(sid)
        bare()

    for _ in range(args.cold):
        holder = {}

        def sdk_cold():
            holder["s"] = Sandbox.create(timeout=120)
            sdk_run(holder["s"])

        samples["sdk_cold"].append(timed(sdk_cold))
        holder["s"].kill()
        sid = "bench-" + uuid.uuid4().hex[:16]
        samples["rest_cold"].append(timed(lambda: rest.execute(sid, image)))
        rest.destroy(sid)
        samples["bare"].append(timed(bare))

    sbx = Sandbox.create(timeout=600)
    sid = "bench-" + uuid.uuid4().hex[:16]
    try:
        sdk_run(sbx)
        rest.execute(sid, image)
        for _ in range(args.warm):
            samples["sdk_warm"].append(timed(lambda: sdk_run(sbx)))
            samples["rest_warm"].append(timed(lambda: rest.execute(sid, image)))
    finally:
        sbx.kill()
        rest.destroy(sid)
    for _ in range(max(0, args.warm - len(samples["bare"]))):
        samples["bare"].append(timed(bare))

    def pct(xs, q):
        xs = sorted(xs)
        return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]

    rows = [
        ("sdk_cold", "E2B SDK   Sandbox.create() + first run_code"),
        ("rest_cold", "REST      POST /api/v1/execute, new session_id"),
        ("sdk_warm", "E2B SDK   warm run_code"),
        ("rest_warm", "REST      warm execute, same session_id"),
        ("bare", f"bare      {BARE} -c 'print(1)'"),
    ]
    p50 = {k: statistics.median(v) for k, v in samples.items()}
    print(f"\nforge E2B face, {CODE!r}, image {image} ({base})")
    print(f"{'':55} {'n':>5} {'p50 ms':>9} {'p90 ms':>9}")
    for k, label in rows:
        print(f"{label:55} {len(samples[k]):5d} {p50[k]:9.1f} {pct(samples[k], 0.9):9.1f}")
    ratios = {
        "sdk_cold/rest_cold": p50["sdk_cold"] / p50["rest_cold"],
        "sdk_warm/rest_warm": p50["sdk_warm"] / p50["rest_warm"],
        "sdk_warm/bare": p50["sdk_warm"] / p50["bare"],
        "sdk_cold/bare": p50["sdk_cold"] / p50["bare"],
    }
    print("ratios of p50: " + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"image": image, "code": CODE, "samples": {k: len(v) for k, v in samples.items()},
                       "p50_ms": p50, "p90_ms": {k: pct(v, 0.9) for k, v in samples.items()}, "ratios": ratios}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
