"""test_seal.py — integrity manifests: `ckpt seal`, `ckpt verify --data` and the mount's
`-o verify` against byte flips that only a hash can see (inside tensor data, where every
structural check still passes), a damaged manifest, and a checkpoint without one.

Environment: CKPT_BIN, CKPTFS_BIN (optional: the mount part is skipped without it),
CKPT_FIXTURES / CKPT_FIXTURES_DEFAULT."""

from __future__ import annotations

import errno
import json
import os
import shutil
import struct
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

BIN = os.environ.get("CKPT_BIN")
FS_BIN = os.environ.get("CKPTFS_BIN")
FIXTURES = Path(os.environ.get("CKPT_FIXTURES") or os.environ.get("CKPT_FIXTURES_DEFAULT")
                or Path(__file__).resolve().parents[1] / "fixtures" / "data")
if not BIN:
    pytest.skip("CKPT_BIN is not set (run through meson test)", allow_module_level=True)


def ckpt(*args, check=None):
    r = subprocess.run([BIN, *map(str, args)], capture_output=True, text=True, timeout=120)
    if check is not None:
        assert r.returncode == check, (args, r.returncode, r.stdout, r.stderr)
    return r


def tensor_chunk(fixture: Path):
    """(path under the mount, file, absolute offset of its first data byte) of the first
    tensor chunk with data, from torch's own description of the fixture."""
    meta = json.loads((fixture / "reference.json").read_text())
    for e in meta["entries"]:
        if e.get("kind") != "tensor" or not e.get("path"):
            continue
        for c in e["chunks"]:
            st = c.get("storage") or {}
            if st.get("data_size"):
                path = "/".join(str(x) for x in e["path"])
                return path, st["file"], st["offset"] + st["data_offset"]
    raise AssertionError("no tensor chunk with data")


def flip(path: Path, offset: int):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x40]))


@pytest.fixture
def sealed(tmp_path):
    src = FIXTURES / "fsdp2_ws2"
    ck = tmp_path / "ck"
    shutil.copytree(src / "ckpt", ck)
    r = ckpt("seal", ck, check=0)
    assert "sealed" in r.stdout and (ck / ".ckptfs-manifest").is_file()
    return ck, src


def test_seal_then_verify_passes(sealed):
    ck, _ = sealed
    r = ckpt("verify", "--data", "--json", ck, check=0)
    doc = json.loads(r.stdout)
    assert doc["ok"] and doc["hashed"] > doc["chunks"] // 2


def test_flipped_data_byte_is_caught_only_by_hashes(sealed):
    ck, src = sealed
    path, file, off = tensor_chunk(src)
    flip(ck / file, off)
    ckpt("verify", ck, check=0)  # structure is intact: only the hash can tell
    r = ckpt("verify", "--data", ck, check=1)
    assert file in r.stdout and "hash" in r.stdout and "manifest" in r.stdout, r.stdout


@pytest.mark.parametrize("name", ["hf_full", "hf_sharded"])
def test_seal_huggingface_storage(tmp_path, name):
    """HuggingFace storage: the manifest covers each tensor's own bytes (not the rest of its
    file), every file's header (dtypes, shapes, offsets: no metadata pickle holds them) and
    the index json; a flip in any of them is found by the hashes alone."""
    if not (FIXTURES / name / "ckpt").is_dir():
        pytest.skip(f"fixture {name} is not in {FIXTURES}")
    meta = json.loads((FIXTURES / name / "reference.json").read_text())
    ck = tmp_path / "ck"
    shutil.copytree(FIXTURES / name / "ckpt", ck)
    ckpt("seal", ck, check=0)
    doc = json.loads(ckpt("verify", "--data", "--json", ck, check=0).stdout)
    assert doc["ok"], doc
    heads = meta["checkpoint"]["safetensors_headers"]
    # the records (docs/manifest.md): each file's header, each stored tensor's own bytes, the
    # index json -- together every byte of these files, each once
    raw = (ck / ".ckptfs-manifest").read_bytes()
    nfiles, nrec = struct.unpack_from("<I", raw, 16)[0], struct.unpack_from("<Q", raw, 24)[0]
    pos, names = 32, []
    for _ in range(nfiles):
        k = struct.unpack_from("<I", raw, pos)[0]
        names.append(raw[pos + 4:pos + 4 + k].decode())
        pos += 4 + k
    recs = sorted((names[struct.unpack_from("<I", raw, pos + 32 * i)[0]],
                   *struct.unpack_from("<QQ", raw, pos + 32 * i + 8)) for i in range(nrec))
    want = [(f, 0, 8 + h["header_len"]) for f, h in heads.items()]
    want += [(c["storage"]["file"], c["storage"]["offset"], c["storage"]["length"])
             for e in meta["entries"] for c in e["chunks"] if all(c["sizes"])]
    index = ck / "model.safetensors.index.json"
    if meta["checkpoint"]["hf_index_json"]:
        want.append((index.name, 0, index.stat().st_size))
    assert recs == sorted(want)
    assert sum(r[2] for r in recs) == sum((ck / f).stat().st_size for f in heads) + (
        index.stat().st_size if index.exists() else 0)
    first = sorted(heads)[0]
    header = (ck / first).read_bytes()[:8 + heads[first]["header_len"]]
    for what, off in [("data", len(header) + 1), ("header", header.index(b'"pt"') + 1)]:
        flip(ck / first, off)
        ckpt("verify", ck, check=0)  # still well-formed: only the hash can tell
        r = ckpt("verify", "--data", ck, check=1)
        assert first in r.stdout and "hash" in r.stdout, (what, r.stdout)
        flip(ck / first, off)
        ckpt("verify", "--data", ck, check=0)


def test_damaged_or_missing_manifest(sealed):
    ck, _ = sealed
    man = ck / ".ckptfs-manifest"
    data = bytearray(man.read_bytes())
    data[40] ^= 1
    man.write_bytes(bytes(data))
    r = ckpt("verify", "--data", ck, check=1)
    assert ".ckptfs-manifest" in r.stdout and "damaged" in r.stdout
    man.write_bytes(bytes(data[:20]))
    r = ckpt("verify", "--data", ck, check=1)
    assert ".ckptfs-manifest" in r.stdout
    man.unlink()
    r = ckpt("verify", "--data", ck, check=0)
    assert "no .ckptfs-manifest" in r.stderr


def test_seal_refuses_incomplete(sealed):
    ck, _ = sealed
    victim = sorted(ck.glob("*.distcp"))[0]
    victim.write_bytes(victim.read_bytes()[:100])
    r = ckpt("seal", ck, check=1)
    assert victim.name in r.stderr and "not sealed" in r.stderr


@pytest.mark.skipif(not FS_BIN or not os.path.exists("/dev/fuse"), reason="no ckptfs / FUSE")
def test_mount_verify_gives_eio_on_the_flipped_tensor_only(sealed):
    ck, src = sealed
    path, file, off = tensor_chunk(src)
    flip(ck / file, off)
    mnt = Path(tempfile.mkdtemp())
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen([FS_BIN, "-f", "-o", "verify", str(ck), str(mnt)], stderr=log)
    try:
        deadline = time.time() + 30
        while not os.path.ismount(mnt):
            assert proc.poll() is None and time.time() < deadline
            time.sleep(0.02)
        with pytest.raises(OSError) as e:
            (mnt / path).read_bytes()
        assert e.value.errno == errno.EIO
        ok = 0
        for line in (src / "reference.tsv").read_text().splitlines():
            f = line.split("\t")
            if f[0] == "T" and f[-1] != path:
                try:
                    (mnt / f[-1]).read_bytes()
                    ok += 1
                except OSError as err:  # another tensor sharing the damaged chunk item
                    assert err.errno == errno.EIO
        assert ok > 10
        assert (mnt / ".raw" / file).read_bytes() == (ck / file).read_bytes()  # raw: as stored
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)])
        proc.wait(timeout=60)
    log.seek(0)
    text = log.read().decode()
    assert file in text and "manifest" in text, text
    # without a manifest, -o verify refuses to mount
    (ck / ".ckptfs-manifest").unlink()
    r = subprocess.run([FS_BIN, "-o", "verify", str(ck), str(mnt)], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode != 0 and "ckpt seal" in r.stderr, r.stderr
    assert not os.path.ismount(mnt)
    os.rmdir(mnt)


def test_safetensors_format_items_are_covered(tmp_path):
    """In torch's safetensors serialization every tensor's recorded range starts at the blob;
    the manifest covers the whole blob, so a flipped tensor byte is caught."""
    ck = tmp_path / "st"
    shutil.copytree(FIXTURES / "safetensors_fmt" / "ckpt", ck)
    ckpt("seal", ck, check=0)
    ckpt("verify", "--data", ck, check=0)
    if FS_BIN and os.path.exists("/dev/fuse"):  # -o verify hashes whole blobs: every file reads
        mnt = Path(tempfile.mkdtemp())
        proc = subprocess.Popen([FS_BIN, "-f", "-o", "verify", str(ck), str(mnt)])
        try:
            deadline = time.time() + 30
            while not os.path.ismount(mnt):
                assert proc.poll() is None and time.time() < deadline
                time.sleep(0.02)
            n = 0
            for line in (FIXTURES / "safetensors_fmt" / "reference.tsv").read_text().splitlines():
                f = line.split("\t")
                if f[0] == "T" and "%" not in f[-1]:
                    (mnt / f[-1]).read_bytes()
                    n += 1
            assert n > 3
        finally:
            subprocess.run(["fusermount3", "-u", str(mnt)])
            proc.wait(timeout=60)
            os.rmdir(mnt)
    victim = max(ck.glob("*.distcp"), key=lambda p: p.stat().st_size)
    flip(victim, victim.stat().st_size - 5)  # inside the last tensor's data
    r = ckpt("verify", "--data", ck, check=1)
    assert victim.name in r.stdout and "manifest" in r.stdout, r.stdout
