#!/usr/bin/env bash
# Prints CAPTF's version for the checkout: the nearest v* tag as git describe
# gives it (v0.1.0, v0.1.0-3-gabc1234), else v0.0.0-<commit time>-<commit>,
# a Go pseudo-version; -dirty when files changed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if v=$(git describe --tags --match 'v*' 2>/dev/null); then
  :
else
  v="v0.0.0-$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S)-$(git rev-parse --short=12 HEAD)"
fi
if [[ -n "$(git status --porcelain --untracked-files=no)" ]]; then
  v="${v}-dirty"
fi
echo "${v}"
