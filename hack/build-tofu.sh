#!/usr/bin/env bash
# Builds OpenTofu's tofu from the Go module proxy into bin/, for machines
# without terraform. It gets a scratch module of its own: its dependencies
# must not move the tools module's.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${CAPTF_BIN_DIR:-${ROOT}/bin}
TOFU_VERSION=${TOFU_VERSION:-v1.12.6}
stamp="${BIN}/.tofu.version"
want="${TOFU_VERSION} $(go env GOVERSION)"
if [[ -x "${BIN}/tofu" && -f "${stamp}" && "$(cat "${stamp}")" == "${want}" ]]; then
  echo "tofu ${TOFU_VERSION}: up to date"
  exit 0
fi
echo "building tofu ${TOFU_VERSION} ..."
start=${SECONDS}
work="${BIN}/.tofu-build"
rm -rf "${work}" && mkdir -p "${work}"
cd "${work}"
cat > go.mod <<MOD
module captf.local/tofu-build

go 1.26.6

require github.com/opentofu/opentofu ${TOFU_VERSION}
MOD
# Copy the replace directives of OpenTofu's own go.mod.
src=$(GOFLAGS=-mod=mod go mod download -json "github.com/opentofu/opentofu@${TOFU_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
grep '^replace ' "${src}" >> go.mod || true
GOFLAGS=-mod=mod go get "github.com/opentofu/opentofu/cmd/tofu@${TOFU_VERSION}"
CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "${BIN}/tofu" github.com/opentofu/opentofu/cmd/tofu
cd "${ROOT}" && rm -rf "${work}"
echo "${want}" > "${stamp}"
echo "built tofu in $((SECONDS - start))s"
