#!/usr/bin/env bash
# Builds the real cloud producers from the Go module proxy and caches them by version:
# cloud-provider-openstack's openstack-cloud-controller-manager (OCCM). It builds in a wrapper
# module of its own that repeats the cluster build's `replace k8s.io/X => k8s.io/X v0.N.M`
# lines (cloud-provider-openstack needs k8s.io/kubernetes), so most compiled packages come
# from the cluster build's Go cache. Run after test/cluster/build.sh.
# Usage: test/cloud/build.sh          (prints the bin directory on its last line)
# Env:   TWOPASS_KUBE_VERSION (default v1.36.3), TWOPASS_CACHE (default ~/.cache/twopass)
set -euo pipefail
KV=${TWOPASS_KUBE_VERSION:-v1.36.3}
CV=v1.36.0 # k8s.io/cloud-provider-openstack
CACHE=${TWOPASS_CACHE:-$HOME/.cache/twopass}
W=$CACHE/build/$KV
BIN=$CACHE/cloud/cpo-$CV
started=$(date +%s)
step() { echo "[cloud $(($(date +%s) - started))s] $*"; }
if [[ -x $BIN/openstack-cloud-controller-manager ]]; then
  step "cloud producers cached in $BIN"
  echo "$BIN"
  exit 0
fi
[[ -f $W/go.mod ]] || { echo "no wrapper module in $W: run test/cluster/build.sh first" >&2; exit 1; }
export GOFLAGS=-mod=mod GOTOOLCHAIN=${GOTOOLCHAIN:-local} CGO_ENABLED=0
CW=$CACHE/build/cloud-$CV
rm -rf "$CW" && mkdir -p "$CW" "$BIN.tmp"
cd "$CW"
step "wrapper module for cloud-provider-openstack $CV"
go mod init local.test/cloud >/dev/null 2>&1
# the cluster build's replace lines (k8s.io/kubernetes' staging modules at their versions)
grep '^replace ' "$W/go.mod" | sed 's/^replace //' | while read -r from _ to version; do
  go mod edit "-replace=$from=$to@$version"
done
grep '^godebug' "$W/go.mod" >>go.mod || true
go get "k8s.io/kubernetes@$KV" "k8s.io/cloud-provider-openstack@$CV"
go get -tool "k8s.io/cloud-provider-openstack/cmd/openstack-cloud-controller-manager@$CV"
go mod tidy
step "building openstack-cloud-controller-manager"
go build -p 2 -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$CV" \
  -o "$BIN.tmp/openstack-cloud-controller-manager" k8s.io/cloud-provider-openstack/cmd/openstack-cloud-controller-manager
rm -rf "$BIN" && mv "$BIN.tmp" "$BIN"
step "done"
echo "$BIN"
