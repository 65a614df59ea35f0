#!/usr/bin/env bash
# Builds Cluster API's core manager (v1.14.2) from the Go module proxy into
# bin/, for the tests that run the real CAPI controllers. It gets a scratch
# module of its own: CAPI pins client-go v0.36 and controller-runtime, which
# must not move the tools module's Kubernetes v1.37 build.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${CAPTF_BIN_DIR:-${ROOT}/bin}
CAPI_VERSION=${CAPI_VERSION:-v1.14.2}
stamp="${BIN}/.capi-manager.version"
want="${CAPI_VERSION} $(go env GOVERSION)"
if [[ -x "${BIN}/capi-manager" && -f "${stamp}" && "$(cat "${stamp}")" == "${want}" ]]; then
  echo "capi-manager ${CAPI_VERSION}: up to date"
  exit 0
fi
echo "building capi-manager ${CAPI_VERSION} ..."
start=${SECONDS}
work="${BIN}/.capi-build"
rm -rf "${work}" && mkdir -p "${work}"
cd "${work}"
cat > go.mod <<MOD
module captf.local/capi-build

go 1.26.0

require (
	sigs.k8s.io/cluster-api ${CAPI_VERSION}
	sigs.k8s.io/cluster-api/api ${CAPI_VERSION}
)

// CAPI's own go.mod replaces its api module with ./api; the published one
// of the same version is what that directory holds.
replace sigs.k8s.io/cluster-api/api => sigs.k8s.io/cluster-api/api ${CAPI_VERSION}
MOD
GOFLAGS=-mod=mod go get "sigs.k8s.io/cluster-api/core@${CAPI_VERSION}"
CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "${BIN}/capi-manager" sigs.k8s.io/cluster-api/core
cd "${ROOT}" && rm -rf "${work}"
echo "${want}" > "${stamp}"
echo "built capi-manager in $((SECONDS - start))s"
