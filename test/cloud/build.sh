#!/usr/bin/env bash
# Builds the real cloud producers from the Go module proxy and caches them by version:
# cloud-provider-openstack's openstack-cloud-controller-manager (OCCM) and its Cinder CSI
# plugin, in a wrapper module of its own that repeats the cluster build's
# `replace k8s.io/X => k8s.io/X v0.N.M` lines (cloud-provider-openstack needs
# k8s.io/kubernetes), so most compiled packages come from the cluster build's Go cache; and
# the CSI external-provisioner, in a wrapper that repeats its own go.mod's replace lines (its
# k8s.io modules are older). Run after test/cluster/build.sh.
# Usage: test/cloud/build.sh [all|provisioner|cpo]   (default all; prints the cpo bin directory
#        on its last line). The provisioner needs no cluster build: CI starts it at once, apart.
# Env:   TWOPASS_KUBE_VERSION (default v1.36.3), TWOPASS_CACHE (default ~/.cache/twopass)
set -euo pipefail
KV=${TWOPASS_KUBE_VERSION:-v1.36.3}
CV=v1.36.0 # k8s.io/cloud-provider-openstack
PV=v5.3.0  # github.com/kubernetes-csi/external-provisioner/v5
CACHE=${TWOPASS_CACHE:-$HOME/.cache/twopass}
W=$CACHE/build/$KV
BIN=$CACHE/cloud/cpo-$CV
PBIN=$CACHE/cloud/external-provisioner-$PV
started=$(date +%s)
step() { echo "[cloud $(($(date +%s) - started))s] $*"; }
export GOFLAGS=-mod=mod GOTOOLCHAIN=${GOTOOLCHAIN:-local} CGO_ENABLED=0
WHAT=${1:-all}
case $WHAT in all | provisioner | cpo) ;; *) echo "usage: $0 [all|provisioner|cpo]" >&2 && exit 2 ;; esac

# the CSI external-provisioner: its module's own replace lines (read from its go.mod)
if [[ $WHAT != cpo && -x $PBIN/csi-provisioner ]]; then
  step "external-provisioner cached in $PBIN"
elif [[ $WHAT != cpo ]]; then
  PW=$CACHE/build/external-provisioner-$PV
  P=github.com/kubernetes-csi/external-provisioner/v5
  rm -rf "$PW" "$PBIN.tmp" && mkdir -p "$PW" "$PBIN.tmp"
  (
    cd "$PW"
    step "wrapper module for the external-provisioner $PV"
    go mod init local.test/provisioner >/dev/null 2>&1
    go get "$P@$PV"
    grep '^replace ' "$(go env GOMODCACHE)/cache/download/$P/@v/$PV.mod" | sed 's/^replace //' |
      while read -r from _ to version; do go mod edit "-replace=$from=$to@$version"; done
    go get -tool "$P/cmd/csi-provisioner@$PV"
    go mod tidy
    step "building csi-provisioner"
    go build -p 2 -ldflags "-s -w -X main.version=$PV" -o "$PBIN.tmp/csi-provisioner" "$P/cmd/csi-provisioner"
  )
  rm -rf "$PBIN" && mv "$PBIN.tmp" "$PBIN"
  step "external-provisioner built in $PBIN"
fi
[[ $WHAT != provisioner ]] || exit 0
if [[ -x $BIN/openstack-cloud-controller-manager && -x $BIN/cinder-csi-plugin ]]; then
  step "cloud-provider-openstack cached in $BIN"
  echo "$BIN"
  exit 0
fi
[[ -f $W/go.mod ]] || { echo "no wrapper module in $W: run test/cluster/build.sh first" >&2; exit 1; }
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
go get -tool "k8s.io/cloud-provider-openstack/cmd/cinder-csi-plugin@$CV"
go mod tidy
step "building openstack-cloud-controller-manager"
go build -p 2 -ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$CV" \
  -o "$BIN.tmp/openstack-cloud-controller-manager" k8s.io/cloud-provider-openstack/cmd/openstack-cloud-controller-manager
step "building cinder-csi-plugin"
go build -p 2 -ldflags "-s -w -X k8s.io/cloud-provider-openstack/pkg/version.Version=$CV" \
  -o "$BIN.tmp/cinder-csi-plugin" k8s.io/cloud-provider-openstack/cmd/cinder-csi-plugin
rm -rf "$BIN" && mv "$BIN.tmp" "$BIN"
step "done"
echo "$BIN"
