#!/usr/bin/env bash
# Installs what a host needs to build, test and run forge. Idempotent and
# quiet when everything is already there.
set -euo pipefail

pkgs=(gcc libc6-dev make pkg-config libseccomp-dev debootstrap git ca-certificates iproute2 procps uidmap)
# The MCP App's browser test (test/clients/app-browser.mjs) drives Debian's
# Chromium with playwright-core.
pkgs+=(chromium)
# make k8s-up / test-k8s (scripts/k8s): the node's container runtime, CNI
# plugins and what kube-proxy drives; Kubernetes itself is built (kbin).
pkgs+=(containerd runc containernetworking-plugins iptables conntrack openssl curl)
# runtime/kernel's agent tests run the agent on the host's /usr/bin/python3;
# TestInspectNumpy needs numpy there.
pkgs+=(python3-numpy)
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

# uv builds custom environments (runtime/build): the official musllinux wheel
# on PyPI ships a static binary, which runs inside any base image. Pinned; the
# wheel's sha256 is checked against PyPI's JSON API.
UV_VERSION=0.13.9
UV_BIN=${UV_BIN:-/usr/local/bin/uv}
if ! { [[ -x $UV_BIN ]] && "$UV_BIN" --version 2>/dev/null | grep -q "^uv $UV_VERSION\b"; }; then
	if [[ $(id -u) -ne 0 && ! -w $(dirname "$UV_BIN") ]]; then
		echo "install-deps: need root to install uv into $UV_BIN (or set UV_BIN)" >&2
		exit 1
	fi
	echo "install-deps: installing uv $UV_VERSION into $UV_BIN" >&2
	python3 - "$UV_VERSION" "$UV_BIN" <<'PY'
import hashlib, io, json, os, platform, sys, urllib.parse, urllib.request, zipfile
version, dest = sys.argv[1], sys.argv[2]
arch = {"x86_64": "x86_64", "aarch64": "aarch64"}[platform.machine()]
api = "https://pypi.org/pypi/uv/json"
meta = json.load(urllib.request.urlopen(api, timeout=60))
wheel = next(u for u in meta["releases"][version] if u["filename"].endswith(".whl") and "musllinux" in u["filename"] and arch in u["filename"])
data = urllib.request.urlopen(urllib.parse.urljoin(api, wheel["url"]), timeout=300).read()
if hashlib.sha256(data).hexdigest() != wheel["digests"]["sha256"]:
    sys.exit(f"install-deps: {wheel['filename']}: sha256 mismatch")
with zipfile.ZipFile(io.BytesIO(data)) as z:
    name = next(n for n in z.namelist() if n.endswith(".data/scripts/uv"))
    tmp = dest + ".tmp"
    with open(tmp, "wb") as f:
        f.write(z.read(name))
os.chmod(tmp, 0o755)
os.replace(tmp, dest)
PY
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

# schemathesis (make test-api) lives in a venv of its own in forge's cache dir.
scripts/schemathesis-venv.sh >/dev/null
