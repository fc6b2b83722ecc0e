#!/bin/sh
# Runs every fuzz target of the repo (func FuzzX in a _test.go file) for
# FUZZTIME each (make fuzz). go test -fuzz takes one target of one package
# at a time, hence the loop. A failing input is written to the package's
# testdata/fuzz/<Target> by go test itself (commit it: plain go test then
# replays it). With FUZZ_KEEP=1 the inputs the fuzzer found interesting
# (kept in the build cache) are copied there too, to grow the seed corpus.
set -eu
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-20s}
TAGS=${GOFLAGS_TAGS:-seccomp containers_image_openpgp exclude_graphdriver_btrfs}
cd "$(dirname "$0")/.."
grep -rlE --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*\(f \*testing\.F\)' . | sort |
while read -r file; do
	pkg=./$(dirname "${file#./}")
	for target in $(sed -nE 's/^func (Fuzz[A-Za-z0-9_]*)\(f \*testing\.F\).*/\1/p' "$file"); do
		echo "== $pkg $target ($FUZZTIME)"
		"$GO" test -tags "$TAGS" -run '^$' -fuzz "^$target\$" -fuzztime "$FUZZTIME" "$pkg"
		if [ "${FUZZ_KEEP:-}" = 1 ]; then
			cache="$("$GO" env GOCACHE)/fuzz/$("$GO" list "$pkg")/$target"
			if [ -d "$cache" ]; then
				mkdir -p "$pkg/testdata/fuzz/$target"
				cp -n "$cache"/* "$pkg/testdata/fuzz/$target/" 2>/dev/null || true
			fi
		fi
	done
done
