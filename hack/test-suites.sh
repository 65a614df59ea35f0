#!/usr/bin/env bash
# Runs the suites under test/ against real control planes, three at a time,
# longest first. Each package starts its own plane and mostly waits (on
# terraform, on intervals), but inside a package go test runs its tests one
# after another: the e2e package alone was the whole wait (28 of 30 min), so
# it runs as two shards, each a `go test` of its own with half its tests.
#
# Usage: hack/test-suites.sh [go test flags...]   (PARALLEL, default 3)
# A -run among the flags runs the e2e package whole.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
PARALLEL=${PARALLEL:-3}
flags=("$@")

shard() { # shard I: every other e2e test, by name
	"${GO}" test -list '^Test' ./test/e2e | grep '^Test' | sort | awk -v i="$1" 'NR % 2 == i' | paste -sd'|'
}

jobs=()
if [[ " ${flags[*]} " == *" -run "* || " ${flags[*]} " == *" -run="* ]]; then
	jobs+=("./test/e2e")
else
	for i in 0 1; do
		tests=$(shard "${i}")
		[[ -n "${tests}" ]] && jobs+=("./test/e2e -run ^(${tests})\$")
	done
fi
# The rest, longest first (2026-12-07: capi 18 min, clusterctl 8, install 5).
for pkg in capi clusterctl install images integration; do
	jobs+=("./test/${pkg}")
done
jobs+=("$(${GO} list ./test/... | grep -Ev '/test/(e2e|capi|clusterctl|install|images|integration)$' | paste -sd' ')")

set -f # a job's -run pattern is not a glob
status=0
running=0
for job in "${jobs[@]}"; do
	if ((running >= PARALLEL)); then
		wait -n || status=1
		running=$((running - 1))
	fi
	# shellcheck disable=SC2086 # a job is its packages and a -run
	"${GO}" test "${flags[@]}" ${job} &
	running=$((running + 1))
done
for ((; running > 0; running--)); do
	wait -n || status=1
done
exit "${status}"
