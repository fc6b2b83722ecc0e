#!/usr/bin/env bash
# test.sh (make test-k8s): bring the test cluster up, run test/k8s (go test
# -tags k8s) against it, and tear it down whatever happened. TEST_K8S_TAGS adds build tags; TEST_K8S_RUN=REGEX
# picks tests; FORGE_K8S_KEEP=1 leaves the cluster up afterwards.
source "$(dirname "$0")/lib.sh"
t0=$SECONDS
if [[ -z ${FORGE_K8S_KEEP:-} ]]; then
	trap '"$K8S_ROOT/scripts/k8s/down.sh"; log "test-k8s took $((SECONDS - t0)) s in all"' EXIT
fi
"$K8S_ROOT/scripts/k8s/up.sh"
cd "$K8S_ROOT"
FORGE_K8S_DIR=$D go test -tags "k8s${TEST_K8S_TAGS:+ $TEST_K8S_TAGS}" -count=1 -timeout 25m -v ${TEST_K8S_RUN:+-run "$TEST_K8S_RUN"} ./test/k8s
