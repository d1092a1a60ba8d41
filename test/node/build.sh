#!/usr/bin/env bash
# The parts of a real node for the node suites, cached by version beside the cluster's:
# kubelet, kube-controller-manager and kube-scheduler built from the Go module proxy in the
# wrapper module test/cluster/build.sh makes (run it first), and Debian's containerd, runc,
# CNI plugins, buildah and debootstrap (apt). Prints the bin directory on its last line.
# Usage: test/node/build.sh [packages|binaries|all]   (default all; CI runs the apt part
#        after the other apt installs, and the Go part after the cluster build)
# Env: TWOPASS_KUBE_VERSION (default v1.36.3), TWOPASS_CACHE (default ~/.cache/twopass)
set -euo pipefail
KV=${TWOPASS_KUBE_VERSION:-v1.36.3}
CACHE=${TWOPASS_CACHE:-$HOME/.cache/twopass}
BIN=$CACHE/node/$KV
W=$CACHE/build/$KV
LDF="-s -w -X k8s.io/component-base/version.gitVersion=$KV -X k8s.io/client-go/pkg/version.gitVersion=$KV"
started=$(date +%s)
step() { echo "[node $(( $(date +%s) - started ))s] $*"; }

PART=${1:-all}
pkgs=(containerd runc containernetworking-plugins buildah debootstrap busybox-static)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [[ $PART != binaries ]] && ((${#missing[@]})); then
  step "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [[ $PART == packages ]]; then
  step "packages ready"
  exit 0
fi
if [[ -x $BIN/kubelet && -x $BIN/kube-controller-manager && -x $BIN/kube-scheduler ]]; then
  step "node binaries cached in $BIN"
  echo "$BIN"
  exit 0
fi
[[ -f $W/go.mod ]] || { echo "no wrapper module in $W: run test/cluster/build.sh first" >&2; exit 1; }
mkdir -p "$BIN.tmp"
cd "$W"
export GOFLAGS=-mod=mod GOTOOLCHAIN=${GOTOOLCHAIN:-local}
for c in kubelet kube-controller-manager kube-scheduler; do
  if [[ -x $BIN.tmp/$c ]]; then continue; fi
  step "building $c"
  CGO_ENABLED=0 go build -p 2 -tags selinux,notest -ldflags "$LDF" -o "$BIN.tmp/$c.part" "k8s.io/kubernetes/cmd/$c"
  mv "$BIN.tmp/$c.part" "$BIN.tmp/$c"
done
rm -rf "$BIN" && mv "$BIN.tmp" "$BIN"
step "done"
echo "$BIN"
