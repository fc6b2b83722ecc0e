#!/usr/bin/env bash
# make oci: forge's own OCI image, for podman or Kubernetes nodes, built
# with forge's image code (scripts/ocipack), no container engine needed.
# It holds bin/forge and the shared libraries it links, CA certificates, and
# the base image's OCI layout, which forge imports into its state dir at
# first start (images.preload). Output: an OCI layout (OCI_OUT, default
# build/oci/forge) whose ref.name is localhost/forge:VERSION; copy it with
# `skopeo copy oci:build/oci/forge docker://REGISTRY/forge:TAG` or
# `podman load` an oci-archive of it.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${FORGE_BIN:-bin/forge}
out=${OCI_OUT:-build/oci/forge}
cache=${FORGE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/forge}
base=$cache/images/forge_python_3.11
[[ -x $bin ]] || { echo "oci: $bin missing (make build)" >&2; exit 1; }
[[ -f $base/index.json ]] || { echo "oci: base image layout $base missing (make image)" >&2; exit 1; }
version=$("$bin" version | awk '{print $NF}')
rev=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)

tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
install -D -m 0755 "$bin" "$tree/usr/bin/forge"
# The shared libraries forge links (cgo: libc, libseccomp), at their paths.
ldd "$bin" | awk '/=> \// {print $3} $1 ~ /^\// {print $1}' | while read -r lib; do
	install -D -m 0755 "$(readlink -f "$lib")" "$tree$lib"
done
install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$tree/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' >"$tree/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$tree/etc/group"
mkdir -p "$tree/var/lib/forge" "$tree/etc/forge" "$tree/run" "$tree/proc" "$tree/sys" "$tree/dev" "$tree/root"
install -d -m 1777 "$tree/tmp"
mkdir -p "$tree/usr/share/forge/images"
cp -a "$base" "$tree/usr/share/forge/images/forge_python_3.11"

tags=${TAGS:-seccomp containers_image_openpgp exclude_graphdriver_btrfs}
go run -tags "$tags" ./scripts/ocipack -root "$tree" -out "$out" -ref "localhost/forge:$version" \
	-entrypoint '["/usr/bin/forge"]' -cmd '["serve", "--http", "0.0.0.0:8080"]' \
	-env PATH=/usr/bin:/bin \
	-env FORGE_STATE_DIR=/var/lib/forge \
	-env FORGE_IMAGES_PRELOAD=oci:/usr/share/forge/images/forge_python_3.11 \
	-label io.modelcontextprotocol.server.name=io.github.mcp-forge/forge \
	-label org.opencontainers.image.title=forge \
	-label "org.opencontainers.image.version=$version" \
	-label "org.opencontainers.image.revision=$rev" \
	-label "org.opencontainers.image.description=Sandboxed Python for LLM agents over MCP" \
	-label org.opencontainers.image.source=https://github.com/mcp-forge/forge
echo "oci: wrote $out (localhost/forge:$version, $(du -sh "$out" | cut -f1))" >&2
