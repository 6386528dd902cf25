#!/usr/bin/env bash
# demo.sh — the README's main job on a fresh Debian 12 machine: install the build
# dependencies, build ckptfs, and look inside a real sharded checkpoint that torch wrote with
# FSDP2 over 4 ranks (bundled under tests/fixtures/data): its summary, its tree, and one
# tensor and one optimizer value printed as text.
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
