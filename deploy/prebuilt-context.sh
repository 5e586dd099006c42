#!/usr/bin/env bash
# Stages the build context of `deploy/Dockerfile` with KVGATE_BUILD=prebuilt in DIR (created, must not exist):
# this checkout's built package (`npm run build` first) and its production dependencies, installed with
# `npm ci --omit=dev` (from npm's cache when it holds them). The image then needs neither npm nor the registry:
#   deploy/prebuilt-context.sh /tmp/ctx
#   buildah bud --isolation chroot -f deploy/Dockerfile --build-arg KVGATE_BUILD=prebuilt -t kvgate /tmp/ctx
set -euo pipefail
if [ $# -ne 1 ]; then
  echo "usage: $0 DIR" >&2
  exit 2
fi
out=$1
cd "$(dirname "$0")/.."
if [ ! -f dist/src/cli/index.js ] || [ ! -f build/kvgate.wasm ]; then
  echo "kvgate is not built here: run npm run build first" >&2
  exit 1
fi
mkdir "$out"
mkdir -p "$out/build" "$out/vendor"
cp package.json package-lock.json "$out/"
cp -R dist bin profiles "$out/"
cp build/kvgate.wasm "$out/build/"
cp -R vendor/proto "$out/vendor/"
# Install scripts stay off as in the source build: the native dependencies ship prebuilt binaries.
(cd "$out" && npm ci --omit=dev --ignore-scripts --prefer-offline --no-audit --no-fund --loglevel=error)
