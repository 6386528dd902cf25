"""Builds the ckptfs wheel: the pure-Python package plus libckpt_load.so.0, compiled from the C
sources of the ckptfs checkout this directory belongs to (`..`), with meson and ninja.

pip builds a local directory in place (pip >= 21.3), so `..` is the checkout.  The library is
built with the optional parts off (no FUSE, MPI, CUDA, tests): the reader, the value decoder,
manifests, and the collective loader over a caller-supplied transport (libckpt_load, which
ckptfs.load drives over torch.distributed).  CKPTFS_SOURCE_ROOT overrides where the checkout is; CKPTFS_MESON_ARGS adds meson
options (space separated); CKPTFS_BUILD_DIR is meson's build directory (default
python/build/libckpt, kept between builds); CKPTFS_BUILD_JOBS caps ninja's parallel jobs."""

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
LIBNAME = "libckpt_load.so.0"


def source_root() -> Path:
    root = Path(os.environ.get("CKPTFS_SOURCE_ROOT", HERE.parent)).resolve()
    if not (root / "meson.build").is_file() or not (root / "include" / "ckpt.h").is_file():
        raise SystemExit(
            f"ckptfs: {root} is not a ckptfs checkout (no meson.build, include/ckpt.h); "
            "build the package from python/ inside the checkout (pip >= 21.3 builds in place) "
            "or set CKPTFS_SOURCE_ROOT")
    return root


def project_version() -> str:
    text = (source_root() / "meson.build").read_text()
    m = re.search(r"project\([^)]*?version\s*:\s*'([^']+)'", text, re.S)
    if not m:
        raise SystemExit("ckptfs: no version in meson.build's project()")
    return m.group(1)


def run(cmd):
    print("ckptfs:", " ".join(shlex.quote(str(c)) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True)


class BuildWithLibckpt(build_py):
    """build_py, plus libckpt_load.so.0 built by meson and copied into the package."""

    def run(self):
        super().run()
        for tool in ("meson", "ninja"):
            if not shutil.which(tool):
                raise SystemExit(f"ckptfs: `{tool}` not found: run tools/install-deps.sh first")
        root = source_root()
        build = Path(os.environ.get("CKPTFS_BUILD_DIR", HERE / "build" / "libckpt")).resolve()
        version = project_version()
        info = build / "meson-info" / "meson-info.json"
        if info.is_file():  # a build directory of another checkout (moved, copied): start over
            try:
                src = json.loads(info.read_text())["directories"]["source"]
            except (ValueError, KeyError):
                src = None
            if src is None or Path(src).resolve() != root:
                shutil.rmtree(build)
        if not (build / "build.ninja").is_file():
            run(["meson", "setup", build, root, "--buildtype=release", "-Db_ndebug=if-release",
                 "-Dfuse=disabled", "-Dmpi=disabled", "-Dcuda=disabled", "-Dnccl=disabled",
                 "-Dtests=disabled", "-Dfuzz=false", "--wrap-mode=nodownload"]
                + shlex.split(os.environ.get("CKPTFS_MESON_ARGS", "")))
        target = f"src/libckpt_load.so.{version}"
        jobs = os.environ.get("CKPTFS_BUILD_JOBS")
        run(["ninja", "-C", build] + (["-j", jobs] if jobs else []) + [target])
        dest = Path(self.build_lib) / "ckptfs" / LIBNAME
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(build / target, dest)  # the file itself, not the soname link
        (Path(self.build_lib) / "ckptfs" / "_version.py").write_text(
            f'__version__ = "{version}"\n')


class BinaryDistribution(Distribution):
    """The wheel holds a native library: platform-specific (not Python-ABI specific)."""

    def has_ext_modules(self):
        return True


cmdclass = {"build_py": BuildWithLibckpt}
try:
    try:
        from setuptools.command.bdist_wheel import bdist_wheel
    except ImportError:  # setuptools < 70.1
        from wheel.bdist_wheel import bdist_wheel

    class PlatformWheel(bdist_wheel):
        def get_tag(self):
            _, _, plat = super().get_tag()
            return "py3", "none", plat  # ctypes: any CPython 3, this platform

    cmdclass["bdist_wheel"] = PlatformWheel
except ImportError:
    pass

setup(version=project_version(), cmdclass=cmdclass, distclass=BinaryDistribution)
