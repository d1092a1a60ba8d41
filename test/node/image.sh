#!/usr/bin/env bash
# Builds the image from infra/Dockerfile with buildah, as a user would with docker build, on
# a locally made stand-in for node:24-bookworm-slim (no registry can be reached here):
# debootstrap --variant=minbase bookworm, plus the Node 24 binary of the npm `node` package
# and npm from its registry tarball. The base is cached in buildah's storage; the image is
# exported as an OCI archive for containerd. Prints the archive path on its last line.
# Env: TWOPASS_CACHE (default ~/.cache/twopass)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
CACHE=${TWOPASS_CACHE:-$HOME/.cache/twopass}
OUT=$CACHE/node/images
BASE=localhost/node:24-bookworm-slim
IMAGE=localhost/twopass:test
started=$(date +%s)
step() { echo "[image $(( $(date +%s) - started ))s] $*"; }
mkdir -p "$OUT"

if ! buildah inspect --type image "$BASE" >/dev/null 2>&1; then
  step "base: debootstrap --variant=minbase bookworm"
  ROOTFS=$(mktemp -d /var/tmp/twopass-base-XXXXXX)
  MIRROR=$(sed -n 's/^URIs: \(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  debootstrap --variant=minbase bookworm "$ROOTFS" "${MIRROR:-http://deb.debian.org/debian}" >/dev/null
  step "base: Node $("$ROOT/node_modules/node/bin/node" --version) and npm"
  install -m 0755 "$ROOT/node_modules/node/bin/node" "$ROOTFS/usr/local/bin/node"
  NPMTGZ=$(cd "$OUT" && npm pack npm@11 --silent 2>/dev/null | tail -1)
  mkdir -p "$ROOTFS/usr/local/lib/node_modules/npm"
  tar -xzf "$OUT/$NPMTGZ" -C "$ROOTFS/usr/local/lib/node_modules/npm" --strip-components=1
  ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$ROOTFS/usr/local/bin/npm"
  ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$ROOTFS/usr/local/bin/npx"
  # This test base only: the registries here sit behind a TLS proxy whose CA is in the host's bundle.
  mkdir -p "$ROOTFS/etc/ssl/certs"
  cp /etc/ssl/certs/ca-certificates.crt "$ROOTFS/etc/ssl/certs/ca-certificates.crt"
  ctr=$(buildah from scratch)
  mnt=$(buildah mount "$ctr")
  cp -a "$ROOTFS/." "$mnt/"
  buildah umount "$ctr" >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt --cmd node "$ctr"
  buildah commit --quiet "$ctr" "$BASE" >/dev/null
  buildah rm "$ctr" >/dev/null
  rm -rf "$ROOTFS"
else
  step "base $BASE cached"
fi

step "buildah bud -f infra/Dockerfile --build-arg BASE=$BASE"
buildah bud --quiet --isolation chroot --network host --build-arg "BASE=$BASE" \
  -f infra/Dockerfile -t "$IMAGE" . >/dev/null
step "size: $(buildah images --format '{{.Size}}' "$IMAGE" | head -1)"
rm -f "$OUT/twopass-test.tar"
buildah push --quiet "$IMAGE" "oci-archive:$OUT/twopass-test.tar:$IMAGE" >/dev/null
step "done"
echo "$OUT/twopass-test.tar"
