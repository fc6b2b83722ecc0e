#!/usr/bin/env bash
# load-image.sh [pause | OCI_LAYOUT_DIR]: load an image into the test
# cluster's containerd (namespace k8s.io), which the kubelet then finds with
# imagePullPolicy IfNotPresent: nothing is ever pulled from a registry.
#   pause          the pod sandbox image localhost/pause:3.10 (pause.c packed
#                  by scripts/ocipack; cached under the cache dir)
#   (default)      forge's image from make oci (build/oci/forge, or
#                  $FORGE_K8S_IMAGE), imported as localhost/forge:VERSION and
#                  tagged localhost/forge:latest, the name the kustomization
#                  uses. A layout already loaded is a no-op.
# After loading a new forge image, `kubectl -n forge rollout restart
# statefulset forge` makes the pods use it.
source "$(dirname "$0")/lib.sh"
TAGS='seccomp containers_image_openpgp exclude_graphdriver_btrfs'

# manifest_digest LAYOUT: the digest of the layout's only manifest.
manifest_digest() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]+"/index.json"))["manifests"][0]["digest"])' "$1"; }
ref_name() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]+"/index.json"))["manifests"][0].get("annotations",{}).get("org.opencontainers.image.ref.name",""))' "$1"; }
# loaded REF DIGEST: containerd has REF pointing at DIGEST.
loaded() { ctr images ls | awk -v r="$1" -v d="$2" '$1 == r && $3 == d {f=1} END {exit !f}'; }

import_layout() { # LAYOUT REF
	local layout=$1 ref=$2 t0=$SECONDS
	tar -C "$layout" -cf - . | ctr images import - >/dev/null
	# The list is read whole first: with pipefail, grep -q quitting at its
	# match can leave ctr with SIGPIPE and fail the check.
	local names
	names=$(ctr images ls -q)
	if ! grep -qxF "$ref" <<<"$names"; then
		die "importing $layout: containerd did not name it $ref (it has: $(tr '\n' ' ' <<<"$names"))"
	fi
	log "loaded $ref in $((SECONDS - t0)) s"
}

if [[ ${1:-} == pause ]]; then
	h=$(sha256sum "$K8S_ROOT/scripts/k8s/pause.c" | cut -c1-12)
	layout=$K8S_CACHE/pause-$h
	if [[ ! -f $layout/index.json ]]; then
		tree=$(mktemp -d)
		trap 'rm -rf "$tree"' EXIT
		gcc -Os -static -s -o "$tree/pause" "$K8S_ROOT/scripts/k8s/pause.c"
		rm -rf "$layout.tmp"
		(cd "$K8S_ROOT" && CGO_ENABLED=1 go run -tags "$TAGS" ./scripts/ocipack -root "$tree" -out "$layout.tmp" \
			-ref "$PAUSE_REF" -entrypoint '["/pause"]')
		mv "$layout.tmp" "$layout"
	fi
	loaded "$PAUSE_REF" "$(manifest_digest "$layout")" || import_layout "$layout" "$PAUSE_REF"
	exit 0
fi

layout=${1:-${FORGE_K8S_IMAGE:-$K8S_ROOT/build/oci/forge}}
if [[ ! -f $layout/index.json ]]; then
	log "no forge image at $layout (make oci builds it): not loaded"
	exit 0
fi
ref=$(ref_name "$layout")
[[ $ref == localhost/forge:* ]] || die "$layout: ref.name is ${ref:-empty}, want localhost/forge:VERSION"
digest=$(manifest_digest "$layout")
if loaded localhost/forge:latest "$digest"; then
	log "forge image $ref ($digest) already loaded"
	exit 0
fi
import_layout "$layout" "$ref"
ctr images rm localhost/forge:latest >/dev/null 2>&1 || true
ctr images tag "$ref" localhost/forge:latest >/dev/null
log "tagged $ref as localhost/forge:latest ($digest)"
