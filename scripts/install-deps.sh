#!/usr/bin/env bash
# Installs what a host needs to build, test and run forge. Idempotent and
# quiet when everything is already there.
set -euo pipefail

pkgs=(gcc libc6-dev make pkg-config libseccomp-dev debootstrap git ca-certificates iproute2 procps uidmap)
# The MCP App's browser test (test/clients/app-browser.mjs) drives Debian's
# Chromium with playwright-core.
pkgs+=(chromium)
# forge_tools' tests (make test-sdk) make a venv when pytest or pydantic is missing.
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
	pkgs+=(python3-venv python3-pip)
fi
# make test-v2 (scripts/v2-guest.sh): qemu and what builds the guest.
if [[ ${1:-} == v2 ]]; then
	pkgs+=(qemu-system-x86 busybox-static cpio e2fsprogs kmod)
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

# pip-audit, the vulnerability scanner of custom-environment builds
# (runtime/build/scan), in a venv of forge's cache dir; its tests use it
# there. forge itself finds any pip-audit on PATH.
pip_audit_version=2.10.1
cache=${FORGE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/forge}
pa=$cache/tools/pip-audit
if ! "$pa/bin/pip-audit" --version 2>/dev/null | grep -qx "pip-audit $pip_audit_version"; then
	echo "install-deps: installing pip-audit $pip_audit_version into $pa" >&2
	rm -rf "$pa"
	python3 -m venv "$pa"
	"$pa/bin/python" -m pip install --quiet --disable-pip-version-check "pip-audit==$pip_audit_version"
fi
