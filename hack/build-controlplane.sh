#!/usr/bin/env bash
# Builds the test control plane (etcd, kube-apiserver, kube-controller-manager,
# and kubectl for the kustomize bases), with --with-prometheus Prometheus
# and promtool for the alert tests (over 3 minutes cold: the quickstart runs
# neither), with --with-velero Velero, its AWS plugin and an S3 stand-in for
# the disaster-recovery test, from the Go module proxy into bin/, copies the CRDs of
# projects the tests stand in for, builds tofu when no terraform is on PATH,
# and installs iproute2 when `ip` is missing.
# A binary is rebuilt only when its recorded version differs from the wanted one.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${CAPTF_BIN_DIR:-${ROOT}/bin}
TOOLS=${ROOT}/hack/tools
KUBE_VERSION=v1.37.2
mkdir -p "${BIN}"
# build's settings, never from the caller's environment.
unset MODULE TAGS BUILD_LDFLAGS
trap 'rm -rf "${BIN}"/.build.*' EXIT

tools_version() { (cd "${MODULE:-${TOOLS}}" && go list -m -f '{{.Version}}' "$1"); }

# build [NAME PACKAGE VERSION]...: those of the binaries whose recorded
# version is not the wanted one, in one go build (one binary links while
# another compiles), in module $MODULE (the tools module) with build tags
# $TAGS and linker flags $BUILD_LDFLAGS.
build() {
  local module=${MODULE:-${TOOLS}} goversion names=() pkgs=() wants=()
  goversion=$(go env GOVERSION)
  while (($#)); do
    local name=$1 pkg=$2 want="$3 ${goversion}"
    shift 3
    if [[ -x "${BIN}/${name}" && "$(cat "${BIN}/.${name//\//-}.version" 2>/dev/null)" == "${want}" ]]; then
      echo "${name} ${want% *}: up to date"
      continue
    fi
    names+=("${name}") pkgs+=("${pkg}") wants+=("${want}")
  done
  ((${#names[@]})) || return 0
  echo "building ${names[*]} ..."
  local start=${SECONDS} out
  out=$(mktemp -d "${BIN}/.build.XXXXXX")
  (cd "${module}" && CGO_ENABLED=0 go build -trimpath -tags "${TAGS:-}" -ldflags "-s -w ${BUILD_LDFLAGS:-}" -o "${out}/" "${pkgs[@]}")
  for i in "${!names[@]}"; do
    # go build names a binary after its package, a major version suffix
    # (go.etcd.io/etcd/server/v3) left out.
    local base=${pkgs[$i]##*/}
    if [[ "${base}" =~ ^v([2-9]|[1-9][0-9]+)$ ]]; then base=${pkgs[$i]%/*} base=${base##*/}; fi
    mv "${out}/${base}" "${BIN}/${names[$i]}"
    echo "${wants[$i]}" > "${BIN}/.${names[$i]//\//-}.version"
  done
  rm -rf "${out}"
  echo "built ${names[*]} in $((SECONDS - start))s"
}

kube_ldflags="-X k8s.io/component-base/version.gitVersion=${KUBE_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37 -X k8s.io/component-base/version.gitTreeState=clean"

# etcd ignores the Kubernetes version flags.
ETCD_VERSION=$(tools_version go.etcd.io/etcd/server/v3)
BUILD_LDFLAGS=${kube_ldflags} build etcd go.etcd.io/etcd/server/v3 "${ETCD_VERSION}" \
  kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "${KUBE_VERSION}" \
  kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "${KUBE_VERSION}" \
  kubectl k8s.io/kubernetes/cmd/kubectl "${KUBE_VERSION}"

# Prometheus has a module of its own (hack/tools/prometheus): its
# dependencies must not move the control plane's. Static scrape targets only.
if [[ " $* " == *" --with-prometheus "* ]]; then
  MODULE=${TOOLS}/prometheus
  PROM_VERSION=$(tools_version github.com/prometheus/prometheus)
  export MODULE TAGS=remove_all_sd
  build prometheus github.com/prometheus/prometheus/cmd/prometheus "${PROM_VERSION}" \
    promtool github.com/prometheus/prometheus/cmd/promtool "${PROM_VERSION}"
  unset MODULE TAGS
fi

# Velero, its AWS object-store plugin (in bin/velero-plugins, the server's
# --plugin-dir) and the S3 stand-in the backups go to: one module of their
# own (hack/tools/velero), Velero builds against Kubernetes v0.33.
if [[ " $* " == *" --with-velero "* ]]; then
  MODULE=${TOOLS}/velero
  export MODULE
  mkdir -p "${BIN}/velero-plugins"
  VELERO_VERSION=$(tools_version github.com/vmware-tanzu/velero)
  PLUGIN_VERSION=$(tools_version github.com/vmware-tanzu/velero-plugin-for-aws)
  S3_VERSION=$(cat "${MODULE}/go.sum" "${MODULE}/s3/main.go" | sha256sum | cut -c1-16)
  build velero github.com/vmware-tanzu/velero/cmd/velero "${VELERO_VERSION}" \
    velero-plugins/velero-plugin-for-aws github.com/vmware-tanzu/velero-plugin-for-aws/velero-plugin-for-aws "${PLUGIN_VERSION}" \
    velero-s3 ./s3 "${S3_VERSION}"
  unset MODULE
fi

# copy_crds NAME MODULE@VERSION FILE...: CRDs of a project we do not run
# (or run a stand-in of), from its module in the Go module proxy, into bin/NAME.
copy_crds() {
  local name=$1 module=$2 dest=${BIN}/$1 dir
  shift 2
  [[ "$(cat "${dest}/.version" 2>/dev/null)" == "${module}" ]] && return
  dir=$(cd "$(mktemp -d)" && go mod download -json "${module}" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
  mkdir -p "${dest}"
  for f in "$@"; do cp "${dir}/${f}" "${dest}/"; done
  chmod u+w "${dest}"/*.yaml
  echo "${module}" > "${dest}/.version"
  echo "${name}: copied from ${module}"
}
# The Prometheus Operator's, to check manifests/prometheus against the
# schemas of ServiceMonitor and PrometheusRule.
copy_crds prometheus-operator-crds github.com/prometheus-operator/prometheus-operator@v0.85.0 \
  example/prometheus-operator-crd/monitoring.coreos.com_{servicemonitors,prometheusrules}.yaml
# cert-manager's Issuer and Certificate: the install tests' stand-in for
# cert-manager (test/framework/certmanager.go) serves the real schemas.
copy_crds cert-manager-crds github.com/cert-manager/cert-manager@v1.21.2 \
  deploy/crds/cert-manager.io_{issuers,certificates}.yaml

if ! command -v terraform >/dev/null && ! command -v tofu >/dev/null; then
  "${ROOT}/hack/build-tofu.sh"
fi

# The install tests give pods network namespaces with ip (iproute2).
if ! command -v ip >/dev/null; then
  (apt-get install -y iproute2 >/dev/null 2>&1 || { apt-get update >/dev/null && apt-get install -y iproute2 >/dev/null; })
  echo "iproute2: installed"
fi
