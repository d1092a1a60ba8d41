#!/usr/bin/env bash
# The parts of a real node for the node suites, cached by version beside the cluster's:
# kubelet, kube-controller-manager and kube-scheduler built from the Go module proxy in the
# wrapper module test/cluster/build.sh makes (run it first), and Debian's containerd, runc,
# CNI plugins, buildah and debootstrap (apt). Prints the bin directory on its last line.
# The real producers (whereabouts' CNI plugin, its pod controller and reconciler, Multus'
# thin plugin) build with `producers`, in a wrapper module of their own that pins the
# cluster build's k8s.io/* versions (so the Go build cache is shared), cached by version.
# Usage: test/node/build.sh [packages|binaries|producers|all]   (default all but producers;
#        CI runs the apt part after the other apt installs, the Go parts after the cluster build)
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
if [[ $PART != binaries && $PART != producers ]] && ((${#missing[@]})); then
  step "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [[ $PART == producers ]]; then
  WV=v0.9.4 # github.com/k8snetworkplumbingwg/whereabouts
  MV=v3.9.3 # gopkg.in/k8snetworkplumbingwg/multus-cni.v3
  PBIN=$CACHE/producers/whereabouts-$WV-multus-$MV
  if [[ -x $PBIN/whereabouts && -x $PBIN/controlloop && -x $PBIN/reconciler && -x $PBIN/multus && -d $PBIN/crds ]]; then
    step "producers cached in $PBIN"
    echo "$PBIN"
    exit 0
  fi
  export GOFLAGS=-mod=mod GOTOOLCHAIN=${GOTOOLCHAIN:-local} CGO_ENABLED=0
  PW=$CACHE/build/producers-$WV
  rm -rf "$PW" && mkdir -p "$PW" "$PBIN.tmp"
  cd "$PW"
  step "wrapper module for whereabouts $WV"
  go mod init local.test/producers >/dev/null 2>&1
  # whereabouts' own go.mod replaces gogo/protobuf; a wrapper must repeat it
  go mod edit -replace=github.com/gogo/protobuf=github.com/gogo/protobuf@v1.3.2
  if [[ -f $W/go.mod ]]; then
    # the cluster build's k8s.io versions, so that its compiled packages are reused
    for m in k8s.io/api k8s.io/apimachinery k8s.io/client-go; do
      v=$(sed -n "s|^replace $m => $m \(v[^ ]*\)\$|\1|p" "$W/go.mod")
      [[ -n $v ]] && go mod edit "-replace=$m=$m@$v"
    done
  fi
  for c in cmd cmd/controlloop cmd/reconciler; do
    go get -tool "github.com/k8snetworkplumbingwg/whereabouts/$c@$WV"
  done
  go mod tidy
  for c in whereabouts:cmd controlloop:cmd/controlloop reconciler:cmd/reconciler; do
    step "building ${c%%:*}"
    go build -p 2 -ldflags "-s -w" -o "$PBIN.tmp/${c%%:*}" "github.com/k8snetworkplumbingwg/whereabouts/${c#*:}"
  done
  # Multus: the module zip keeps only vendor/modules.txt, so build from a copy without vendor/
  step "building multus (thin plugin) $MV"
  md=$(go mod download -json "gopkg.in/k8snetworkplumbingwg/multus-cni.v3@$MV" | sed -n 's/.*"Dir": "\(.*\)",/\1/p')
  [[ -d $md ]] || { echo "cannot download multus-cni.v3@$MV" >&2; exit 1; }
  rm -rf "$PW/multus" && cp -r "$md" "$PW/multus" && chmod -R u+w "$PW/multus" && rm -rf "$PW/multus/vendor"
  (cd "$PW/multus" && GOWORK=off go build -mod=mod -p 2 -ldflags "-s -w" -o "$PBIN.tmp/multus" ./cmd/)
  # their CRDs as they ship them (whereabouts' IPPool and reservation; the
  # NetworkAttachmentDefinition is in Multus' daemonset manifest)
  mkdir -p "$PBIN.tmp/crds"
  wd=$(go list -m -f '{{.Dir}}' github.com/k8snetworkplumbingwg/whereabouts)
  cp "$wd"/doc/crds/whereabouts.cni.cncf.io_{ippools,overlappingrangeipreservations}.yaml "$PBIN.tmp/crds/"
  cp "$PW/multus/deployments/multus-daemonset.yml" "$PBIN.tmp/crds/multus-daemonset.yml"
  chmod -R u+w "$PBIN.tmp"
  rm -rf "$PBIN" && mv "$PBIN.tmp" "$PBIN"
  step "producers built"
  echo "$PBIN"
  exit 0
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
