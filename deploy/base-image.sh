#!/usr/bin/env bash
# Assembles a Node 20 base image for deploy/Dockerfile (its NODE_IMAGE build argument) where no container
# registry is reachable: a minimal Debian bookworm root filesystem made by mmdebstrap from Debian's packages
# (minbase, ca-certificates, libstdc++6), the given Node binary at /usr/local/bin/node and, when it sits beside
# that binary, its npm, as in node:20-bookworm-slim; then imported into buildah's local storage as IMAGE.
# It has no uid 1000 user: the Dockerfile creates one where its base lacks it.
#   deploy/base-image.sh "$(command -v node)" localhost/kvgate-node20-base:"$(node --version)"
#   buildah bud --isolation chroot -f deploy/Dockerfile --build-arg NODE_IMAGE=localhost/kvgate-node20-base:... .
# Needs root (mmdebstrap's root mode), mmdebstrap and buildah; DEBIAN_MIRROR overrides deb.debian.org.
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 NODE_BINARY IMAGE" >&2
  exit 2
fi
node_bin=$(realpath "$1")
image=$2
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
if [ "$("$node_bin" -p 'process.versions.node.split(".")[0]')" != 20 ]; then
  echo "$node_bin is not Node 20" >&2
  exit 1
fi
hooks=(
  --customize-hook='chroot "$1" mkdir -p /usr/local/bin /usr/local/lib/node_modules/npm'
  --customize-hook="upload $node_bin /usr/local/bin/node"
  --customize-hook='chroot "$1" chmod 0755 /usr/local/bin/node'
)
npm_dir=$(dirname "$node_bin")/../lib/node_modules/npm
if [ -f "$npm_dir/bin/npm-cli.js" ]; then
  hooks+=(
    --customize-hook="sync-in $(realpath "$npm_dir") /usr/local/lib/node_modules/npm"
    --customize-hook='chroot "$1" ln -s ../lib/node_modules/npm/bin/npm-cli.js /usr/local/bin/npm'
    --customize-hook='chroot "$1" ln -s ../lib/node_modules/npm/bin/npx-cli.js /usr/local/bin/npx'
  )
else
  hooks+=(--customize-hook='chroot "$1" rmdir /usr/local/lib/node_modules/npm')
fi
work=$(mktemp -d)
container=
cleanup() {
  if [ -n "$container" ]; then buildah rm "$container" >/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
# Documentation, manuals and translations left out as in Debian's slim images; the licences stay.
mmdebstrap --variant=minbase --include=ca-certificates,libstdc++6 \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  "${hooks[@]}" bookworm "$work/rootfs.tar" "deb $mirror bookworm main" </dev/null
container=$(buildah from scratch)
buildah add "$container" "$work/rootfs.tar" / >/dev/null
buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --label "kvgate.node-version=$("$node_bin" --version)" --cmd node "$container"
buildah commit --rm "$container" "$image" >/dev/null
container=
echo "$image"
