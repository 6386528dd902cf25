#!/usr/bin/env bash
# demo.sh — the README's main job on a fresh Debian 12 machine: install the build
# dependencies, build ckptfs, then
#  1. write a checkpoint of a small GPT-style model (8 layers, d=512, vocab 8192: 33.6 M
#     parameters) with its AdamW state — 403 MB, deterministic values — from 4 MPI ranks with
#     the collective saver (tools/demo/demo_gpt_save.c, under mpirun), into a directory of
#     steps with `latest`;
#  2. look inside it with `ckpt` (info, tree, one tensor as text, verify);
#  3. mount the directory of steps with `ckptfs`: the tree, xattrs, a value, one resharded
#     `.layout` file, the safetensors view; export the model to one safetensors file; unmount;
#  4. the same tools on a real 4-rank FSDP2 checkpoint torch wrote (bundled with the tests).
set -euo pipefail
cd "$(dirname "$0")/.."
./tools/install-deps.sh
[ -d build ] || meson setup build >/dev/null
ninja -C build >/dev/null
ckpt=./build/tools/ckpt/ckpt
run() { echo "\$ $*"; "$@"; echo; }
# long listings are cut with sed (reads all input: no SIGPIPE under pipefail)
first() { local n=$1; shift; echo "\$ $* | sed -n 1,${n}p"; "$@" | sed -n "1,${n}p"; echo; }

work=$(mktemp -d /tmp/ckptfs-demo.XXXXXX)
mnt="$work/mnt"
mkdir "$mnt" "$work/ckpts"
trap 'fusermount3 -u "$mnt" 2>/dev/null || true; rm -rf "$work"' EXIT

echo "== 1. save a GPT-style model + AdamW state from 4 MPI ranks (collective saver)"
run mpirun --allow-run-as-root --oversubscribe -np 4 ./build/tools/demo/demo_gpt_save \
  "$work/ckpts" step-1000
ck="$work/ckpts/step-1000"
run ls -l "$work/ckpts" "$ck"
run cat "$work/ckpts/latest"

echo "== 2. look inside with ckpt (no Python, nothing unpickled)"
run $ckpt info "$ck"
run $ckpt ls "$ck"
first 12 $ckpt ls -l "$ck" model
run $ckpt ls -l "$ck" optim/param_groups/0
run $ckpt cat --text --slice 0:8 "$ck" model/layers.0.attention_norm.weight
run $ckpt cat --text "$ck" optim/param_groups/0/betas
run $ckpt verify "$ck"

echo "== 3. mount the directory of steps"
run ./build/tools/ckptfs/ckptfs "$work/ckpts" "$mnt"
run ls -la "$mnt"
first 8 ls -l "$mnt/latest/model"
run getfattr -d "$mnt/latest/model/tok_embeddings.weight"
run cat "$mnt/latest/optim/param_groups/0/lr"
run od -A d -t f4 -N 16 "$mnt/latest/model/norm.weight"
run ls -l "$mnt/latest/.layout/dim0-of-3/"{0,1,2}"/model/output.weight"
run getfattr -d "$mnt/latest/.layout/dim0-of-3/2/model/output.weight"
echo "\$ cmp <(tail -c +$((2 * 2731 * 512 * 4 + 1)) $mnt/latest/model/output.weight) $mnt/latest/.layout/dim0-of-3/2/model/output.weight"
cmp <(tail -c +$((2 * 2731 * 512 * 4 + 1)) "$mnt/latest/model/output.weight") \
  "$mnt/latest/.layout/dim0-of-3/2/model/output.weight" && echo "rank 2's slice: same bytes"
echo
run ls -l "$mnt/latest/.safetensors"
run $ckpt export --keys model "$ck" "$work/model.safetensors"
run ls -l "$work/model.safetensors"
run fusermount3 -u "$mnt"

echo "== 4. a real FSDP2 checkpoint torch wrote over 4 ranks (tests/fixtures)"
fx=tests/fixtures/data/fsdp2_ws4/ckpt
run $ckpt info "$fx"
run $ckpt ls -l "$fx" model
run $ckpt cat --text --slice 0:2,: "$fx" optim/state/tok_embeddings.weight/exp_avg
run ./build/tools/ckptfs/ckptfs "$fx" "$mnt"
run ls "$mnt" "$mnt/.layout/dim0-of-3/2/model"
run cat "$mnt/optim/param_groups/0/betas"
run fusermount3 -u "$mnt"
echo "demo done"
