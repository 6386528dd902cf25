#!/usr/bin/env bash
# older_torch.sh — ckptfs against real, older torch releases from the package registry
# (issue #23): for each VERSION, a virtual environment with that torch (cached), then
# tests/compat/test_older_torch.py run by its Python: that torch loads what the saver and
# `ckpt reshard` write, and ckptfs reads what that torch writes.  Too slow for every CI run
# (each environment is a ~4 GB download and install); its results go to docs/saver.md.
#
#   tools/compat/older_torch.sh [-B BUILD_DIR] [VERSION ...]   (default: 2.4.1 2.11.0)
#
# CKPT_COMPAT_VENVS: where the environments live (default ~/.cache/ckptfs/torch-venvs).
# Needs a build (meson setup build && ninja -C build) and network access to PyPI.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
build=build
if [ "${1:-}" = "-B" ]; then build=$2; shift 2; fi
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(2.4.1 2.11.0)
venvs=${CKPT_COMPAT_VENVS:-$HOME/.cache/ckptfs/torch-venvs}
ckpt=$root/$build/tools/ckpt/ckpt
driver=$root/$build/tests/save/save_driver
for f in "$ckpt" "$driver"; do
  [ -x "$f" ] || { echo "older_torch: $f missing: build first (meson setup $build && ninja -C $build)"; exit 2; }
done
mkdir -p "$venvs"
declare -A result
for v in "${versions[@]}"; do
  env=$venvs/torch-$v
  if [ ! -x "$env/bin/python" ] || ! "$env/bin/python" -c "import torch, pytest" 2>/dev/null; then
    echo "== torch $v: creating $env"
    python3 -m venv "$env"
    # numpy < 2: the numpy that torch releases before 2.3 were built against
    "$env/bin/pip" install -q "torch==$v" "numpy<2" pytest
  fi
  echo "== torch $v"
  if CKPT_BIN=$ckpt SAVE_DRIVER=$driver CKPT_SOURCE_ROOT=$root CKPT_COMPAT_TORCH=$v \
     "$env/bin/python" -m pytest -q -p no:cacheprovider -p no:warnings -rfEs --tb=short \
     "$root/tests/compat/test_older_torch.py"; then
    result[$v]=passed
  else
    result[$v]=FAILED
  fi
done
echo
status=0
for v in "${versions[@]}"; do
  echo "torch $v: ${result[$v]}"
  [ "${result[$v]}" = passed ] || status=1
done
exit $status
