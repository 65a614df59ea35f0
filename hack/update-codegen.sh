#!/usr/bin/env bash
# Regenerates deepcopy, register, clientset, listers, informers (pkg/generated)
# and the CRD YAML (manifests/crd) from pkg/apis.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "${ROOT}"
MODULE=github.com/captf/captf
export GOBIN=${ROOT}/bin/tools
mkdir -p "${GOBIN}"

(cd hack/tools && go mod download k8s.io/code-generator)
CODEGEN_PKG=${CODEGEN_PKG:-$(cd hack/tools && go list -m -f '{{.Dir}}' k8s.io/code-generator)}
[[ -f "${CODEGEN_PKG}/kube_codegen.sh" ]] || { echo "code-generator not found (got '${CODEGEN_PKG}')" >&2; exit 1; }
# shellcheck source=/dev/null
source "${CODEGEN_PKG}/kube_codegen.sh"

kube::codegen::gen_helpers --boilerplate hack/boilerplate.go.txt ./pkg/apis
kube::codegen::gen_register --boilerplate hack/boilerplate.go.txt ./pkg/apis
kube::codegen::gen_client --with-watch \
  --output-dir ./pkg/generated --output-pkg "${MODULE}/pkg/generated" \
  --boilerplate hack/boilerplate.go.txt ./pkg/apis

(cd hack/tools && go build -o "${GOBIN}/controller-gen" sigs.k8s.io/controller-tools/cmd/controller-gen)
rm -f manifests/crd/infrastructure.cluster.x-k8s.io_*.yaml
"${GOBIN}/controller-gen" crd:maxDescLen=400 paths=./pkg/apis/... output:crd:dir=./manifests/crd
