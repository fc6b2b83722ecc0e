#!/usr/bin/env bash
# The upstream SDK test files that apply to forge (docs/e2b.md lists them), run
# unmodified against the forge scripts/test-e2b.sh started: the SDKs find it
# through E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY alone.
#
# Usage: upstream.sh PYTHON DIR
#   PYTHON  the venv's python (the pinned SDKs, pytest, pytest-asyncio)
#   DIR     holds code-interpreter/python/tests and E2B/packages/python-sdk/tests,
#           fetched by hand: they are in neither the PyPI sdists nor npm, so CI
#           (which reaches only the package registries) cannot fetch them
#
# Tests that cannot pass on forge by design are deselected here, each with why;
# every other collected test must pass.
set -euo pipefail
py=$1
dir=$2
[[ -d $dir/code-interpreter/python/tests && -d $dir/E2B/packages/python-sdk/tests ]] ||
	{ echo "upstream: $dir lacks code-interpreter/python/tests or E2B/packages/python-sdk/tests" >&2; exit 1; }

# Deselected: "nodeid|why". Node ids are relative to the tree's tests dir.
refused=(
	# Sandbox.create(network={...}) is refused: forge has egress rules, not per-sandbox networks.
	"sync/test_basic.py::test_secure_access|network= is refused (forge egress rules)"
	"sync/test_contexts.py::test_create_context_secure_traffic|network= is refused (forge egress rules)"
	"sync/test_contexts.py::test_remove_context_secure_traffic|network= is refused (forge egress rules)"
	"sync/test_contexts.py::test_list_contexts_secure_traffic|network= is refused (forge egress rules)"
	"sync/test_contexts.py::test_restart_context_secure_traffic|network= is refused (forge egress rules)"
	# Only Python kernels: E2B's template also starts a javascript context.
	"sync/test_contexts.py::test_list_contexts|expects a javascript context; forge runs Python only"
	# /root is outside the session's workspace; forge has no root.
	"sync/test_contexts.py::test_create_context_with_options|cwd=/root: outside /home/user, no root in forge"
)

run_tree() { # run_tree NAME TESTS_DIR
	local name=$1 tests=$2 args=() entry
	for entry in "${refused[@]}"; do
		local id=${entry%%|*}
		[[ -e $tests/${id%%::*} ]] && args+=(--deselect "$id")
	done
	echo "== upstream $name ($tests)" >&2
	"$py" -m pytest -c /dev/null -W ignore::pytest.PytestUnknownMarkWarning --rootdir "$tests" -p no:cacheprovider \
		-o asyncio_mode=auto -o asyncio_default_fixture_loop_scope=function \
		-rfEs -q "${args[@]}" "$tests"
}

for entry in "${refused[@]}"; do echo "deselected: ${entry%%|*}: ${entry#*|}" >&2; done
status=0
run_tree code-interpreter "$dir/code-interpreter/python/tests" || status=1
run_tree python-sdk "$dir/E2B/packages/python-sdk/tests" || status=1
exit $status
