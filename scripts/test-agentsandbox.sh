#!/usr/bin/env bash
# The official kubernetes-sigs/agent-sandbox Python client (k8s-agent-sandbox,
# pinned, unchanged) against forge's agent-sandbox face (make test-agentsandbox;
# docs/deploy.md, agent-sandbox). Starts a real forge serve --http on a port the
# kernel picks, with two tenant tokens given by hash, and runs
# test/agentsandbox (pytest) in the client's direct mode: api_url is the
# listener's URL plus /agent-sandbox, the token goes in extra_headers.
# Nothing is skipped: a missing tool fails the run.
#
# scripts/test-agentsandbox.sh --venv prints the client's venv (made when
# missing) and exits: test/k8s runs test/agentsandbox/cluster_claim.py with it.
# --bench runs test/agentsandbox/bench.py after the tests: the client against
# forge and against agent-sandbox's reference python-runtime (from the Go
# module proxy, under uvicorn from PyPI, both installed when missing).
#
# Environment:
#   FORGE_BIN              forge binary (default bin/forge)
#   FORGE_TEST_STATE_DIR   state dir with the base images (default /var/lib/forge-test)
#   FORGE_CACHE_DIR        where the venv goes (default ~/.cache/forge)
#   PYTHON                 the Python that makes the venv (default python3)
set -euo pipefail
name=test-agentsandbox
source "$(dirname "$0")/lib-serve.sh"
suite=$root/test/agentsandbox
bench=0
if [[ ${1:-} == --bench ]]; then
	bench=1
	shift
fi

venv=$(pinned_venv agentsandbox "$suite/requirements.txt" 'import k8s_agent_sandbox, pytest')
if [[ ${1:-} == --venv ]]; then
	echo "$venv"
	exit 0
fi

need_image forge/python:3.11

key_a=$(mktoken as_a)
key_b=$(mktoken as_b)
max_file=1048576
cat >"$work/forge.yaml" <<YAML
state_dir: $state
server:
  auth:
    tokens:
      - {tenant: as-a, scopes: [execute, sessions], sha256: $(hash "$key_a")}
      - {tenant: as-b, scopes: [execute, sessions], sha256: $(hash "$key_b")}
  tenants:
    default: {executions_per_minute: 0}
sessions:
  max_concurrent: 32
volumes:
  max_file_size: $max_file
agent_sandbox:
  enabled: true
YAML
serve_forge "$work/forge.yaml" /agent-sandbox/ "$key_a"

export FORGE_AS_URL=$base/agent-sandbox FORGE_AS_TOKEN=$key_a FORGE_AS_TOKEN_B=$key_b FORGE_AS_MAX_FILE_SIZE=$max_file
export PYTHONDONTWRITEBYTECODE=1
if (cd "$suite" && "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"); then
	echo "PASS k8s-agent-sandbox client (test/agentsandbox)" >&2
	if ((bench)); then
		"$venv/bin/python" -c 'import fastapi, uvicorn, multipart' 2>/dev/null ||
			"$venv/bin/python" -m pip install --quiet --disable-pip-version-check fastapi uvicorn python-multipart >&2
		ref=$(dirname "$("$root/scripts/k8s/agent-sandbox.sh" crds)")/../examples/python-runtime-sandbox
		mkdir -p "$work/app"
		(cd "$ref" && SANDBOX_BASE_DIR=$work/app exec "$venv/bin/python" -m uvicorn main:app --host 127.0.0.1 --port 0 --log-level warning) 2>"$work/ref.log" &
		refpid=$!
		refurl=
		for _ in $(seq 100); do
			port=$(ss -ltnpH 2>/dev/null | awk -v p="pid=$refpid," 'index($0, p) {split($4, a, ":"); print a[length(a)]; exit}')
			[[ -n $port ]] && curl -fsS "http://127.0.0.1:$port/" >/dev/null 2>&1 && { refurl=http://127.0.0.1:$port; break; }
			sleep 0.1
		done
		[[ -n $refurl ]] || { kill "$refpid"; cat "$work/ref.log" >&2; die "the reference runtime did not start"; }
		(cd "$suite" && REFERENCE_URL=$refurl "$venv/bin/python" bench.py) || { kill "$refpid"; die "bench.py failed"; }
		kill "$refpid"
		wait "$refpid" 2>/dev/null || true
	fi
else
	echo "FAIL k8s-agent-sandbox client (test/agentsandbox)" >&2
	echo "test-agentsandbox: forge's log (last 60 lines):" >&2
	tail -60 "$work/serve.log" >&2
	exit 1
fi
