#!/usr/bin/env bash
# Makes (once) the venv with the pinned schemathesis that make test-api
# runs, in forge's cache dir, and prints the path of its st command.
set -euo pipefail
version=4.32.5
cache=${FORGE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/forge}
venv=$cache/schemathesis-$version
if ! "$venv/bin/st" --version 2>/dev/null | grep -q "$version"; then
	echo "schemathesis-venv: installing schemathesis $version into $venv" >&2
	python3 -m venv "$venv"
	"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "schemathesis==$version"
fi
echo "$venv/bin/st"
