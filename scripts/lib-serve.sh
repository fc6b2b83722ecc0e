# What the client suites (scripts/test-e2b.sh, scripts/test-agentsandbox.sh)
# share: a venv of pinned packages, tenant tokens given by hash, and a real
# forge serve --http on a port the kernel picks. Sourced after `name` (the
# script's name, for messages) is set; it makes $work, a temporary directory,
# and at exit stops the forge it started and removes $work.

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
forge=${FORGE_BIN:-$root/bin/forge}
state=${FORGE_TEST_STATE_DIR:-/var/lib/forge-test}
cache=${FORGE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/forge}
py=${PYTHON:-python3}

log() { printf '\n== %s\n' "$*" >&2; }
die() { printf '%s: %s\n' "$name" "$*" >&2; exit 1; }

command -v "$py" >/dev/null || die "$py not found"

# pinned_venv KIND REQUIREMENTS IMPORTS prints the path of a venv that holds
# REQUIREMENTS, made when the Python statement IMPORTS fails in it. Its name
# carries the Python version and the file's hash, so a bump of a pin makes a
# fresh one.
pinned_venv() {
	local venv
	venv=$cache/$1-venv-$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')-$(sha256sum "$2" | cut -c1-12)
	if ! "$venv/bin/python" -c "$3" 2>/dev/null; then
		log "installing $2 into $venv"
		rm -rf "$venv"
		"$py" -m venv "$venv"
		"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$2" >&2
	fi
	echo "$venv"
}

# mktoken NAME is a fresh random token; hash TOKEN its SHA-256, as
# server.auth.tokens takes it (so the shared state dir gets no tokens.json).
mktoken() { printf 'forge_%s_%s' "$1" "$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"; }
hash() { printf %s "$1" | sha256sum | cut -d' ' -f1; }

# need_image NAME fails unless forge is built and its test state dir holds
# the image NAME (make test-images imports them).
need_image() {
	[[ -f $forge && -x $forge ]] || die "$forge missing (make build)"
	local images
	images=$("$forge" --state-dir "$state" image list 2>&1) || die "forge image list: $images"
	grep -qF "$1" <<<"$images" || die "$1 is not in $state: run make test-images"
}

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

# serve_forge CONFIG PROBE TOKEN starts forge serve --http with CONFIG (its
# log in $work/serve.log), sets pid and base (the listener's root URL), and
# returns once a request for the path PROBE with TOKEN answers 2xx. Not
# /readyz: with tenant tokens the warm pools are per tenant and fill at a
# tenant's first use, so /readyz would wait for a pool nobody has used yet.
serve_forge() {
	[[ $(id -u) -eq 0 ]] || die "needs root (forge creates sandboxes)"
	"$forge" --log-level info serve --config "$1" --http 127.0.0.1:0 2>"$work/serve.log" &
	pid=$!
	local url= i
	for i in $(seq 300); do
		url=$(grep -o 'url=http://[^ ]*' "$work/serve.log" | head -1 | cut -d= -f2 || true)
		[[ -n $url ]] && break
		kill -0 "$pid" 2>/dev/null || { cat "$work/serve.log" >&2; die "forge serve exited"; }
		sleep 0.1
	done
	[[ -n $url ]] || { cat "$work/serve.log" >&2; die "forge serve did not report its URL"; }
	base=${url%/mcp}
	for i in $(seq 300); do
		curl -fsS -H "Authorization: Bearer $3" "$base$2" >/dev/null 2>&1 && break
		kill -0 "$pid" 2>/dev/null || { cat "$work/serve.log" >&2; die "forge serve exited"; }
		sleep 0.2
	done
	curl -fsS -H "Authorization: Bearer $3" "$base$2" >/dev/null || { cat "$work/serve.log" >&2; die "forge did not answer $2 in 60 s"; }
	log "forge serve at $base (log: $work/serve.log)"
}
