#!/bin/sh
# kbin.sh: print the path of the cached kbin (Kubernetes v1.34.4 + etcd + kubectl as one binary),
# building it from test/k8s/kbin first when it is missing. The cache key is a hash of the module's
# go.mod, go.sum and main.go, so an edit rebuilds and nothing else does. A cold build takes ~5 min
# of 2 cores; a warm one is a stat.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
src="$repo/test/k8s/kbin"
V=v1.34.4
cache="${XDG_CACHE_HOME:-$HOME/.cache}/forge/k8s"
hash=$(cat "$src/go.mod" "$src/go.sum" "$src/main.go" | sha256sum | cut -c1-12)
out="$cache/kbin-$V-$hash"
if [ ! -x "$out" ]; then
	mkdir -p "$cache"
	echo "kbin: building Kubernetes $V into $out (cold: ~5 min)" >&2
	start=$(date +%s)
	tmp="$out.tmp.$$"
	(cd "$src" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false nice go build -trimpath -o "$tmp" \
		-ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$V -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=34 -X k8s.io/client-go/pkg/version.gitVersion=$V" .)
	mv "$tmp" "$out"
	echo "kbin: built in $(( $(date +%s) - start )) s" >&2
fi
echo "$out"
