#!/bin/sh
# agent-sandbox.sh bin|crds: kubernetes-sigs/agent-sandbox v1.0.1 from the Go
# module proxy, for the agent-sandbox test of test/k8s (docs/deploy.md,
# agent-sandbox).
#   bin    print the path of the cached controller binary
#          (cmd/agent-sandbox-controller), building it when missing (~2 min cold)
#   crds   print the directory of its CRDs (k8s/crds in the module)
set -eu
V=v1.0.1
M=sigs.k8s.io/agent-sandbox
cache="${XDG_CACHE_HOME:-$HOME/.cache}/forge/k8s"
case ${1:-} in
bin)
	out="$cache/agent-sandbox-controller-$V"
	if [ ! -x "$out" ]; then
		mkdir -p "$cache"
		echo "agent-sandbox: building $M/cmd/agent-sandbox-controller@$V into $out" >&2
		tmp=$(mktemp -d)
		(cd "$tmp" && GOFLAGS=-mod=mod CGO_ENABLED=0 GOBIN="$tmp" nice go install -trimpath -ldflags '-s -w' "$M/cmd/agent-sandbox-controller@$V")
		mv "$tmp/agent-sandbox-controller" "$out.tmp.$$"
		mv "$out.tmp.$$" "$out"
		rm -rf "$tmp"
	fi
	echo "$out"
	;;
crds)
	dir=$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "$M@$V" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	[ -d "$dir/k8s/crds" ] || { echo "agent-sandbox: no k8s/crds in $M@$V ($dir)" >&2; exit 1; }
	echo "$dir/k8s/crds"
	;;
*)
	echo "usage: $0 bin|crds" >&2
	exit 2
	;;
esac
