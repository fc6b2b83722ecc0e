#!/usr/bin/env bash
# Installs what a host needs to build, test and run forge. Idempotent and
# quiet when everything is already there.
set -euo pipefail

pkgs=(gcc libc6-dev make pkg-config libseccomp-dev debootstrap git ca-certificates iproute2 procps uidmap)
# forge_tools' tests (make test-sdk) make a venv when pytest or pydantic is missing.
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
	pkgs+=(python3-venv python3-pip)
fi
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	if [[ $(id -u) -ne 0 ]]; then
		echo "install-deps: need root to install: ${missing[*]}" >&2
		exit 1
	fi
	echo "install-deps: installing ${missing[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v go >/dev/null 2>&1 && [[ -x /usr/local/go/bin/go ]]; then
	export PATH=/usr/local/go/bin:$PATH
fi
if ! command -v go >/dev/null 2>&1; then
	echo "install-deps: Go 1.26 or newer is required (https://go.dev/dl); put it on PATH" >&2
	exit 1
fi

# schemathesis (make test-api) lives in a venv of its own in forge's cache dir.
scripts/schemathesis-venv.sh >/dev/null
