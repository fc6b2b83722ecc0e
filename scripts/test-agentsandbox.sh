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
root=$(cd "$(dirname "$0")/.." && pwd)
suite=$root/test/agentsandbox
forge=${FORGE_BIN:-$root/bin/forge}
state=${FORGE_TEST_STATE_DIR:-/var/lib/forge-test}
cache=${FORGE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/forge}
py=${PYTHON:-python3}
bench=0
if [[ ${1:-} == --bench ]]; then
	bench=1
	shift
fi

log() { printf '\n== %s\n' "$*" >&2; }
die() { printf 'test-agentsandbox: %s\n' "$*" >&2; exit 1; }

command -v "$py" >/dev/null || die "$py not found"

req=$suite/requirements.txt
venv=$cache/agentsandbox-venv-$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-$(sha256sum "$req" | cut -c1-12)
if ! "$venv/bin/python" -c 'import k8s_agent_sandbox, pytest' 2>/dev/null; then
	log "installing the pinned client into $venv"
	rm -rf "$venv"
	"$py" -m venv "$venv"
	"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req" >&2
fi
if [[ ${1:-} == --venv ]]; then
	echo "$venv"
	exit 0
fi
[[ $(id -u) -eq 0 ]] || die "needs root (forge creates sandboxes)"
[[ -x $forge ]] || die "$forge missing (make build)"

images=$("$forge" --state-dir "$state" image list 2>&1) || die "forge image list: $images"
grep -q 'forge/python:3.11' <<<"$images" || die "forge/python:3.11 is not in $state: run make test-images"

work=$(mktemp -d)
pid=
cleanup() {
	if [[ -n $pid ]]; then
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

mktoken() { printf 'forge_as_%s_%s' "$1" "$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"; }
key_a=$(mktoken a)
key_b=$(mktoken b)
hash() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
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
"$forge" --log-level info serve --config "$work/forge.yaml" --http 127.0.0.1:0 2>"$work/serve.log" &
pid=$!
url=
for _ in $(seq 300); do
	url=$(grep -o 'url=http://[^ ]*' "$work/serve.log" | head -1 | cut -d= -f2 || true)
	[[ -n $url ]] && break
	kill -0 "$pid" 2>/dev/null || { cat "$work/serve.log" >&2; die "forge serve exited"; }
	sleep 0.1
done
[[ -n $url ]] || { cat "$work/serve.log" >&2; die "forge serve did not report its URL"; }
base=${url%/mcp}
for _ in $(seq 300); do
	curl -fsS -H "Authorization: Bearer $key_a" "$base/agent-sandbox/" >/dev/null 2>&1 && break
	kill -0 "$pid" 2>/dev/null || { cat "$work/serve.log" >&2; die "forge serve exited"; }
	sleep 0.2
done
curl -fsS -H "Authorization: Bearer $key_a" "$base/agent-sandbox/" >/dev/null || { cat "$work/serve.log" >&2; die "the agent-sandbox face did not answer in 60 s"; }
log "forge serve at $base (log: $work/serve.log)"

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
