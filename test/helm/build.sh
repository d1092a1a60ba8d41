#!/usr/bin/env bash
# Builds helm from the Go module proxy and caches it by version.
# Usage: test/helm/build.sh        (prints the bin directory on its last line)
# Env:   TWOPASS_CACHE (default ~/.cache/twopass)
set -euo pipefail
HELM=v4.3.2 # helm.sh/helm/v4
CACHE=${TWOPASS_CACHE:-$HOME/.cache/twopass}
BIN=$CACHE/helm/$HELM
if [[ -x $BIN/helm ]]; then
  echo "helm cached in $BIN"
  echo "$BIN"
  exit 0
fi
mkdir -p "$BIN.tmp"
export GOTOOLCHAIN=${GOTOOLCHAIN:-local} CGO_ENABLED=0
# Built in its downloaded source tree with its own go.sum (no version list is asked for).
dir=$(go mod download -json "helm.sh/helm/v4@$HELM" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
[[ -d $dir ]] || { echo "cannot download helm.sh/helm/v4@$HELM" >&2; exit 1; }
echo "building helm from helm.sh/helm/v4@$HELM"
(cd "$dir" && GOWORK=off go build -mod=readonly -p 2 -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$HELM" -o "$BIN.tmp/helm" ./cmd/helm)
rm -rf "$BIN" && mv "$BIN.tmp" "$BIN"
echo "$BIN"
