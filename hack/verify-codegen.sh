#!/usr/bin/env bash
# Fails when generated code or CRDs differ from what hack/update-codegen.sh makes.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "${TMP}"' EXIT

# Generate into a copy of the tree so a stale tree is reported, not changed.
mkdir -p "${TMP}/src"
(cd "${ROOT}" && tar --exclude=./bin --exclude=./.git -cf - .) | tar -C "${TMP}/src" -xf -
(cd "${TMP}/src" && ./hack/update-codegen.sh >/dev/null)
if ! diff -ruN "${ROOT}/pkg" "${TMP}/src/pkg" || ! diff -ruN "${ROOT}/manifests/crd" "${TMP}/src/manifests/crd"; then
  echo "generated files are stale: run hack/update-codegen.sh" >&2
  exit 1
fi
echo "generated files are up to date"
