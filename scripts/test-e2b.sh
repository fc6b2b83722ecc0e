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
name=test-e2b
source "$(dirname "$0")/lib-serve.sh"
suite=$root/test/e2b
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

command -v node >/dev/null && command -v npm >/dev/null || die "needs node (>= 20) and npm on PATH"
venv=$(pinned_venv e2b "$suite/requirements.txt" 'import e2b, e2b_code_interpreter, pytest, pytest_asyncio')
vpy=$venv/bin/python
log "npm ci (test/e2b)"
(cd "$suite" && npm ci --no-audit --no-fund --loglevel=error)

# The default template is the data image (matplotlib).
need_image forge/python-data

# Two tenants. Their sandboxes are theirs alone (test_tenant_isolation).
key_a=$(mktoken e2b_a)
key_b=$(mktoken e2b_b)
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
# The E2B face waits for the engine to open by itself.
serve_forge "$work/forge.yaml" /api/v1/version "$key_a"

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
