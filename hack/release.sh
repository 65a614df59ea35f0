#!/usr/bin/env bash
# make release: CAPTF's clusterctl provider files for this checkout's
# version (hack/version.sh), as a clusterctl local repository:
#   ${RELEASE_DIR:-out}/infrastructure-terraform/<version>/
#     metadata.yaml                    release series -> contract
#     infrastructure-components.yaml   manifests/clusterctl, clusterctl variables and defaults
#     cluster-template*.yaml           the flavors in templates/
#     clusterclass-*.yaml              the ClusterClasses they use
#     release-notes.md                 the commits since the previous v* tag
#     kubectl-captf_<version>_<os>_<arch>.tar.gz, captf.yaml
#                                      the kubectl plugin for each of
#                                      $PLUGIN_PLATFORMS (default: this
#                                      machine's), and its krew manifest
# Needs kubectl in bin/ (make controlplane builds it) for kustomize.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${CAPTF_BIN_DIR:-${ROOT}/bin}
VERSION=${VERSION:-$("${ROOT}/hack/version.sh")}
OUT=${RELEASE_DIR:-${ROOT}/out}/infrastructure-terraform/${VERSION}
if [[ ! -x "${BIN}/kubectl" ]]; then
  echo "${BIN}/kubectl is missing: run make controlplane" >&2
  exit 1
fi

# The version's release series must be in metadata.yaml.
series=${VERSION#v}
major=${series%%.*}
minor=${series#*.}
minor=${minor%%.*}
if ! awk -v ma="${major}" -v mi="${minor}" '
  /- major:/ {m = $3} /minor:/ {if (m == ma && $2 == mi) found = 1} END {exit !found}' "${ROOT}/metadata.yaml"; then
  echo "metadata.yaml has no release series ${major}.${minor} for ${VERSION}" >&2
  exit 1
fi

rm -rf "${OUT}"
mkdir -p "${OUT}"
cp "${ROOT}/metadata.yaml" "${OUT}/metadata.yaml"
"${BIN}/kubectl" kustomize "${ROOT}/manifests/clusterctl" 2>/dev/null | sed "s/@VERSION@/${VERSION}/g" > "${OUT}/infrastructure-components.yaml"
cp "${ROOT}"/templates/cluster-template*.yaml "${ROOT}"/templates/clusterclass-*.yaml "${OUT}/"

# The kubectl plugin, one archive per platform, and the krew manifest that
# installs it (kubectl krew install --manifest=captf.yaml).
PLUGIN_PLATFORMS=${PLUGIN_PLATFORMS:-$(go env GOOS)/$(go env GOARCH)}
URL=${RELEASE_URL:-https://github.com/captf/captf/releases/download/${VERSION}}
platforms=""
for p in ${PLUGIN_PLATFORMS}; do
  os=${p%/*} arch=${p#*/}
  work=$(mktemp -d)
  # The flags of the images' captf build (hack/build-images.sh): on this
  # machine's platform the plugin reuses what that build compiled.
  (cd "${ROOT}" && CGO_ENABLED=0 GOOS=${os} GOARCH=${arch} go build -trimpath -ldflags "-s -w -X github.com/captf/captf/pkg/version.Version=${VERSION}" -o "${work}/kubectl-captf" ./cmd/kubectl-captf)
  cp "${ROOT}/LICENSE" "${work}/"
  archive=kubectl-captf_${VERSION}_${os}_${arch}.tar.gz
  tar -C "${work}" -czf "${OUT}/${archive}" .
  rm -rf "${work}"
  sum=$(sha256sum "${OUT}/${archive}" | cut -d' ' -f1)
  platforms+="  - selector:
      matchLabels: {os: ${os}, arch: ${arch}}
    uri: ${URL}/${archive}
    sha256: ${sum}
    bin: kubectl-captf
"
done
cat > "${OUT}/captf.yaml" <<EOF
apiVersion: krew.googlecontainertools.github.com/v1alpha2
kind: Plugin
metadata:
  name: captf
spec:
  version: ${VERSION}
  homepage: https://github.com/captf/captf
  shortDescription: See and approve the Terraform plans and runs of CAPTF
  description: |
    kubectl captf shows the plans, runs, logs and state backups of CAPTF's
    TerraformClusters, TerraformMachines and TerraformMachinePools (a Cluster
    API infrastructure provider whose infrastructure is Terraform modules),
    approves exactly the plan shown, restores backups, abandons
    infrastructure, and describes a Cluster as a tree, with your kubeconfig
    and your rights.
  platforms:
EOF
printf '%s' "${platforms}" >> "${OUT}/captf.yaml"

previous=$(git -C "${ROOT}" describe --tags --abbrev=0 --match 'v*' HEAD^ 2>/dev/null || true)
{
  echo "# CAPTF ${VERSION}"
  echo
  echo "Cluster API contract v1beta2 (Cluster API v1.14). Images:"
  echo "ghcr.io/captf/captf:${VERSION}, ghcr.io/captf/captf-runner:${VERSION}."
  echo
  echo "## Changes since ${previous:-the first commit}"
  echo
  git -C "${ROOT}" log --no-merges --format='- %s (%h)' ${previous:+"${previous}..HEAD"}
} > "${OUT}/release-notes.md"
echo "${OUT}"
