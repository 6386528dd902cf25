"""The Python package as a user gets it: `python3 -m pip install ./python` into a fresh venv
(with the system's site-packages for torch and the build tools; --no-build-isolation and
--no-index, so nothing is downloaded), then the package suite (test_reader.py, test_dcp.py,
test_dist.py, test_load.py) run by that venv's Python against the installed package.

Environment (set by meson): CKPT_SOURCE_ROOT, CKPT_BUILD_ROOT; CKPT_FIXTURES(_DEFAULT) and
CKPT_BIN are passed on to the suite; CKPT_PACKAGE_K=EXPR runs only the suite's tests pytest's
`-k EXPR` selects (a check by hand; the install is the same)."""

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

SOURCE = Path(os.environ.get("CKPT_SOURCE_ROOT") or Path(__file__).resolve().parents[2])
BUILD = Path(os.environ.get("CKPT_BUILD_ROOT") or SOURCE / "build")
VENV = BUILD / "tests" / "python" / "venv"
PY = VENV / "bin" / "python"
HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    shutil.rmtree(VENV, ignore_errors=True)
    # without its own pip: the system's (from the system site-packages) installs into it
    venv.create(VENV, system_site_packages=True, with_pip=False)
    env = dict(os.environ, CKPTFS_BUILD_DIR=str(BUILD / "python-libckpt"),
               CKPTFS_BUILD_JOBS="2", PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("CKPTFS_LIBCKPT", None)
    p = subprocess.run([PY, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                        SOURCE / "python"], env=env, capture_output=True, text=True,
                       timeout=900)
    assert p.returncode == 0, \
        f"pip install ./python failed:\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}"
    return tmp_path_factory.mktemp("cwd")  # a neutral working directory


def venv_env():
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("CKPTFS_LIBCKPT", None)
    env.pop("PYTHONPATH", None)
    return env


def test_import_from_the_venv(installed):
    code = ("import ckptfs, ckptfs.dcp, sys, os; "
            "assert ckptfs.__file__.startswith(sys.prefix), ckptfs.__file__; "
            "assert os.path.isfile(ckptfs.library_path), ckptfs.library_path; "
            "print(ckptfs.__version__, ckptfs.library_path)")
    p = subprocess.run([PY, "-c", code], cwd=installed, env=venv_env(), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    version, lib = p.stdout.split()
    assert lib.startswith(str(VENV)) and lib.endswith("libckpt_load.so.0")
    meson = (SOURCE / "meson.build").read_text()
    assert f"version : '{version}'" in meson


def test_the_system_python_does_not_see_it():
    """(the suite below really runs against the venv's copy)"""
    assert not any(Path(p).resolve() == VENV.resolve() for p in sys.path)


def test_suite_against_the_installed_package(installed):
    files = [HERE / f for f in ("test_reader.py", "test_dcp.py", "test_dist.py",
                                "test_load.py", "test_torch_checkpointing.py")]
    k = os.environ.get("CKPT_PACKAGE_K")
    select = ["-k", k] if k else []
    # -p no:warnings and --tb=short keep the failures, not torch's warnings, in the tail that
    # a CI log shows; the failing tests' summary lines go into the assertion message too.
    # --rootdir: pytest otherwise collects from the common ancestor of the cwd and the files
    # (/tmp for a checkout under /tmp), stat'ing every directory there: one dead FUSE mount
    # in /tmp failed the whole collection ("found no collectors")
    p = subprocess.run([PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:warnings",
                        "-rfEs", "--tb=short", f"--rootdir={HERE}"] + select + files,
                       cwd=installed, env=venv_env(), capture_output=True, text=True,
                       timeout=900)
    print(p.stdout[-20000:])
    print(p.stderr[-4000:], file=sys.stderr)
    failed = [ln for ln in p.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    assert p.returncode == 0, "the package suite failed:\n" + "\n".join(failed)
