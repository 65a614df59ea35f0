#!/usr/bin/env bash
# Builds the local cloud (test/localcloud, a module of its own) into bin/:
#   bin/localcloud                     its API server
#   bin/providers/                     a provider mirror holding its provider,
#                                      laid out as `tofu providers mirror` writes
#                                      one (unpacked): captf.io/captf/localcloud/
#                                      0.1.0/linux_amd64/terraform-provider-localcloud_v0.1.0
#   bin/localcloud.lock.hcl            the .terraform.lock.hcl its modules ship
#   bin/images/captf-localcloud-providers-<version>.tar
#                                      the mirror as an image
#                                      (${IMAGE_REGISTRY}/captf-localcloud-providers:<version>),
#                                      which runner pods mount with
#                                      --provider-mirror-image
# A user's own mirror is made the same way: `tofu providers mirror DIR` in a
# module that requires the providers, then an image whose root is DIR.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${CAPTF_BIN_DIR:-${ROOT}/bin}
REGISTRY=${IMAGE_REGISTRY:-ghcr.io/captf}
VERSION=${VERSION:-$("${ROOT}/hack/version.sh")}
EPOCH=$(git -C "${ROOT}" log -1 --format=%ct)
PROVIDER_VERSION=0.1.0
ARCH=$(go env GOARCH) # the runner image's, which is built for this machine
work=$(mktemp -d)
trap 'rm -rf "${work}"' EXIT

(cd "${ROOT}/test/localcloud" && CGO_ENABLED=0 go build -trimpath -o "${BIN}/localcloud" ./cmd/localcloud &&
  CGO_ENABLED=0 GOOS=linux GOARCH=${ARCH} go build -trimpath -ldflags "-s -w -X main.version=${PROVIDER_VERSION}" -o "${work}/provider" ./cmd/terraform-provider-localcloud)

mirror=${work}/mirror
target=${mirror}/captf.io/captf/localcloud/${PROVIDER_VERSION}/linux_${ARCH}
mkdir -p "${target}"
cp "${work}/provider" "${target}/terraform-provider-localcloud_v${PROVIDER_VERSION}"
touch -d "@${EPOCH}" "${target}/terraform-provider-localcloud_v${PROVIDER_VERSION}"

# The lock file: what init records when it installs from the mirror.
mkdir -p "${work}/module"
cat > "${work}/module/main.tf" <<TF
terraform {
  required_providers {
    localcloud = { source = "captf.io/captf/localcloud", version = "${PROVIDER_VERSION}" }
  }
}
TF
cat > "${work}/cli.tfrc" <<RC
provider_installation {
  filesystem_mirror {
    path = "${mirror}"
  }
}
RC
"${ROOT}/hack/build-tofu.sh" >/dev/null
(cd "${work}/module" && TF_CLI_CONFIG_FILE="${work}/cli.tfrc" "${BIN}/tofu" init -backend=false -input=false -no-color >/dev/null)

rm -rf "${BIN}/providers"
cp -a "${mirror}" "${BIN}/providers"
cp "${work}/module/.terraform.lock.hcl" "${BIN}/localcloud.lock.hcl"

mkdir -p "${BIN}/images"
find "${BIN}/images" -name 'captf-localcloud-providers-*.tar' ! -name "*-${VERSION}.tar" -delete
(cd "${ROOT}/hack/tools/imagebuild" && go build -o "${work}/imagebuild" .)
"${work}/imagebuild" --out "${BIN}/images/captf-localcloud-providers-${VERSION}.tar" --ref "${REGISTRY}/captf-localcloud-providers:${VERSION}" \
  --epoch "${EPOCH}" --label org.opencontainers.image.version="${VERSION}" --layer "${mirror}"
echo "localcloud, its provider ${PROVIDER_VERSION} and mirror image built"
