#!/usr/bin/env bash
# Builds CAPTF's two images as OCI image archives in bin/images/, without a
# container engine (hack/tools/imagebuild):
#   captf-manager-<version>.tar  ${IMAGE_REGISTRY}/captf:<version>: a static
#     captf, CA certificates, user 65532, no shell.
#   captf-runner-<version>.tar   ${IMAGE_REGISTRY}/captf-runner:<version>: the
#     same, plus tofu (built from source), git for git:: module sources (and
#     ssh for git over SSH) and busybox as /bin/sh for local-exec
#     provisioners, all from Debian's packages, the way distroless images
#     are made.
# <version> is what `captf version` prints: `git describe` of the commit.
# Every file and the image carry the commit's time: the same commit gives the
# same image digests on any machine (with the same Debian packages).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BIN=${CAPTF_BIN_DIR:-${ROOT}/bin}
OUT=${BIN}/images
REGISTRY=${IMAGE_REGISTRY:-ghcr.io/captf}
VERSION=${VERSION:-$("${ROOT}/hack/version.sh")}
EPOCH=$(git -C "${ROOT}" log -1 --format=%ct)
# Debian packages of the runner image: git, ssh and the libraries they load
# (not perl: only git's perl commands need it), CA certificates, busybox.
GIT_DEBS=(git libc6 libgcc-s1 libcurl3-gnutls libexpat1 libpcre2-8-0 zlib1g libbrotli1 libcom-err2 libgnutls30
  libgssapi-krb5-2 libidn2-0 libk5crypto3 libkeyutils1 libkrb5-3 libkrb5support0 libldap-2.5-0 libnghttp2-14 libpsl5
  librtmp1 libsasl2-2 libsasl2-modules-db libdb5.3 libssh2-1 libssl3 libzstd1 libffi8 libgmp10 libhogweed6 libnettle8
  libp11-kit0 libtasn1-6 libunistring2 openssh-client libselinux1)
OTHER_DEBS=(ca-certificates busybox-static)

mkdir -p "${OUT}"
# Only this version's archives are kept.
find "${OUT}" -name 'captf-*.tar' ! -name "*-${VERSION}.tar" -delete
start=${SECONDS}
work=$(mktemp -d)
trap 'rm -rf --one-file-system "${work}"' EXIT

(cd "${ROOT}/hack/tools/imagebuild" && go build -o "${work}/imagebuild" .)
(cd "${ROOT}" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/captf/captf/pkg/version.Version=${VERSION}" -o "${work}/captf" ./cmd/captf)
"${ROOT}/hack/build-tofu.sh" >/dev/null
echo "captf ${VERSION}, tofu: built ($((SECONDS - start))s)"

# Debian packages, unpacked into one tree.
debs=${BIN}/.debs
mkdir -p "${debs}"
if ! (cd "${debs}" && apt-get download "${GIT_DEBS[@]}" "${OTHER_DEBS[@]}" >/dev/null 2>&1); then
  apt-get update >/dev/null
  (cd "${debs}" && apt-get download "${GIT_DEBS[@]}" "${OTHER_DEBS[@]}" >/dev/null)
fi
pkgs=${work}/debian
mkdir -p "${pkgs}"
for p in "${GIT_DEBS[@]}" "${OTHER_DEBS[@]}"; do
  deb=$(ls -t "${debs}/${p}"_*.deb | head -1)
  dpkg-deb -x "${deb}" "${pkgs}"
  dpkg-deb -f "${deb}" Package Version | paste -sd' ' >> "${work}/packages"
done

# base: what both images share.
base=${work}/base
mkdir -p "${base}/etc/ssl/certs" "${base}/tmp" "${base}/home/nonroot"
chmod 1777 "${base}/tmp"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "${base}/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "${base}/etc/group"
# update-ca-certificates' bundle: every certificate of the package, in name order.
find "${pkgs}/usr/share/ca-certificates" -name '*.crt' | LC_ALL=C sort | xargs cat > "${base}/etc/ssl/certs/ca-certificates.crt"

# tools: the runner's terraform, git and a shell.
tools=${work}/tools
mkdir -p "${tools}/usr/local/bin" "${tools}/bin" "${tools}/usr/share/captf"
tofu=${BIN}/tofu
cp "${tofu}" "${tools}/usr/local/bin/tofu"
cp -a "${pkgs}/." "${tools}/"
rm -rf "${tools}/etc" "${tools}/usr/share/doc" "${tools}/usr/share/man" "${tools}/usr/share/lintian" "${tools}/usr/share/locale" \
  "${tools}/usr/share/ca-certificates" "${tools}/usr/share/bug" "${tools}/usr/share/perl5" "${tools}/usr/share/gitweb" \
  "${tools}/usr/share/bash-completion" "${tools}/usr/share/info" "${tools}/usr/lib/openssh"
for applet in sh cat cp chmod date echo env false grep head ls mkdir mktemp mv printf pwd rm rmdir sed sleep sort tail tee test touch tr true uname wc; do
  ln -sf busybox "${tools}/bin/${applet}"
done
sort "${work}/packages" > "${tools}/usr/share/captf/debian-packages"
# git must run from the tree as it is (its libraries resolved in it).
if [[ $(id -u) == 0 ]]; then
  check=${work}/check
  mkdir -p "${check}"
  cp -a "${base}/." "${tools}/." "${check}/"
  mkdir -p "${check}/dev" && mount --bind /dev "${check}/dev"
  trap 'umount "${check}/dev" 2>/dev/null || true; rm -rf --one-file-system "${work}"' EXIT
  chroot "${check}" /usr/bin/git --version >/dev/null
  chroot "${check}" /usr/bin/ssh -V 2>/dev/null
  chroot "${check}" /bin/sh -c 'mkdir -p /tmp/r && cd /tmp/r && git init -q && git -c user.name=t -c user.email=t@t commit -q --allow-empty -m x && git clone -q file:///tmp/r /tmp/c' >/dev/null
  env -i HOME=/home/nonroot PATH=/usr/local/bin:/usr/bin:/bin "$(command -v chroot)" "${check}" /usr/local/bin/tofu version >/dev/null
  umount "${check}/dev"
fi

app=${work}/app
mkdir -p "${app}"
cp "${work}/captf" "${app}/captf"

common=(--epoch "${EPOCH}" --entrypoint /captf --user 65532:65532 --owner home/nonroot=65532:65532
  --env PATH=/usr/local/bin:/usr/bin:/bin --env HOME=/home/nonroot
  --label org.opencontainers.image.version="${VERSION}" --label org.opencontainers.image.revision="$(git -C "${ROOT}" rev-parse HEAD)"
  --label org.opencontainers.image.source=https://github.com/captf/captf)
"${work}/imagebuild" --out "${OUT}/captf-manager-${VERSION}.tar" --ref "${REGISTRY}/captf:${VERSION}" "${common[@]}" \
  --layer "${base}" --layer "${app}"
"${work}/imagebuild" --out "${OUT}/captf-runner-${VERSION}.tar" --ref "${REGISTRY}/captf-runner:${VERSION}" "${common[@]}" \
  --workdir /workspace --layer "${base}" --layer "${tools}" --layer "${app}"
echo "images built in $((SECONDS - start))s"
# The local cloud's server, provider mirror and mirror image, which the
# tests and the quickstart run beside these.
"${ROOT}/hack/build-localcloud.sh"
