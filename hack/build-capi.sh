#!/usr/bin/env bash
# Builds Cluster API's core manager and clusterctl (v1.14.2) from the Go
# module proxy into bin/, for the tests that run the real CAPI controllers
# and CAPTF's clusterctl provider files, and an image archive of the
# manager (bin/capi-images) for the tests that install it with clusterctl. It gets a scratch
# module of its own: CAPI pins client-go v0.36 and controller-runtime, which
# must not move the tools module's Kubernetes v1.37 build.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${CAPTF_BIN_DIR:-${ROOT}/bin}
CAPI_VERSION=${CAPI_VERSION:-v1.14.2}
stamp="${BIN}/.capi-manager.version"
want="${CAPI_VERSION} clusterctl image $(go env GOVERSION)"
if [[ -x "${BIN}/capi-manager" && -x "${BIN}/clusterctl" && -f "${BIN}/capi-images/cluster-api-controller-${CAPI_VERSION}.tar" && -f "${stamp}" && "$(cat "${stamp}")" == "${want}" ]]; then
  echo "capi-manager and clusterctl ${CAPI_VERSION}: up to date"
  exit 0
fi
echo "building capi-manager and clusterctl ${CAPI_VERSION} ..."
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
# clusterctl shares the build; it reports its version from these.
minor=${CAPI_VERSION#v*.}
version_ldflags="-X sigs.k8s.io/cluster-api/version.gitVersion=${CAPI_VERSION} -X sigs.k8s.io/cluster-api/version.gitMajor=1 -X sigs.k8s.io/cluster-api/version.gitMinor=${minor%%.*} -X sigs.k8s.io/cluster-api/version.gitTreeState=clean"
CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w ${version_ldflags}" -o "${BIN}/clusterctl" sigs.k8s.io/cluster-api/cmd/clusterctl
cd "${ROOT}" && rm -rf "${work}"
# The core manager as the image clusterctl's core components name, for the
# tests that install Cluster API with clusterctl (the executor runs it).
image=${BIN}/capi-images
rm -rf "${image}" && mkdir -p "${image}/rootfs"
cp "${BIN}/capi-manager" "${image}/rootfs/manager"
(cd "${TOOLS:-${ROOT}/hack/tools}/imagebuild" && go build -o "${image}/imagebuild" .)
"${image}/imagebuild" --out "${image}/cluster-api-controller-${CAPI_VERSION}.tar" \
  --ref "registry.k8s.io/cluster-api/cluster-api-controller:${CAPI_VERSION}" --entrypoint /manager --user 65532:65532 \
  --layer "${image}/rootfs"
rm -rf "${image}/rootfs" "${image}/imagebuild"
echo "${want}" > "${stamp}"
echo "built capi-manager and clusterctl in $((SECONDS - start))s"
