#!/usr/bin/env bash
# install-deps.sh — installs what ckptfs needs on Debian 12: build tools and libraries from
# apt; with --python also the Python packages used by the interop tests (real torch, numpy,
# safetensors, zstandard, pytest) and what building the Python package offline needs
# (setuptools).  Idempotent; skips what is already there.
set -euo pipefail

want_python=0
for a in "$@"; do
  case "$a" in
    --python) want_python=1 ;;
    *) echo "usage: $0 [--python]" >&2; exit 2 ;;
  esac
done

SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

apt_pkgs=(build-essential meson ninja-build pkg-config libzstd-dev libxxhash-dev
          libfuse3-dev fuse3 libcriterion-dev libopenmpi-dev openmpi-bin
          clang libclang-rt-14-dev valgrind attr acl python3 python3-pip)
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-deps: apt-get install ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ "$want_python" = 1 ]; then
  py_pkgs=(torch numpy safetensors zstandard pytest setuptools)
  need=()
  for p in "${py_pkgs[@]}"; do
    python3 -c "import $p" 2>/dev/null || need+=("$p")
  done
  # the Python package's test builds the wheel without build isolation (no download): it needs
  # setuptools (above) and bdist_wheel, built into setuptools >= 70.1, else the wheel package
  python3 -c "import setuptools.command.bdist_wheel" 2>/dev/null ||
    python3 -c "import wheel" 2>/dev/null || need+=(wheel)
  if [ "${#need[@]}" -gt 0 ]; then
    echo "install-deps: pip install ${need[*]}"
    # Debian's own python3 refuses system-wide pip installs (PEP 668) unless told otherwise.
    python3 -m pip install -q "${need[@]}" 2>/dev/null ||
      python3 -m pip install -q --break-system-packages "${need[@]}"
  fi
fi
