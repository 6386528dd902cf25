"""test_install.py — the installable library (issue #21 item 1): `meson install` into a
DESTDIR, then programs built with the installed headers and `pkg-config` alone:
reader_demo.c (pkg-config ckpt) reads every tensor of a torch-written fixture and its
checksums equal torch's reference bytes; transport_demo.c (pkg-config ckpt-load-core, no MPI)
loads every tensor with the collective loader over a one-rank transport of its own, with the
same checksums; load_demo.c (pkg-config ckpt-load, MPI builds) loads Shard(0) slices under
mpirun.  libckpt_load does not link MPI.  The shared libraries carry a versioned soname and export the
functions the installed headers declare and nothing else (the internal ckpt_* functions stay
local).

Environment: CKPT_BUILD_ROOT (the meson build directory), CKPT_SOURCE_ROOT."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

BUILD = os.environ.get("CKPT_BUILD_ROOT")
SRC = Path(os.environ.get("CKPT_SOURCE_ROOT") or Path(__file__).resolve().parents[2])
FIXTURES = SRC / "tests" / "fixtures" / "data"
SANITIZE = os.environ.get("CKPT_SANITIZE", "none")
CC_SAN = [] if SANITIZE in ("", "none") else [f"-fsanitize={SANITIZE}"]
if not BUILD or not shutil.which("pkg-config"):
    pytest.skip("needs CKPT_BUILD_ROOT and pkg-config", allow_module_level=True)


def checksum(raw: bytes) -> int:
    s = 0
    for b in raw:  # the same position-weighted sum as the demos, modulo 2^64
        s = (s * 31 + b) & 0xFFFFFFFFFFFFFFFF
    return s


@pytest.fixture(scope="module")
def dest(tmp_path_factory):
    d = tmp_path_factory.mktemp("destdir")
    r = subprocess.run(["meson", "install", "-C", BUILD, "--destdir", str(d), "--no-rebuild",
                        "--quiet"], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    return d


def pkgconfig(dest: Path, *args: str) -> list[str]:
    """pkg-config on the installed .pc files, their prefix moved into DESTDIR (as a package
    manager's staging would; the system's own .pc files, MPI's, stay as they are)."""
    pcs = sorted(p for p in dest.rglob("ckpt.pc") if p.parent.name == "pkgconfig")
    assert len(pcs) == 1, pcs
    moved = dest / "pc-moved"
    moved.mkdir(exist_ok=True)
    for pc in pcs[0].parent.glob("*.pc"):
        text = re.sub(r"^prefix=(.*)$", lambda m: f"prefix={dest}{m.group(1)}", pc.read_text(),
                      flags=re.M)
        (moved / pc.name).write_text(text)
    env = dict(os.environ, PKG_CONFIG_PATH=str(moved))
    r = subprocess.run(["pkg-config", *args], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def libdir(dest: Path) -> Path:
    return next(dest.rglob("libckpt.so")).parent


def test_installed_layout(dest):
    lib = libdir(dest)
    assert (lib / "libckpt.so").is_symlink() and os.readlink(lib / "libckpt.so") == "libckpt.so.0"
    for h in ("ckpt.h", "ckpt_tree.h", "ckpt_manifest.h", "ckpt_save.h"):
        assert next(dest.rglob(h), None), h
    for b in ("ckpt", "ckptfs"):
        assert next(dest.rglob(f"bin/{b}"), None) or b == "ckptfs" and not shutil.which(
            "fusermount3"), b
    assert next(dest.rglob("ckpt.1"), None) and next(dest.rglob("ckpt-save.pc"), None)


def exported(so: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True,
                         text=True, check=True).stdout
    return {ln.split()[-1].split("@")[0] for ln in out.splitlines()
            if ln.split()[-2:-1] == ["T"]}


def declared(*headers: Path) -> set[str]:
    names = set()
    for h in headers:
        text = re.sub(r"/\*.*?\*/", "", h.read_text(), flags=re.S)
        names |= set(re.findall(r"^(?!static|typedef|#)[A-Za-z_][\w\s\*]*?\b(ckpt_\w+)\s*\(",
                                text, flags=re.M))
    return names


def test_only_the_public_api_is_exported(dest):
    inc = SRC / "include"
    core = declared(inc / "ckpt.h", inc / "ckpt_tree.h", inc / "ckpt_manifest.h",
                    inc / "ckpt_save.h")
    got = exported(libdir(dest) / "libckpt.so")
    assert got and got <= core, sorted(got - core)[:20]
    assert "ckpt_reader_open" in got and "ckpt_save_begin" in got
    assert not {"ck_fail", "ck_arena_alloc", "ck_files_fd"} & got
    loader = core | declared(inc / "ckpt_load.h")
    got = exported(libdir(dest) / "libckpt_load.so")
    assert got <= loader, sorted(got - loader)[:20]
    assert "ckpt_load_open_transport" in got and "ckpt_reader_open" in got
    assert "ckpt_load_open" not in got and "load_agree" not in got
    mpi = libdir(dest) / "libckpt_mpi.so"
    if mpi.exists():
        got = exported(mpi)
        allowed = loader | declared(inc / "ckpt_load_mpi.h", inc / "ckpt_save_mpi.h")
        assert got <= allowed, sorted(got - allowed)[:20]
        assert {"ckpt_load_open", "ckpt_load_open_transport", "ckpt_transport_mpi_new",
                "ckpt_reader_open"} <= got


def needed(so: Path) -> list[str]:
    out = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True,
                         check=True).stdout
    return re.findall(r"\(NEEDED\).*\[(.*)\]", out)


def test_the_loader_core_links_no_mpi(dest):
    libs = needed(libdir(dest) / "libckpt_load.so")
    assert libs and not [n for n in libs if "mpi" in n], libs
    for h in ("ckpt_load.h", "ckpt_transport.h"):
        text = next(dest.rglob(h)).read_text()
        assert "#include <mpi.h>" not in text and '#include "ckpt_load_mpi.h"' not in text, h


def build_demo(dest: Path, tmp_path: Path, name: str, package: str) -> Path:
    """tests/install/NAME.c compiled and linked with `pkg-config PACKAGE` alone."""
    exe = tmp_path / name
    r = subprocess.run(["cc", "-std=c17", "-Wall", "-Werror", *CC_SAN,
                        *pkgconfig(dest, "--cflags", package),
                        str(SRC / "tests" / "install" / f"{name}.c"), "-o", str(exe),
                        *pkgconfig(dest, "--libs", package)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return exe


def test_a_program_built_with_pkg_config_reads_a_checkpoint(dest, tmp_path):
    exe = build_demo(dest, tmp_path, "reader_demo", "ckpt")
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir(dest)))
    fx = FIXTURES / "fsdp2_ws4"
    r = subprocess.run([str(exe), str(fx / "ckpt")], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    blob = (fx / "reference.bin").read_bytes()
    want = {}
    for line in (fx / "reference.tsv").read_text().splitlines():
        f = line.split("\t")
        if f[0] == "T":
            raw = blob[int(f[4]):int(f[4]) + int(f[5])]
            want[f[1]] = (f[2], len(raw), checksum(raw))
    got = {}
    for line in r.stdout.splitlines():
        key, dtype, n, s = line.split("\t")
        got[key] = (dtype, int(n), int(s))
    assert got == want


def test_a_program_with_its_own_transport_loads_without_mpi(dest, tmp_path):
    exe = build_demo(dest, tmp_path, "transport_demo", "ckpt-load-core")
    assert not [n for n in needed(exe) if "mpi" in n], needed(exe)
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir(dest)))
    fx = FIXTURES / "fsdp2_ws4"
    r = subprocess.run([str(exe), str(fx / "ckpt")], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    blob = (fx / "reference.bin").read_bytes()
    want = {}
    for line in (fx / "reference.tsv").read_text().splitlines():
        f = line.split("\t")
        if f[0] == "T":
            raw = blob[int(f[4]):int(f[4]) + int(f[5])]
            want[f[1]] = (f[2], len(raw), checksum(raw))
    got = {}
    for line in r.stdout.splitlines():
        key, dtype, n, s = line.split("\t")
        got[key] = (dtype, int(n), int(s))
    assert got == want and len(got) > 5


def test_an_mpi_program_built_with_pkg_config_loads(dest, tmp_path):
    if not (libdir(dest) / "libckpt_mpi.so").exists() or not shutil.which("mpirun"):
        pytest.skip("not an MPI build")
    exe = build_demo(dest, tmp_path, "load_demo", "ckpt-load")
    fx = FIXTURES / "fsdp2_ws4"
    key, shape, raw = None, None, None
    blob = (fx / "reference.bin").read_bytes()
    for line in (fx / "reference.tsv").read_text().splitlines():
        f = line.split("\t")
        if f[0] == "T" and f[2] == "float32" and f[3].count(",") == 1:
            key, shape = f[1], tuple(int(x) for x in f[3].split(","))
            raw = blob[int(f[4]):int(f[4]) + int(f[5])]
            break
    assert key
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir(dest)))
    if CC_SAN:  # Open MPI's own allocations (its components are unloaded: no stack to
        # suppress them by); the library's leaks are checked by the MPI suites' leak runs
        env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=1"
    r = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "3", str(exe),
                        str(fx / "ckpt"), key], capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    a = np.frombuffer(raw, dtype=np.float32).reshape(shape)
    rows = -(-shape[0] // 3)
    want = {k: a[k * rows:(k + 1) * rows].tobytes() for k in range(3)}
    got = {int(ln.split("\t")[0].split()[1]): ln.split("\t")[1:] for ln in r.stdout.splitlines()}
    assert got == {k: [str(len(w)), str(checksum(w))] for k, w in want.items()}
