#!/usr/bin/env bash
# walk.sh prints how one machine's apply walks through CAPTF's files: for
# the sync that starts its Job and the sync that records its result, the
# stays (runs of steps in one file), rooms (files) and returns (stays in a
# file the walk had left before). Fewer is a core easier to follow.
#
#   hack/walk.sh [REV]    REV: a commit to measure instead of the work tree
#   WALK_PATH=1 hack/walk.sh   also prints the walk, file by file
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
if [[ $# -gt 0 ]]; then
	git -C "$root" archive "$1" pkg go.mod go.sum | tar -x -C "$scratch"
else
	tar -C "$root" -c pkg go.mod go.sum | tar -x -C "$scratch"
fi
(cd "$root/hack/tools/walk" && go run . "$scratch")
cp "$root/hack/tools/walk/testdata/walk_test.go" "$scratch/pkg/controller/workspace/"
cd "$scratch"
WALK_PATH=${WALK_PATH:-} go test -count=1 -run '^TestWalk$' -v ./pkg/controller/workspace/ | grep -E 'walk |: pkg/|FAIL|^ok' || true
