#!/usr/bin/env bash
# The official E2B SDKs against forge's E2B face (make test-e2b; docs/e2b.md).
# Starts a real forge serve --http on a port the kernel picks, with two tenant
# tokens given by hash in a config file, and points the pinned SDKs at it with
# environment variables only (E2B_API_KEY, E2B_API_URL, E2B_SANDBOX_URL):
#   1. test/e2b/test_sdk.py: pytest, the Python SDKs sync and async
#      (e2b, e2b-code-interpreter; a venv under forge's cache dir)
#   2. test/e2b/sdk.mjs: node --test, the JavaScript SDKs (npm ci in test/e2b)
#   3. the upstream SDK test files, when FORGE_TEST_E2B_UPSTREAM names a directory
#      holding them (they are not on PyPI or npm: see docs/e2b.md)
#   4. with --bench (or FORGE_TEST_E2B_BENCH=1), test/e2b/bench.py
# Nothing is skipped: a missing tool fails the run.
#
# Usage: scripts/test-e2b.sh [--bench] [--bench-only] [pytest arguments...]
#
# Environment:
#   FORGE_BIN              forge binary (default bin/forge)
#   FORGE_TEST_STATE_DIR   state dir with the base images (default /var/lib/forge-test)
#   FORGE_CACHE_DIR        where the venv goes (default ~/.cache/forge)
#   FORGE_TEST_E2B_UPSTREAM     a directory with the upstream test trees (docs/e2b.md)
#   FORGE_TEST_E2B_BENCH=1      run the benchmark too (same as --bench)
#   FORGE_TEST_E2B_SUITES       which of py, js run (default "py js")
#   PYTHON                 the Python that makes the venv (default python3)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
suite=$root/test/e2b
forge=${FORGE_BIN:-$root/bin/forge}
state=${FORGE_TEST_STATE_DIR:-/var/lib/forge-test}
cache=${FORGE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/forge}
py=${PYTHON:-python3}
bench=${FORGE_TEST_E2B_BENCH:-0}
tests=1
args=()
for a in "$@"; do
	case $a in
	--bench) bench=1 ;;
	--bench-only) bench=1 tests=0 ;;
	*) args+=("$a") ;;
	esac
done

log() { printf '\n== %s\n' "$*" >&2; }
die() { printf 'test-e2b: %s\n' "$*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "needs root (forge creates sandboxes)"
[[ -x $forge ]] || die "$forge missing (make build)"
command -v "$py" >/dev/null || die "$py not found"
command -v node >/dev/null && command -v npm >/dev/null || die "needs node (>= 20) and npm on PATH"

# The venv: named by the Python version and the hash of requirements.txt, so a
# bump of a pinned SDK makes a fresh one.
req=$suite/requirements.txt
venv=$cache/e2b-venv-$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-$(sha256sum "$req" | cut -c1-12)
if ! "$venv/bin/python" -c 'import e2b, e2b_code_interpreter, pytest, pytest_asyncio' 2>/dev/null; then
	log "installing the pinned E2B SDKs into $venv"
	rm -rf "$venv"
	"$py" -m venv "$venv"
	"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
fi
vpy=$venv/bin/python
log "npm ci (test/e2b)"
(cd "$suite" && npm ci --no-audit --no-fund --loglevel=error)

# Images: the test state dir has them (make test-images); the default
# template is the data image (matplotlib), so check it is there.
images=$("$forge" --state-dir "$state" image list 2>&1) || die "forge image list: $images"
grep -q 'forge/python-data' <<<"$images" ||
	die "forge/python-data is not in $state: run make test-images"

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

# Two tenants, by sha256 of their tokens, so the shared state dir gets no
# tokens.json. Their sandboxes are theirs alone (test_tenant_isolation).
mktoken() { printf 'forge_e2b_%s_%s' "$1" "$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"; }
key_a=$(mktoken a)
key_b=$(mktoken b)
hash() { printf %s "$1" | sha256sum | cut -d' ' -f1; }
max_file=1048576
cat >"$work/forge.yaml" <<YAML
state_dir: $state
server:
  auth:
    tokens:
      - {tenant: e2b-a, scopes: [execute, sessions], sha256: $(hash "$key_a")}
      - {tenant: e2b-b, scopes: [execute, sessions], sha256: $(hash "$key_b")}
  tenants:
    default: {executions_per_minute: 0}
sessions:
  max_concurrent: 24
volumes:
  max_file_size: $max_file
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
# Serving once an authenticated request answers. Not /readyz: with tenant
# tokens the warm pools are per tenant (sandbox.zygote_per_tenant) and fill on
# a tenant's first use, so /readyz waits for a pool nobody has used yet; the
# E2B face waits for the engine to open by itself.
for _ in $(seq 300); do
	curl -fsS -H "Authorization: Bearer $key_a" "$base/api/v1/version" >/dev/null 2>&1 && break
	kill -0 "$pid" 2>/dev/null || { cat "$work/serve.log" >&2; die "forge serve exited"; }
	sleep 0.2
done
curl -fsS -H "Authorization: Bearer $key_a" "$base/api/v1/version" >/dev/null || { cat "$work/serve.log" >&2; die "forge did not answer in 60 s"; }
log "forge serve at $base (log: $work/serve.log)"

# What the SDKs read: the two URLs and the key. The rest is the suites' own.
export E2B_API_URL=$base E2B_SANDBOX_URL=$base E2B_API_KEY=$key_a
export PYTHONDONTWRITEBYTECODE=1
export FORGE_TEST_E2B_KEY_B=$key_b FORGE_TEST_E2B_MAX_FILE_SIZE=$max_file FORGE_URL=$base
unset E2B_DEBUG E2B_DOMAIN E2B_ACCESS_TOKEN

failed=()
run() {
	local name=$1
	shift
	log "$name"
	if "$@"; then
		echo "PASS $name" >&2
	else
		echo "FAIL $name" >&2
		failed+=("$name")
	fi
}

if ((tests)); then
	suites=" ${FORGE_TEST_E2B_SUITES:-py js} "
	[[ $suites == *" py "* ]] && run "Python SDKs (test/e2b/test_sdk.py)" bash -c 'cd "$1" && shift && exec "$@"' _ "$suite" "$vpy" -m pytest "${args[@]}"
	[[ $suites == *" js "* ]] && run "JavaScript SDKs (test/e2b/sdk.mjs)" bash -c 'cd "$1" && exec node --test --test-reporter=spec sdk.mjs' _ "$suite"
	if [[ -n ${FORGE_TEST_E2B_UPSTREAM:-} ]]; then
		run "upstream SDK tests ($FORGE_TEST_E2B_UPSTREAM)" "$suite/upstream.sh" "$vpy" "$FORGE_TEST_E2B_UPSTREAM"
	fi
fi
if ((bench)); then
	run "benchmark (test/e2b/bench.py)" "$vpy" "$suite/bench.py"
fi

if ((${#failed[@]})); then
	echo "test-e2b: forge's log (last 60 lines):" >&2
	tail -60 "$work/serve.log" >&2
	printf '\ntest-e2b: FAILED: %s\n' "${failed[*]}" >&2
	exit 1
fi
printf '\ntest-e2b: all passed\n' >&2
