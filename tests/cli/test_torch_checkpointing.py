"""test_torch_checkpointing.py — checkpoints written by the real torch-checkpointing
(tests/fixtures/torch-checkpointing/, made by generate_torch_checkpointing.py) read by `ckpt`
and mounted by ckptfs, against what torch-checkpointing's own load returns
(reference.json): every tensor's bytes, every value's repr; damaged metadata.pkl and data
files refused with a message naming the file.

Environment: CKPT_BIN, CKPTFS_BIN (as in test_cli.py).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import struct
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

BIN = os.environ.get("CKPT_BIN")
FS_BIN = os.environ.get("CKPTFS_BIN")
if not BIN:
    pytest.skip("CKPT_BIN is not set (run through meson test)", allow_module_level=True)

# CKPT_TC_FIXTURES: fixtures generated afresh (tools/run-tests.sh), else the committed ones
FIXTURES = Path(os.environ.get("CKPT_TC_FIXTURES") or
                Path(__file__).resolve().parents[1] / "fixtures" / "torch-checkpointing")
NAMES = sorted(p.name for p in FIXTURES.iterdir() if (p / "reference.json").is_file())


def ckpt(*args, **kw):
    return subprocess.run([BIN, *map(str, args)], capture_output=True, timeout=120, **kw)


def reference(name: str) -> dict:
    return json.loads((FIXTURES / name / "reference.json").read_text(encoding="utf-8"))


def test_fixtures_exist():
    assert NAMES == ["tc_sharded", "tc_single"], NAMES


@pytest.mark.parametrize("name", NAMES)
def test_every_leaf_equals_the_libraries_load(name):
    ref = reference(name)
    d = FIXTURES / name / "ckpt"
    ls = ckpt("ls", "-R", d)
    assert ls.returncode == 0, ls.stderr
    listed = set(ls.stdout.decode().split("\n"))
    tensors = 0
    for e in ref["entries"]:
        path = "/".join(map(str, e["path"]))
        assert path in listed, (path, ls.stdout.decode())
        r = ckpt("cat", "-f", "--path", d, path)
        assert r.returncode == 0, (path, r.stderr)
        if e["kind"] == "tensor":
            assert r.stdout == bytes.fromhex(e["hex"]), path
            tensors += 1
        else:
            assert r.stdout.decode().strip() == e["repr"], path
    assert tensors >= 20
    info = ckpt("info", d).stdout.decode()
    assert "torch-checkpointing" in info and f"entries:         {len(ref['entries'])} " in info, \
        info
    if name == "tc_sharded":
        assert "ranks:           2" in info, info
    v = ckpt("verify", d)
    assert v.returncode == 0, v.stdout + v.stderr


def test_sharded_tensors_have_their_global_shape_and_replicas_once():
    """FSDP2 keeps dim-0 shards on both ranks: two chunks; a Replicate DTensor and a plain
    tensor (saved as replicated) are stored by both ranks and indexed once."""
    d = FIXTURES / "tc_sharded" / "ckpt"
    ref = {"/".join(map(str, e["path"])): e for e in reference("tc_sharded")["entries"]}
    for path in ["model/0.weight", "misc/cols", "misc/rep", "misc/plain", "misc/list/0",
                 "misc/strided"]:
        r = ckpt("cat", "-f", "--path", d, path)
        assert r.returncode == 0 and r.stdout == bytes.fromhex(ref[path]["hex"]), path
    # 46 entries: 30 tensors (the 0-d optimizer `step`s, `rep` and `plain` stored once though
    # both ranks saved them; `strided` in four boxes, two per rank; the others in two shards),
    # 16 values
    v = ckpt("verify", d).stdout.decode()
    assert "46 entries" in v and "53 chunks" in v, v


def test_strided_shard_is_the_saved_tensor():
    """_StridedShard(0, split_factor=2) over 2 ranks: rank 0 holds rows 0-1 and 4-5.  ckpt
    gives the tensor that was saved (DTensor.full_tensor()); torch-checkpointing 0.1.1's own
    load of it is wrong (reference.json keeps both)."""
    d = FIXTURES / "tc_sharded" / "ckpt"
    e = next(e for e in reference("tc_sharded")["entries"] if e["path"] == ["misc", "strided"])
    r = ckpt("cat", "-f", "--path", d, "misc/strided")
    assert r.returncode == 0 and r.stdout == bytes.fromhex(e["hex"])
    assert r.stdout == b"".join(struct.pack("<f", float(i)) for i in range(16))
    assert e.get("library_load_hex", e["hex"]) != e["hex"] or "library_defect" not in e


def damaged(tmp: Path, name: str) -> Path:
    dst = tmp / name
    shutil.copytree(FIXTURES / name / "ckpt", dst)
    return dst


def test_truncated_metadata_names_the_file(tmp_path):
    d = damaged(tmp_path, "tc_sharded")
    blob = (d / "metadata.pkl").read_bytes()
    for cut in (0, 1, len(blob) // 2, len(blob) - 1):
        (d / "metadata.pkl").write_bytes(blob[:cut])
        r = ckpt("ls", d)
        assert r.returncode == 1, (cut, r.stdout)
        assert b"metadata.pkl" in r.stderr, (cut, r.stderr)


def test_garbled_metadata_names_the_file(tmp_path):
    d = damaged(tmp_path, "tc_sharded")
    for blob in (b"\x80\x04garbage" * 7, pickle.dumps([1, 2, 3]),
                 pickle.dumps({"metadata": {}, "world_size": 2, "version": "9.0"}),
                 pickle.dumps({"metadata": [], "world_size": 2, "version": "2.0"}),
                 pickle.dumps({"metadata": {"model": {"nested_path_to_metadata": {"not json": []},
                                                      "rank_to_layout_info": {0: None, 1: None}}},
                               "world_size": 2, "version": "2.0"}),
                 pickle.dumps({"metadata": {}, "world_size": -3, "version": "2.0"})):
        (d / "metadata.pkl").write_bytes(blob)
        r = ckpt("ls", d)
        assert r.returncode == 1 and b"metadata.pkl" in r.stderr, (blob[:40], r.stderr)


def test_a_pickled_call_is_never_made(tmp_path):
    """metadata.pkl calling os.system: decoded as data, refused as a malformed dict."""
    d = damaged(tmp_path, "tc_sharded")
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))
    (d / "metadata.pkl").write_bytes(pickle.dumps({"metadata": Evil(), "world_size": 2,
                                                   "version": "2.0"}))
    r = ckpt("ls", d)
    assert r.returncode == 1 and b"metadata.pkl" in r.stderr, r.stderr
    assert not marker.exists()


def test_missing_or_damaged_rank_file_names_it(tmp_path):
    d = damaged(tmp_path, "tc_sharded")
    (d / "model_1.pt").unlink()
    r = ckpt("ls", d)
    assert r.returncode == 1 and b"model_1.pt" in r.stderr, r.stderr
    d = damaged(tmp_path / "b", "tc_sharded")
    blob = (d / "optim_1.pt").read_bytes()
    (d / "optim_1.pt").write_bytes(blob[: len(blob) // 3])
    r = ckpt("ls", d)
    assert r.returncode == 1 and b"optim_1.pt" in r.stderr, r.stderr


def test_other_serialization_formats_are_refused_by_name(tmp_path):
    """A custom layout in JSON (or raw bytes, or safetensors) is not read: the open fails
    naming metadata.pkl, the item, the rank and the file."""
    d = damaged(tmp_path, "tc_sharded")
    md = pickle.loads((d / "metadata.pkl").read_bytes())  # our own fixture
    md["metadata"]["misc"]["rank_to_layout_info"][1] = {
        "file_path": "misc_1.json", "serialization_format": {"type": "JsonSerialization"}}
    (d / "metadata.pkl").write_bytes(pickle.dumps(md))
    r = ckpt("ls", d)
    err = r.stderr.decode()
    assert r.returncode == 1 and "metadata.pkl" in err and "misc_1.json" in err \
        and "JsonSerialization" in err, err


def test_metadata_whose_shapes_disagree_with_the_files(tmp_path):
    """A global shape metadata.pkl changed: the tensor is reported, the rest still reads."""
    d = damaged(tmp_path, "tc_sharded")
    md = pickle.loads((d / "metadata.pkl").read_bytes())  # our own fixture
    g = md["metadata"]["misc"]["nested_path_to_metadata"]['["cols"]'][0]
    g["sharding_metadata"]["data"]["global_shape"] = [4, 9]
    (d / "metadata.pkl").write_bytes(pickle.dumps(md))
    r = ckpt("verify", d)
    assert r.returncode != 0 and b"misc.cols" in r.stdout + r.stderr, r.stdout
    r = ckpt("cat", "-f", "--path", d, "misc/rep")
    assert r.returncode == 0 and len(r.stdout) == 16


@pytest.mark.skipif(not FS_BIN, reason="ckptfs not built")
@pytest.mark.parametrize("name", NAMES)
def test_mount_reads_every_entry_file(name, tmp_path):
    ref = reference(name)
    src = tmp_path / "ck"
    shutil.copytree(FIXTURES / name / "ckpt", src)
    src.chmod(0o755)
    if name == "tc_single":  # unmarked (no metadata.pkl): settled once unchanged for a while
        old = time.time() - 3600
        for p in src.iterdir():
            os.utime(p, (old, old))
    mnt = Path(tempfile.mkdtemp(prefix="ckpt-tc-mnt-"))
    proc = subprocess.Popen([FS_BIN, "-f", str(src), str(mnt)], stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 30
        while not os.path.ismount(mnt):
            assert proc.poll() is None and time.time() < deadline, proc.stderr.read()
            time.sleep(0.05)
        for e in ref["entries"]:
            f = mnt.joinpath(*map(str, e["path"]))
            if e["kind"] == "tensor":
                assert f.read_bytes() == bytes.fromhex(e["hex"]), e["path"]
            else:
                assert f.read_text().strip() == e["repr"], e["path"]
        assert (mnt / ".raw" / "model_0.pt").read_bytes() == (src / "model_0.pt").read_bytes()
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)])
        proc.wait(timeout=60)
        os.rmdir(mnt)


def test_diff_and_export(tmp_path):
    """ckpt diff of the checkpoint with itself: all the same; ckpt export writes every tensor
    whole, named by its path, with the bytes the library's load gives."""
    d = FIXTURES / "tc_sharded" / "ckpt"
    r = ckpt("diff", d, d)
    assert r.returncode == 0 and b"46 same, 0 changed" in r.stdout, r.stdout
    ref = {"/".join(map(str, e["path"])): e for e in reference("tc_sharded")["entries"]
           if e["kind"] == "tensor"}
    out = tmp_path / "all.safetensors"
    r = ckpt("export", d, out)
    assert r.returncode == 0, r.stderr
    blob = out.read_bytes()
    n = struct.unpack_from("<Q", blob)[0]
    header = json.loads(blob[8:8 + n])
    header.pop("__metadata__", None)
    assert sorted(header) == sorted(ref)
    for k, h in header.items():
        a, b = h["data_offsets"]
        assert blob[8 + n + a:8 + n + b] == bytes.fromhex(ref[k]["hex"]), k


@pytest.mark.skipif(not FS_BIN, reason="ckptfs not built")
def test_run_directory_of_steps(tmp_path):
    """Steps saved by torch-checkpointing under one run directory: metadata.pkl marks each
    complete; `latest` is the newest; RUN@latest reads through it with ckpt too."""
    run = tmp_path / "run"
    run.mkdir()
    run.chmod(0o755)
    for step in ("step-100", "step-200"):
        shutil.copytree(FIXTURES / "tc_sharded" / "ckpt", run / step)
    ref = {"/".join(map(str, e["path"])): e for e in reference("tc_sharded")["entries"]}
    r = ckpt("cat", "-f", "--path", f"{run}@latest", "misc/strided")
    assert r.returncode == 0 and r.stdout == bytes.fromhex(ref["misc/strided"]["hex"]), r.stderr
    mnt = Path(tempfile.mkdtemp(prefix="ckpt-tc-mnt-"))
    proc = subprocess.Popen([FS_BIN, "-f", str(run), str(mnt)], stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 30
        while not os.path.ismount(mnt):
            assert proc.poll() is None and time.time() < deadline, proc.stderr.read()
            time.sleep(0.05)
        assert sorted(p.name for p in mnt.iterdir()) == ["latest", "step-100", "step-200"]
        assert os.readlink(mnt / "latest") == "step-200"
        f = mnt / "latest" / "optim" / "state" / "0" / "exp_avg"
        assert f.read_bytes() == bytes.fromhex(ref["optim/state/0/exp_avg"]["hex"])
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)])
        proc.wait(timeout=60)
        os.rmdir(mnt)
