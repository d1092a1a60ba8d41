#!/usr/bin/env bash
# Builds the whereabouts peer (main.go beside this script, linking whereabouts' own
# reconciler) from the Go module proxy, cached by version like the cluster binaries.
# Usage: test/bench/peer/build.sh   (prints the binary's path on its last line)
# Env:   TWOPASS_WHEREABOUTS_VERSION (default v0.9.2), TWOPASS_CACHE (default ~/.cache/twopass)
set -euo pipefail
WV=${TWOPASS_WHEREABOUTS_VERSION:-v0.9.2}
CACHE=${TWOPASS_CACHE:-$HOME/.cache/twopass}
BIN=$CACHE/whereabouts/$WV/peer-reconciler
HERE=$(cd "$(dirname "$0")" && pwd)
if [[ -x $BIN ]] && cmp -s "$HERE/main.go" "$CACHE/build/whereabouts-$WV/main.go"; then
  echo "$BIN"
  exit 0
fi
W=$CACHE/build/whereabouts-$WV
rm -rf "$W" && mkdir -p "$W" "$(dirname "$BIN")"
cp "$HERE/main.go" "$W/main.go"
cd "$W"
export GOFLAGS=-mod=mod GOTOOLCHAIN=${GOTOOLCHAIN:-local}
go mod init local.test/peer >/dev/null 2>&1
go get "github.com/k8snetworkplumbingwg/whereabouts@$WV" >/dev/null
go mod tidy >/dev/null
CGO_ENABLED=0 go build -p 2 -ldflags "-s -w" -o "$BIN.tmp" . && mv "$BIN.tmp" "$BIN"
echo "$BIN"
