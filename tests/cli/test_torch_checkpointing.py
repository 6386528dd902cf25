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
    assert NAMES == ["tc_layouts", "tc_mesh2d", "tc_sharded", "tc_single"], NAMES


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
    assert tensors >= 10
    info = ckpt("info", d).stdout.decode()
    assert "torch-checkpointing" in info and f"entries:         {len(ref['entries'])} " in info, \
        info
    if ref["world_size"] > 1:
        assert f"ranks:           {ref['world_size']}" in info, info
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


def test_other_serialization_formats_are_read_from_the_file_named(tmp_path):
    """A layout metadata.pkl gives is read in its format (the release's four), from the file it
    names: one that is missing fails the open naming it; a format the release does not write
    is refused naming metadata.pkl, the item, the rank, the file and the format."""
    d = damaged(tmp_path, "tc_sharded")
    md = pickle.loads((d / "metadata.pkl").read_bytes())  # our own fixture
    md["metadata"]["misc"]["rank_to_layout_info"][0] = {
        "file_path": "misc_0.json", "serialization_format": {"type": "JsonSerialization"}}
    (d / "metadata.pkl").write_bytes(pickle.dumps(md))
    r = ckpt("ls", d)
    err = r.stderr.decode()
    assert r.returncode == 1 and "misc_0.json" in err, err
    md["metadata"]["misc"]["rank_to_layout_info"][1] = {
        "file_path": "misc_1.pt", "serialization_format": {"type": "NumpySerialization"}}
    md["metadata"]["misc"]["rank_to_layout_info"][0] = None
    (d / "metadata.pkl").write_bytes(pickle.dumps(md))
    r = ckpt("ls", d)
    err = r.stderr.decode()
    assert r.returncode == 1 and "metadata.pkl" in err and "misc_1.pt" in err \
        and "NumpySerialization" in err and "rank 1" in err, err


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
        for f in ref["files"]:  # every file of the checkpoint directory, as it is
            assert (mnt / ".raw" / f).read_bytes() == (src / f).read_bytes(), f
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


# ------------------------------------------------------------------------------------------
# The release's other item layouts (ItemSpec(layout=LayoutInfo(path, fmt))) and the 2-D mesh
# ------------------------------------------------------------------------------------------

def _ref(name):
    return {"/".join(map(str, e["path"])): e for e in reference(name)["entries"]}


@pytest.mark.parametrize("name", ["tc_layouts", "tc_mesh2d"])
def test_export_equals_the_libraries_load(name, tmp_path):
    """ckpt export of a checkpoint with safetensors, JSON and raw items: every tensor whole,
    the bytes of the library's load (or full_tensor()); diff with itself: all the same."""
    d = FIXTURES / name / "ckpt"
    ref = {k: e for k, e in _ref(name).items() if e["kind"] == "tensor"}
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
    r = ckpt("diff", d, d)
    assert r.returncode == 0 and f"{len(_ref(name))} same, 0 changed".encode() in r.stdout, \
        r.stdout


def test_layouts_each_format_read_from_its_file():
    """tc_layouts: a safetensors model and an optimizer at its own file name (both named by
    metadata.pkl's rank_to_layout_info), a JSON config and raw bytes (found by their
    `<item>_0.<ext>` names), a value in the default layout; none read twice under another
    item name (optim_state_0.pt is optim's)."""
    d = FIXTURES / "tc_layouts" / "ckpt"
    ref = _ref("tc_layouts")
    ls = set(ckpt("ls", "-R", d).stdout.decode().split())
    assert ls == set(ref), sorted(ls ^ set(ref))
    assert not any(k.startswith("optim_state") for k in ls)
    assert ref["config/name"]["repr"] == "'tc-α'" and ref["config/sched/min"]["repr"] == "-1.5e-07"
    r = ckpt("cat", "--json", d, "config/steps")
    assert r.returncode == 0 and json.loads(r.stdout) == [10, 20, 30], r.stdout
    blob = (d / "blob_0.bin").read_bytes()
    r = ckpt("cat", "-f", d, "blob")
    assert r.returncode == 0 and r.stdout == blob == bytes.fromhex(ref["blob"]["hex"])
    v = ckpt("cat", "-v", "-f", d, "model.half")  # a bf16 record of the safetensors file
    assert b"bfloat16 [5]" in v.stderr, v.stderr


# LeakSanitizer cannot run under ptrace (strace) nor through Open MPI's allocations kept
# until exit (the mpi suite's lsan-mpi.supp): those runs check no leaks
NO_LEAKS = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:abort_on_error=1")


def _preads(cmd, path):
    """Bytes ckpt reads from `path` (strace), and its output."""
    with tempfile.TemporaryDirectory() as td:
        log = Path(td) / "log"
        r = subprocess.run(["strace", "-f", "-y", "-e", "trace=read,pread64,readv,preadv",
                            "-o", str(log), BIN, *cmd], capture_output=True, timeout=120,
                           env=NO_LEAKS)
        got = 0
        for line in log.read_text().splitlines():
            if f"<{path}>" in line and "= " in line:
                got += max(0, int(line.rsplit("= ", 1)[1].split()[0]))
        return got, r


@pytest.mark.skipif(not shutil.which("strace"), reason="strace not installed")
def test_raw_and_safetensors_reads_touch_only_what_is_needed():
    """A region of a raw item reads those bytes of its file and no more; a safetensors record
    is read in place (its header once, then the record's bytes)."""
    d = (FIXTURES / "tc_layouts" / "ckpt").resolve()
    blob = (d / "blob_0.bin").read_bytes()
    got, r = _preads(["cat", "-f", "-s", "250:258", str(d), "blob"], d / "blob_0.bin")
    assert r.returncode == 0 and r.stdout == blob[250:258], r.stderr
    assert got == 8, got
    sf = d / "model_0.safetensors"
    n = struct.unpack_from("<Q", sf.read_bytes())[0]
    rec = json.loads(sf.read_bytes()[8:8 + n])["2.bias"]["data_offsets"]
    with tempfile.TemporaryDirectory() as td:
        log = Path(td) / "log"
        r = subprocess.run(["strace", "-f", "-y", "-e", "trace=pread64", "-o", str(log), BIN,
                            "cat", "-f", str(d), "model.2.bias"], capture_output=True, timeout=120,
                           env=NO_LEAKS)
        want = f", {rec[1] - rec[0]}, {8 + n + rec[0]}) = {rec[1] - rec[0]}"
        assert any(f"<{sf}>" in ln and ln.endswith(want) for ln in log.read_text().splitlines()), \
            log.read_text()
    assert r.returncode == 0 and r.stdout == bytes.fromhex(_ref("tc_layouts")["model/2.bias"]["hex"])


def test_mesh2d_placements_and_rank0_items():
    """tc_mesh2d: 4 ranks on a (dp=2, tp=2) mesh.  (_StridedShard(0, 2), Shard(0)) is the
    saved tensor (DTensor.full_tensor()), also when stored in safetensors files; JSON and raw
    items are rank 0's (as a load in one process reads them); a Replicate mesh dim is stored
    once (verify counts the chunks)."""
    d = FIXTURES / "tc_mesh2d" / "ckpt"
    ref = _ref("tc_mesh2d")
    for k in ("model/wq", "model/wo", "model/w2", "model/norm", "model/tiny", "model/list/0",
              "sfmodel/wq", "sfmodel/wo", "sfmodel/w2", "sfmodel/norm", "sfmodel/tiny"):
        r = ckpt("cat", "-f", "--path", d, k)
        assert r.returncode == 0 and r.stdout == bytes.fromhex(ref[k]["hex"]), (k, r.stderr)
    assert ref["config/rank"]["repr"] == "0" and ref["train/seed"]["repr"] == "0"
    r = ckpt("cat", "-f", d, "blob")
    assert r.stdout.endswith(b"rank 0") and r.stdout == (d / "blob_0.bin").read_bytes()
    # wq, wo, w2: one box per rank (4 chunks); norm, tiny: Replicate over dp, 2 chunks (tiny:
    # one of them empty); plain: 1; in both items
    v = ckpt("verify", d)
    assert v.returncode == 0, v.stdout + v.stderr


def _write_md(d: Path, edit):
    md = pickle.loads((d / "metadata.pkl").read_bytes())  # our own fixture
    edit(md)
    (d / "metadata.pkl").write_bytes(pickle.dumps(md))


def test_hostile_layouts_are_refused_naming_the_file(tmp_path):
    """A layout in a format the release does not write, a file name that leaves the
    directory, a safetensors file cut short or holding the wrong shape, a JSON item that does
    not parse: refused with the file (and offset) named, the rest readable."""
    def fmt(md):
        md["metadata"]["model"]["rank_to_layout_info"][0]["serialization_format"]["type"] = \
            "PickleSerialization"
    d = damaged(tmp_path / "a", "tc_layouts")
    _write_md(d, fmt)
    r = ckpt("ls", d)
    assert r.returncode == 1 and b"metadata.pkl" in r.stderr and b"PickleSerialization" in \
        r.stderr, r.stderr

    def escape(md):
        md["metadata"]["model"]["rank_to_layout_info"][0]["file_path"] = "../model_0.safetensors"
    d = damaged(tmp_path / "b", "tc_layouts")
    _write_md(d, escape)
    r = ckpt("ls", d)
    assert r.returncode == 1 and b"path traversal" in r.stderr, r.stderr

    d = damaged(tmp_path / "c", "tc_layouts")
    sf = d / "model_0.safetensors"
    blob = sf.read_bytes()
    for cut in (0, 5, 8 + 20, len(blob) - 1):
        sf.write_bytes(blob[:cut])
        r = ckpt("ls", d)
        assert r.returncode == 1 and b"model_0.safetensors" in r.stderr \
            and b"offset" in r.stderr, (cut, r.stderr)

    d = damaged(tmp_path / "d", "tc_mesh2d")
    def shape(md):  # rank 1's boxes no longer fit its record
        g = md["metadata"]["sfmodel"]["nested_path_to_metadata"]['["w2"]'][0]
        g["sharding_metadata"]["data"]["global_shape"] = [9, 3]
    _write_md(d, shape)
    r = ckpt("cat", "-f", d, "sfmodel.w2")
    assert r.returncode != 0 and b"sfmodel_" in r.stderr + r.stdout, r.stderr
    r = ckpt("cat", "-f", d, "sfmodel.w2".replace("w2", "wq"))
    assert r.returncode == 0 and r.stdout == bytes.fromhex(_ref("tc_mesh2d")["sfmodel/wq"]["hex"])

    d = damaged(tmp_path / "e", "tc_layouts")
    (d / "config_0.json").write_bytes(b'{"lr": 0.01, "steps": [1, 2')
    r = ckpt("cat", d, "config")
    assert r.returncode != 0 and b"config_0.json" in r.stderr and b"offset" in r.stderr, r.stderr
    r = ckpt("cat", "-f", d, "blob")
    assert r.returncode == 0 and r.stdout == (d / "blob_0.bin").read_bytes()


def _chunks(n: int, m: int) -> list[tuple[int, int]]:
    """torch.chunk's pieces of n along one dim over m ranks: (start, stop)."""
    size = -(-n // m) if n else 0
    return [(min(i * size, n), min((i + 1) * size, n)) for i in range(m)]


def _local(full, spec: str, dp: int, tp: int):
    """The local shard DTensor gives mesh coordinate (dp, tp) of a (2, 2) mesh."""
    if spec == "2x2:S0s2,S0":  # tp's chunk of dim 0, then dp's chunk of that
        a, b = _chunks(full.shape[0], 2)[tp]
        c, d = _chunks(b - a, 2)[dp]
        return full[a + c:a + d]
    if spec == "2x2:S0,S1":
        a, b = _chunks(full.shape[0], 2)[dp]
        c, d = _chunks(full.shape[1], 2)[tp]
        return full[a:b, c:d]
    assert spec == "2x2:R,S0"
    a, b = _chunks(full.shape[0], 2)[tp]
    return full[a:b]


@pytest.mark.skipif(not shutil.which("mpirun"), reason="mpirun not installed")
def test_collective_loader_gives_each_rank_its_saved_shard(tmp_path):
    """`mpirun -np 4 ckpt load` of tc_mesh2d into the placements it was saved with: rank k's
    shard of every sfmodel tensor is the record sfmodel_k.safetensors holds (what rank k
    saved), of every model tensor the saved tensor's local shard; the job reads each needed
    stored byte once."""
    import numpy as np
    d = FIXTURES / "tc_mesh2d" / "ckpt"
    ref = _ref("tc_mesh2d")
    specs = {"wq": "2x2:S0s2,S0", "wo": "2x2:S0s2,S0", "w2": "2x2:S0,S1", "norm": "2x2:R,S0",
             "tiny": "2x2:R,S0"}
    lmap = tmp_path / "map.json"
    lmap.write_text(json.dumps({f"{i}/{k}": v for k, v in specs.items()
                                for i in ("model", "sfmodel")}))
    keys = ",".join(f"{i}/{k}" for k in specs for i in ("model", "sfmodel"))
    out = tmp_path / "out"
    r = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca",
                        "btl_vader_single_copy_mechanism", "none", "-np", "4", BIN, "load",
                        "--layout", "2x2:S0s2,S0", "--layout-map", lmap, "--keys", keys,
                        "--dump", out, "--json", d], capture_output=True, text=True,
                       timeout=300, env=dict(NO_LEAKS, OMPI_MCA_rmaps_base_oversubscribe="1"))
    assert r.returncode == 0, r.stdout + r.stderr
    dt = {"float32": np.float32, "int64": np.int64, "bfloat16": np.uint16}
    for k in range(4):
        dp, tp = divmod(k, 2)
        sf = (d / f"sfmodel_{k}.safetensors").read_bytes()
        n = struct.unpack_from("<Q", sf)[0]
        hdr = json.loads(sf[8:8 + n])
        for name, spec in specs.items():
            a, b = hdr[name]["data_offsets"]
            got = (out / f"rank{k}" / "sfmodel" / name).read_bytes()
            assert got == sf[8 + n + a:8 + n + b], (k, name)
            e = ref[f"model/{name}"]
            full = np.frombuffer(bytes.fromhex(e["hex"]), dtype=dt[e["dtype"]]).reshape(e["shape"])
            want = np.ascontiguousarray(_local(full, spec, dp, tp)).tobytes()
            assert (out / f"rank{k}" / "model" / name).read_bytes() == want, (k, name)
    stats = json.loads(r.stdout.strip().splitlines()[-1])
    assert sum(p["read"] for p in stats["per_rank"]) == stats["union_bytes"] > 0, stats


# ------------------------------------------------------------ made here by the real libraries

def _tc_manager():
    """A CheckpointManager of the registry's torch-checkpointing (the generator's settings)."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
    import generate_torch_checkpointing as gen
    return gen


# Item files in subdirectories: LayoutInfo file paths holding '/' (two levels deep for the
# optimizer), as torch-checkpointing 0.1.1 writes them.
SUBDIR_LAYOUTS = {"model": ("torch", "rank_{rank}/model.pt"),
                  "optim": ("safetensors", "opt/deep/o_{rank}.sft"),
                  "config": ("json", "cfg/config_{rank}.json")}


def _save_with_subdirectory_items(gen, d, seed, rows, steps, name):
    """Saves a model (w: [rows, 4], b), an optimizer state and a JSON config to d with
    torch-checkpointing under SUBDIR_LAYOUTS; returns what it saved."""
    import torch
    g = torch.Generator().manual_seed(seed)
    payload = {"model": {"w": torch.randn(rows, 4, generator=g), "b": torch.arange(rows)},
               "optim": {"state": {0: {"m": torch.randn(4, generator=g)}}},
               "config": {"steps": steps, "name": name}}
    m = gen._manager(["model", "optim"], SUBDIR_LAYOUTS)
    m.save(str(d), payload)
    m.close()
    return payload


@pytest.mark.skipif(not FS_BIN, reason="ckptfs not built")
def test_raw_copy_with_items_in_subdirectories(tmp_path):
    """A checkpoint real torch-checkpointing 0.1.1 saved with item files in subdirectories
    (LayoutInfo file paths holding '/', two levels deep, a README beside them, an empty
    directory): `.raw/` shows those subdirectories and every regular file below, with the
    sources' permissions (a 0700 subdirectory and a 0600 file there stay closed to others),
    `cp -r .raw copy` gives the same tree, byte for byte, and the copy loads with
    torch-checkpointing and reads with ckpt as the original; a symbolic link below the
    checkpoint directory (to a file or a directory) is not followed, only logged."""
    pytest.importorskip("torch_checkpointing")
    import torch
    gen = _tc_manager()
    d = tmp_path / "ckpt"
    payload = _save_with_subdirectory_items(gen, d, 12, 5, [3, 4], "raw")
    (d / "opt" / "deep" / "README").write_text("beside an item\n")
    (d / "opt" / "private").mkdir(mode=0o700)
    (d / "opt" / "private" / "key").write_text("k")
    os.chmod(d / "opt" / "private" / "key", 0o600)
    (d / "empty").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("not a checkpoint's\n")
    (d / "cfg" / "link").symlink_to(outside / "secret")
    (d / "cfg" / "dirlink").symlink_to(outside)
    want = sorted(str(p.relative_to(d)) for p in d.rglob("*") if not p.is_symlink())
    mnt = Path(tempfile.mkdtemp(prefix="ckpt-tc-mnt-"))
    err = tempfile.TemporaryFile()
    proc = subprocess.Popen([FS_BIN, "-f", str(d), str(mnt)], stderr=err)
    copy = tmp_path / "copy"
    try:
        deadline = time.time() + 30
        while not os.path.ismount(mnt):
            assert proc.poll() is None and time.time() < deadline
            time.sleep(0.05)
        raw = mnt / ".raw"
        assert sorted(p.name for p in raw.iterdir()) == sorted(p.name for p in d.iterdir())
        assert (raw / "rank_0").is_dir() and (raw / "opt" / "deep").is_dir()
        assert sorted(os.listdir(raw / "cfg")) == ["config_0.json"]
        assert not (raw / "cfg" / "link").exists() and not (raw / "cfg" / "dirlink").exists()
        assert os.stat(raw / "opt" / "private").st_mode & 0o077 == 0
        assert os.stat(raw / "opt" / "private" / "key").st_mode & 0o077 == 0
        def mode(p):
            return os.stat(p).st_mode & 0o777
        assert mode(raw / "opt" / "deep" / "README") == mode(raw / "metadata.pkl")
        assert mode(raw / "rank_0" / "model.pt") == mode(raw / "metadata.pkl")
        assert mode(raw / "opt" / "deep") == mode(raw)
        r = subprocess.run(["cp", "-r", str(raw), str(copy)], capture_output=True)
        assert r.returncode == 0, r.stderr
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)])
        proc.wait(timeout=60)
        os.rmdir(mnt)
    err.seek(0)
    log = err.read().decode(errors="replace")
    assert "cfg/link: not shown under .raw: a symbolic link" in log, log
    assert "cfg/dirlink: not shown under .raw: a symbolic link" in log, log
    assert sorted(str(p.relative_to(copy)) for p in copy.rglob("*")) == want
    for f in want:
        if (d / f).is_file():
            assert (copy / f).read_bytes() == (d / f).read_bytes(), f
    # the copy is the checkpoint: torch-checkpointing loads it, ckpt reads it, the same
    templ = {"model": {"w": torch.zeros(5, 4), "b": torch.zeros(5, dtype=torch.int64)},
             "optim": {"state": {0: {"m": torch.zeros(4)}}}}
    loaded = {}
    for name, src in (("orig", d), ("copy", copy)):
        m = gen._manager(["model", "optim"],
                         {k: v for k, v in SUBDIR_LAYOUTS.items() if k != "config"})
        loaded[name] = m.load(str(src), {k: {**v} for k, v in templ.items()})
        m.close()
    for k in ("w", "b"):
        assert torch.equal(loaded["copy"]["model"][k], payload["model"][k])
        assert torch.equal(loaded["copy"]["model"][k], loaded["orig"]["model"][k])
    assert torch.equal(loaded["copy"]["optim"]["state"][0]["m"], payload["optim"]["state"][0]["m"])
    a, b = ckpt("ls", "-R", "-l", d), ckpt("ls", "-R", "-l", copy)
    assert a.returncode == 0 and b.returncode == 0 and a.stdout == b.stdout, b.stderr
    # (config: metadata.pkl names no JSON item, and cfg/ is no `<item>_0` file of the
    # directory's own, so ckpt finds none, in either; .raw copied its file all the same)
    for path in ("model/w", "model/b", "optim/state/0/m"):
        x, y = ckpt("cat", "-f", "--path", d, path), ckpt("cat", "-f", "--path", copy, path)
        assert x.returncode == 0 and y.returncode == 0 and x.stdout == y.stdout, (path, y.stderr)
    assert ckpt("cat", "-f", "--path", copy, "model/w").stdout == \
        payload["model"]["w"].numpy().tobytes()


BIG = {"big": 2 ** 100, "neg": -(2 ** 80) - 7, "edge": 2 ** 63, "low": -(2 ** 63) - 1,
       "huge": 10 ** 400 + 1, "small": 5, "list": [2 ** 64, -(2 ** 64), 1], "f": 1.5}


def test_json_integers_beyond_64_bits_are_python_ints(tmp_path):
    """A JSON item json.dumps wrote with ints of any size: each reads as json.loads gives it
    (exact, not the nearest float), in `ckpt cat`, the mount's value files and a torch.save
    export; more digits than Python's int() takes (4300) leave the item unreadable, named."""
    pytest.importorskip("torch_checkpointing")
    import torch
    gen = _tc_manager()
    d = tmp_path / "ckpt"
    m = gen._manager(["model"], {"config": ("json", "config_{rank}.json")})
    m.save(str(d), {"model": {"w": torch.arange(4, dtype=torch.float32)}, "config": BIG})
    m.close()
    want = json.loads((d / "config_0.json").read_text())
    assert want == BIG
    for k, v in want.items():  # (a list of ints is one value)
        r = ckpt("cat", "--path", d, f"config/{k}")
        assert r.returncode == 0 and r.stdout.decode().strip() == repr(v), (k, r)
    out = tmp_path / "out.pt"
    r = ckpt("export", "--keys", "config", d, out)
    assert r.returncode == 0, r.stderr
    assert torch.load(out, weights_only=True) == want
    # beyond int(): json.loads refuses it, ckpt names the file and offset
    text = (d / "config_0.json").read_text().replace(str(2 ** 100), "9" * 4301)
    (d / "config_0.json").write_text(text)
    with pytest.raises(ValueError):
        json.loads(text)
    r = ckpt("cat", d, "config")
    assert r.returncode != 0 and b"config_0.json" in r.stderr and b"offset" in r.stderr, r.stderr
    r = ckpt("cat", "-f", d, "model.w")
    assert r.returncode == 0 and r.stdout == struct.pack("<4f", 0, 1, 2, 3)


def _hf_dir(d: Path, pkl: bytes | None) -> dict:
    """A HuggingFace model directory as save_pretrained writes it: safetensors shards by the
    safetensors package, model.safetensors.index.json (a total_size beyond 64 bits here:
    json.loads keeps it), config.json; plus a metadata.pkl of another tool."""
    import torch
    from safetensors.torch import save_file
    g = torch.Generator().manual_seed(5)
    shards = {"model-00001-of-00002.safetensors": {"embed.weight": torch.randn(6, 4, generator=g)},
              "model-00002-of-00002.safetensors": {"head.weight": torch.randn(3, 4, generator=g),
                                                   "head.bias": torch.randn(3, generator=g)}}
    d.mkdir(parents=True)
    for name, sd in shards.items():
        save_file(sd, str(d / name), metadata={"format": "pt"})
    (d / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 2 ** 70},
         "weight_map": {k: n for n, sd in shards.items() for k in sd}}, indent=2))
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": 6}))
    if pkl is not None:
        (d / "metadata.pkl").write_bytes(pkl)
    return {k: t for sd in shards.values() for k, t in sd.items()}


@pytest.mark.parametrize("stray", [
    pickle.dumps({"epoch": 3, "tokens_seen": 10 ** 9, "args": {"lr": 1e-4}}),
    pickle.dumps([1, 2, 3], protocol=2), b"", b"\x80\x04garbage"])
def test_stray_metadata_pkl_in_a_huggingface_dir(tmp_path, stray):
    """A HuggingFace safetensors directory with another tool's metadata.pkl beside it (not
    torch-checkpointing's: its pickle is not a dict whose first key is 'metadata') opens as
    HuggingFace storage, every tensor as safetensors loads it; .raw/ keeps the file."""
    from safetensors.torch import load_file
    d = tmp_path / "hf"
    tensors = _hf_dir(d, stray)
    info = ckpt("info", d)
    assert info.returncode == 0 and "safetensors" in info.stdout.decode().lower(), info
    for k, t in tensors.items():
        r = ckpt("cat", "-f", d, k)
        assert r.returncode == 0 and r.stdout == t.numpy().tobytes(), (k, r.stderr)
    got = {}
    for n in sorted(d.glob("*.safetensors")):
        got.update(load_file(str(n)))
    assert set(got) == set(tensors)
    v = ckpt("verify", d)
    assert v.returncode == 0, v.stdout + v.stderr


def test_foreign_metadata_pkl_alone_is_named(tmp_path):
    """torch-checkpointing's `<item>_0.pt` files with a metadata.pkl that is not its own and no
    other format's files: refused, naming metadata.pkl."""
    d = damaged(tmp_path, "tc_sharded")
    (d / "metadata.pkl").write_bytes(pickle.dumps({"epoch": 3}))
    r = ckpt("ls", d)
    assert r.returncode == 1 and b"metadata.pkl" in r.stderr and b"not torch-checkpointing" \
        in r.stderr, r.stderr


def test_item_files_in_subdirectories(tmp_path):
    """torch-checkpointing 0.1.1 writes an item's files in subdirectories when its LayoutInfo
    file_path holds '/' (its own example: "rank_0/model.pt"; the writer makes the parent
    directories): read as the library's load reads them, every leaf equal, sealed and
    verified; a symbolic link on the way (a directory or the file) is not followed, a path
    leaving the directory stays path traversal."""
    pytest.importorskip("torch_checkpointing")
    import torch
    gen = _tc_manager()
    d = tmp_path / "ckpt"
    payload = _save_with_subdirectory_items(gen, d, 11, 3, [1, 2], "sub")
    assert (d / "rank_0" / "model.pt").is_file() and (d / "opt/deep/o_0.sft").is_file()
    loaded = gen._manager(["model", "optim"], {
        "model": ("torch", "rank_{rank}/model.pt"),
        "optim": ("safetensors", "opt/deep/o_{rank}.sft")}).load(
            str(d), {"model": {"w": torch.zeros(3, 4), "b": torch.zeros(3, dtype=torch.int64)},
                     "optim": {"state": {0: {"m": torch.zeros(4)}}}})
    for path, want in [("model/w", loaded["model"]["w"]), ("model/b", loaded["model"]["b"]),
                       ("optim/state/0/m", payload["optim"]["state"][0]["m"])]:
        r = ckpt("cat", "-f", "--path", d, path)
        assert r.returncode == 0 and r.stdout == want.numpy().tobytes(), (path, r.stderr)
    assert torch.equal(loaded["model"]["w"], payload["model"]["w"])
    r = ckpt("ls", "-R", d)
    assert r.returncode == 0, r.stderr
    assert ckpt("seal", d).returncode == 0
    v = ckpt("verify", "--data", d)
    assert v.returncode == 0, v.stdout + v.stderr
    # a symlinked directory on the way is not followed, even to the same files
    (d / "rank_0").rename(d / "real_rank_0")
    (d / "rank_0").symlink_to("real_rank_0")
    r = ckpt("cat", "-f", d, "model.w")
    assert r.returncode != 0 and b"rank_0/model.pt" in r.stderr and b"symbolic link" in \
        r.stderr, r.stderr
    # ... nor is a symbolic link in place of the file
    (d / "rank_0").unlink()
    (d / "real_rank_0").rename(d / "rank_0")
    (d / "rank_0" / "model.pt").rename(d / "model_real.pt")
    (d / "rank_0" / "model.pt").symlink_to("../model_real.pt")
    r = ckpt("cat", "-f", d, "model.w")
    assert r.returncode != 0 and b"rank_0/model.pt" in r.stderr and b"symbolic link" in \
        r.stderr, r.stderr
