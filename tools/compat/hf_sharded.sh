#!/usr/bin/env bash
# hf_sharded.sh — `ckpt export --max-shard-size` against HuggingFace's own readers (issue #23
# item 7): a virtual environment (cached, with the system's torch) holding huggingface_hub and
# transformers from the package registry, then tests/compat/test_hf_sharded.py run by its
# Python: huggingface_hub's split_torch_state_dict_into_shards gives the same shards and index,
# its load_torch_model and transformers' from_pretrained load the export bit-exact.  Not in the
# test command (transformers is a heavy dependency); tests/cli/test_views.py checks the split
# by its rule everywhere.  Results: docs/status.md (#23).
#
#   tools/compat/hf_sharded.sh [-B BUILD_DIR]
#
# CKPT_COMPAT_VENVS: where the environment lives (default ~/.cache/ckptfs/torch-venvs).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
build=build
if [ "${1:-}" = "-B" ]; then build=$2; shift 2; fi
ckpt=$root/$build/tools/ckpt/ckpt
[ -x "$ckpt" ] || { echo "hf_sharded: $ckpt missing: build first (meson setup $build && ninja -C $build)"; exit 2; }
env=${CKPT_COMPAT_VENVS:-$HOME/.cache/ckptfs/torch-venvs}/hf
if [ ! -x "$env/bin/python" ] || ! "$env/bin/python" -c "import transformers, huggingface_hub, pytest" 2>/dev/null; then
  echo "== creating $env"
  python3 -m venv --system-site-packages "$env"
  "$env/bin/pip" install -q huggingface_hub transformers pytest
fi
CKPT_BIN=$ckpt CKPT_FIXTURES_DEFAULT=$root/tests/fixtures/data \
  "$env/bin/python" -m pytest -q -p no:cacheprovider -p no:warnings -rfEs --tb=short \
  "$root/tests/compat/test_hf_sharded.py"
