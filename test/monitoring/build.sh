#!/usr/bin/env bash
# Builds Prometheus, promtool and the Pushgateway from the Go module proxy and caches them by version.
# Usage: test/monitoring/build.sh        (prints the bin directory on its last line)
# Env:   TWOPASS_CACHE (default ~/.cache/twopass)
set -euo pipefail
PROM=v0.316.0 # github.com/prometheus/prometheus (Prometheus and promtool 3.x)
PGW=v1.11.1   # github.com/prometheus/pushgateway
CACHE=${TWOPASS_CACHE:-$HOME/.cache/twopass}
BIN=$CACHE/prom/$PROM-$PGW
if [[ -x $BIN/promtool && -x $BIN/pushgateway && -x $BIN/prometheus ]]; then
  echo "monitoring binaries cached in $BIN"
  echo "$BIN"
  exit 0
fi
mkdir -p "$BIN.tmp"
export GOTOOLCHAIN=${GOTOOLCHAIN:-local} CGO_ENABLED=0
# Each module is built in its own downloaded source tree, with its own go.sum: `go install
# m@v` would also ask the proxy for the module's version list, which it refuses for some.
build() { # module version package output
  local dir
  dir=$(go mod download -json "$1@$2" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
  [[ -d $dir ]] || { echo "cannot download $1@$2" >&2; exit 1; }
  echo "building $4 from $1@$2"
  (cd "$dir" && GOWORK=off go build -mod=readonly -p 2 -ldflags "-s -w" -o "$BIN.tmp/$4" "$3")
}
build github.com/prometheus/pushgateway "$PGW" . pushgateway
build github.com/prometheus/prometheus "$PROM" ./cmd/promtool promtool
# the server, for the dashboard's queries (its web UI assets are not in the module: the API is enough)
build github.com/prometheus/prometheus "$PROM" ./cmd/prometheus prometheus
rm -rf "$BIN" && mv "$BIN.tmp" "$BIN"
echo "$BIN"
