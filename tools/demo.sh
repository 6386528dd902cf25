#!/usr/bin/env bash
# demo.sh — the README's main job on a fresh Debian 12 machine: install the build
# dependencies, build ckptfs, look inside a real sharded checkpoint that torch wrote with
# FSDP2 over 4 ranks (bundled under tests/fixtures/data) with `ckpt`, then mount it with
# `ckptfs` and show the tree, xattrs, a value, a numpy view, a resharded `.layout` file and the
# safetensors view, and unmount.
set -euo pipefail
cd "$(dirname "$0")/.."
./tools/install-deps.sh
[ -d build ] || meson setup build >/dev/null
ninja -C build >/dev/null
ck=tests/fixtures/data/fsdp2_ws4/ckpt
run() { echo "\$ $*"; "$@"; echo; }
run ./build/tools/ckpt/ckpt info "$ck"
run ./build/tools/ckpt/ckpt ls "$ck"
run ./build/tools/ckpt/ckpt ls -l "$ck" model
run ./build/tools/ckpt/ckpt ls -l "$ck" optim/param_groups/0
run ./build/tools/ckpt/ckpt cat --text -v "$ck" model/norm.weight
run ./build/tools/ckpt/ckpt cat --text --slice 0:2,: "$ck" optim/state/tok_embeddings.weight/exp_avg
run ./build/tools/ckpt/ckpt cat --text "$ck" optim/param_groups/0/betas
run ./build/tools/ckpt/ckpt verify "$ck"

mnt=$(mktemp -d /tmp/ckptfs-demo.XXXXXX)
trap 'fusermount3 -u "$mnt" 2>/dev/null || true; rmdir "$mnt" 2>/dev/null || true' EXIT
run ./build/tools/ckptfs/ckptfs "$ck" "$mnt"
run ls -a "$mnt"
run ls -l "$mnt/model"
run getfattr -d "$mnt/model/tok_embeddings.weight"
run cat "$mnt/optim/param_groups/0/betas"
run od -A d -t f4 -N 24 "$mnt/model/norm.weight"
run ls -l "$mnt/.layout/dim0-of-3/"{0,1,2}"/model/tok_embeddings.weight"
run getfattr -d "$mnt/.layout/dim0-of-3/2/model/tok_embeddings.weight"
run ls -l "$mnt/.safetensors" "$mnt/.npy/model/norm.weight.npy" "$mnt/.raw"
run fusermount3 -u "$mnt"
