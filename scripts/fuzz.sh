#!/bin/sh
# Runs every fuzz target of the repo (func FuzzX in a _test.go file) for
# FUZZTIME each (make fuzz). go test -fuzz takes one target of one package
# at a time, hence the loop.
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
	done
done
