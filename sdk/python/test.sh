#!/usr/bin/env bash
# pytest for forge_tools (make test-sdk). Uses $PYTHON (default python3) when
# it already has pytest and pydantic; otherwise a venv in forge's cache dir
# (beside the system site-packages) gets them from PyPI, so the pydantic tests
# run (under CI=true a missing pydantic fails them rather than skipping).
# Arguments go to pytest.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
py=${PYTHON:-python3}
command -v "$py" >/dev/null || { echo "test-sdk: $py not found" >&2; exit 1; }
if ! "$py" -c 'import pytest, pydantic' 2>/dev/null; then
	cache=${FORGE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/forge}
	venv=$cache/sdk-venv-$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
	if ! "$venv/bin/python" -c 'import pytest, pydantic' 2>/dev/null; then
		echo "test-sdk: installing pytest and pydantic into $venv" >&2
		"$py" -m venv --system-site-packages "$venv"
		"$venv/bin/python" -m pip install --quiet --disable-pip-version-check pytest 'pydantic>=2'
	fi
	py=$venv/bin/python
fi
cd "$here"
exec "$py" -m pytest -p no:cacheprovider "$@" tests
