#!/usr/bin/env bash
# The REST API against its own OpenAPI document (make test-api): a real
# forge serve --http with a bearer token (given by hash in a config file, so
# the shared state dir gets no tokens.json), and schemathesis (pinned, in a
# venv: scripts/schemathesis-venv.sh) generating a bounded number of
# requests per operation. Fails on any 5xx and on any response that does
# not match the document (status, content type, headers, schema).
#
# Environment:
#   FORGE_BIN                 forge binary (default bin/forge)
#   FORGE_TEST_STATE_DIR      state dir with the base images (default /var/lib/forge-test)
#   FORGE_API_MAX_EXAMPLES    requests per operation (default 15)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
forge=${FORGE_BIN:-$root/bin/forge}
state=${FORGE_TEST_STATE_DIR:-/var/lib/forge-test}
examples=${FORGE_API_MAX_EXAMPLES:-15}
st=$("$root/scripts/schemathesis-venv.sh")
[[ -x $forge ]] || { echo "test-api: $forge missing (make build)" >&2; exit 1; }

work=$(mktemp -d)
pid=
cleanup() {
	if [[ -n $pid ]]; then
		# The sessions schemathesis made, then the server.
		for id in $(curl -fsS -H "Authorization: Bearer $token" "$base/api/v1/sandboxes" 2>/dev/null | python3 -c 'import json,sys; [print(s["id"]) for s in json.load(sys.stdin)]' 2>/dev/null); do
			curl -fsS -X DELETE -H "Authorization: Bearer $token" "$base/api/v1/sandboxes/$id" >/dev/null || true
		done
		kill -TERM "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

token=forge_schemathesis_$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')
hash=$(printf %s "$token" | sha256sum | cut -d' ' -f1)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
base=http://127.0.0.1:$port
cat >"$work/forge.yaml" <<YAML
state_dir: $state
server:
  auth:
    tokens:
      - {tenant: schemathesis, scopes: [admin], sha256: $hash}
  tenants:
    default: {executions_per_minute: 0, builds_per_hour: 0}
execution:
  default_timeout: 10s
  max_timeout: 20s
sessions:
  max_concurrent: 4
pool:
  size: 1
environment_builder:
  enabled: false   # a build per generated example would take minutes: decoding and refusals only
YAML
"$forge" serve --config "$work/forge.yaml" --http "127.0.0.1:$port" 2>"$work/serve.log" &
pid=$!
for _ in $(seq 300); do
	curl -fsS "$base/readyz" >/dev/null 2>&1 && break
	kill -0 "$pid" 2>/dev/null || { cat "$work/serve.log" >&2; exit 1; }
	sleep 0.2
done
curl -fsS "$base/readyz" >/dev/null || { echo "test-api: forge did not become ready" >&2; cat "$work/serve.log" >&2; exit 1; }

status=0
cd "$work" # schemathesis keeps a cache in the working directory
"$st" run "$base/api/v1/openapi.json" \
	--header "Authorization: Bearer $token" \
	--checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance \
	--max-examples "$examples" --workers 1 --seed 1 --phases examples,coverage,fuzzing \
	--request-timeout 60 --generation-database none --no-color \
	--suppress-health-check all || status=$?
if ((status)); then
	echo "test-api: schemathesis failed; forge's log:" >&2
	tail -50 "$work/serve.log" >&2
fi
exit "$status"
