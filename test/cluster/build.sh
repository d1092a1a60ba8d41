#!/usr/bin/env bash
# Builds kube-apiserver and etcd from the Go module proxy and caches them by version.
# Usage: test/cluster/build.sh            (prints the bin directory on its last line)
# Env:   TWOPASS_KUBE_VERSION (default v1.36.3), TWOPASS_CACHE (default ~/.cache/twopass)
set -euo pipefail
KV=${TWOPASS_KUBE_VERSION:-v1.36.3}
SV=v0.${KV#v1.}
CACHE=${TWOPASS_CACHE:-$HOME/.cache/twopass}
BIN=$CACHE/kube/$KV
LDF="-s -w -X k8s.io/component-base/version.gitVersion=$KV -X k8s.io/client-go/pkg/version.gitVersion=$KV"
if [[ -x $BIN/kube-apiserver && -x $BIN/etcd ]]; then
  echo "cluster binaries cached in $BIN"
  # kubectl (for `kubectl kustomize` in the deployment tests) came later: build it into the cache once.
  if [[ ! -x $BIN/kubectl && -f $CACHE/build/$KV/go.mod ]]; then
    echo "building kubectl into $BIN"
    (cd "$CACHE/build/$KV" && GOFLAGS=-mod=mod GOTOOLCHAIN=${GOTOOLCHAIN:-local} CGO_ENABLED=0 \
      go build -p 2 -ldflags "$LDF" -o "$BIN/kubectl.tmp" k8s.io/kubernetes/cmd/kubectl && mv "$BIN/kubectl.tmp" "$BIN/kubectl")
  fi
  echo "$BIN"
  exit 0
fi
W=$CACHE/build/$KV
rm -rf "$W" && mkdir -p "$W" "$BIN.tmp"
cd "$W"
export GOFLAGS=-mod=mod GOTOOLCHAIN=${GOTOOLCHAIN:-local}
started=$(date +%s)
step() { echo "[build $(( $(date +%s) - started ))s] $*"; }
step "wrapper module for k8s.io/kubernetes $KV"
go mod init local.test/kas >/dev/null 2>&1
KMOD=$(go mod download -json "k8s.io/kubernetes@$KV" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
[[ -f $KMOD ]] || { echo "cannot download k8s.io/kubernetes@$KV" >&2; exit 1; }
for m in $(sed -n 's|^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/.*|\1|p' "$KMOD"); do
  go mod edit "-replace=$m=$m@$SV"
done
grep '^godebug' "$KMOD" >> go.mod || true
step "resolving modules"
go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$KV"
go mod edit -tool=go.etcd.io/etcd/server/v3
go mod tidy
step "building kube-apiserver"
CGO_ENABLED=0 go build -p 2 -tags selinux,notest -ldflags "$LDF" -o "$BIN.tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
step "building etcd"
CGO_ENABLED=0 go build -p 2 -ldflags "-s -w" -o "$BIN.tmp/etcd" go.etcd.io/etcd/server/v3
step "building kubectl"
CGO_ENABLED=0 go build -p 2 -ldflags "$LDF" -o "$BIN.tmp/kubectl" k8s.io/kubernetes/cmd/kubectl
rm -rf "$BIN" && mv "$BIN.tmp" "$BIN"
step "done"
echo "$BIN"
