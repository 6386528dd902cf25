"""End-to-end tests of the saver (include/ckpt_save.h).

save_driver (tests/save/save_driver.c) writes a checkpoint of three simulated ranks; this file
rebuilds the same values in Python and checks that
  * the ckpt reader (`ckpt verify`, `ckpt cat`) reads every tensor bit-exact,
  * plain `pickle` and torch's own classes accept `.metadata`,
  * real torch `dcp.load` reads it without a process group, and into DTensors at world
    sizes 1 and 2 (gloo, spawned processes), bit-exact, with the non-tensor values equal,
  * `format_utils.dcp_to_torch_save` rebuilds the nested state_dict from planner_data,
  * a crash or an abort before the commit leaves no visible step and `latest` unchanged,
  * `latest` and keep-N retention behave.
"""
import io
import os
import pickle
import subprocess
import sys
import time
import zipfile

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")
import torch.distributed.checkpoint as dcp  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from gloo_group import gloo_group  # noqa: E402

DRIVER = os.environ.get("SAVE_DRIVER", "")
CKPT = os.environ.get("CKPT_BIN", "")

# path, dtype, global shape, seed — the table of save_driver.c
TENSORS = [
    ("model/layers.0.w", torch.float32, (7, 5), 1),
    ("model/layers.0.b", torch.bfloat16, (5,), 2),
    ("model/norm", torch.float16, (4,), 3),
    ("model/emb", torch.int64, (6, 4), 4),
    ("model/mask", torch.bool, (3, 3), 5),
    ("model/f8", torch.float8_e4m3fn, (8,), 6),
    ("optim/state/model.layers.0.w/step", torch.float32, (), 7),
    ("model/empty", torch.float32, (0, 3), 8),
    ("model/f8b", torch.float8_e5m2, (2, 3), 9),
    ("model/u16", torch.uint16, (5,), 10),
]

VALUES = {
    "optim/param_groups/0/lr": 0.001,
    "optim/param_groups/0/betas": (0.9, 0.999),
    "optim/param_groups/0/step": 12345678901,
    "optim/param_groups/0/name": "adamw \u00fc",
    "optim/param_groups/0/params": ["model.layers.0.w", "model.layers.0.b"],
    "misc/cfg": {"a": 1, "b": [1, 2.5, "x", None, True],
                 "c": {"d": -5, "big": -(1 << 40), "long_tuple": ()}, "flag": False},
    "misc/note": "written by rank 2 only",
    "misc/ints": [0, 1, 255, 256, 65535, 65536, -1, -256, 2147483647, -2147483648, 2147483648,
                  -2147483649, 2**63 - 1, -2**63, 1 << 40, -(1 << 40), 128, -128, 32768, -32769,
                  (-0.0, 1e300, 5e-324, 0.1)],
}


def expected(dtype, shape, seed):
    itemsize = torch.empty((), dtype=dtype).element_size()
    n = int(np.prod(shape, dtype=np.int64)) * itemsize
    if n == 0:
        return torch.empty(shape, dtype=dtype)
    k = np.arange(n, dtype=np.int64)
    b = ((k * 131 + seed * 17 + 7) & 0xFF).astype(np.uint8)
    if dtype == torch.bool:
        b &= 1
    return torch.from_numpy(b).view(dtype).reshape(shape)


def raw(t):
    return t.contiguous().reshape(-1).view(torch.uint8)


def bit_equal(a, b):
    return a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape) and torch.equal(raw(a), raw(b))


def run_driver(parent, step, *extra, check=True):
    p = subprocess.run([DRIVER, str(parent), step, *extra], capture_output=True, text=True)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def flat(path):
    return path.replace("/", ".")


@pytest.fixture(scope="module")
def ckpt_dir(tmp_path_factory):
    if not DRIVER:
        pytest.skip("SAVE_DRIVER not set")
    parent = tmp_path_factory.mktemp("steps")
    run_driver(parent, "step-1")
    return parent / "step-1"


def placeholder_state_dict():
    """The nested state_dict torch users would pass: tensors in place, None for values."""
    sd = {}
    for path, dtype, shape, _ in TENSORS:
        node = sd
        parts = path.split("/")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = torch.zeros(shape, dtype=dtype) if dtype != torch.float8_e4m3fn and \
            dtype != torch.float8_e5m2 else torch.zeros(shape, dtype=torch.uint8).view(dtype)
    sd["optim"]["param_groups"] = [{k.split("/")[-1]: None for k in VALUES
                                    if k.startswith("optim/param_groups/0/")}]
    sd["misc"] = {"cfg": None, "note": None, "ints": None}
    return sd


def lookup(sd, path):
    node = sd
    for p in path.split("/"):
        node = node[int(p)] if isinstance(node, list) else node[p]
    return node


# ---------------------------------------------------------------- the ckpt reader


def test_ckpt_verify(ckpt_dir):
    p = subprocess.run([CKPT, "verify", str(ckpt_dir)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "0 problems" in p.stdout


@pytest.mark.parametrize("path,dtype,shape,seed", TENSORS, ids=[t[0] for t in TENSORS])
def test_ckpt_cat_bit_exact(ckpt_dir, path, dtype, shape, seed):
    p = subprocess.run([CKPT, "cat", str(ckpt_dir), path], capture_output=True)
    assert p.returncode == 0, p.stderr
    want = raw(expected(dtype, shape, seed)).numpy().tobytes()
    assert p.stdout == want


def test_ckpt_cat_values(ckpt_dir):
    p = subprocess.run([CKPT, "cat", "--text", str(ckpt_dir), "optim/param_groups/0/lr"],
                       capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.strip() == "0.001"


# ---------------------------------------------------------------- .metadata itself


def test_metadata_classes_and_dedup(ckpt_dir):
    from torch.distributed.checkpoint.metadata import (BytesStorageMetadata, Metadata,
                                                       TensorStorageMetadata)
    with open(ckpt_dir / ".metadata", "rb") as f:
        md = pickle.load(f)
    assert type(md) is Metadata and md.version == "1.0.0"
    sdm = md.state_dict_metadata
    assert set(sdm) == {flat(p) for p, *_ in TENSORS} | {flat(p) for p in VALUES}
    for path, dtype, shape, _ in TENSORS:
        t = sdm[flat(path)]
        assert isinstance(t, TensorStorageMetadata)
        assert t.properties.dtype == dtype and tuple(t.size) == shape
        assert md.planner_data[flat(path)] == tuple(path.split("/"))
    for path in VALUES:
        assert isinstance(sdm[flat(path)], BytesStorageMetadata)
    assert md.planner_data["optim.param_groups.0.lr"] == ("optim", "param_groups", 0, "lr")
    w = sdm["model.layers.0.w"]
    assert [tuple(c.offsets) for c in w.chunks] == [(0, 0), (3, 0), (6, 0)]
    assert [tuple(c.sizes) for c in w.chunks] == [(3, 5), (3, 5), (1, 5)]
    assert w.properties.strides is None  # the 5-tuple: torch 2.4 - 2.14 read it too
    by_fqn = {}
    for idx, info in md.storage_data.items():
        by_fqn.setdefault(idx.fqn, []).append(info)
    # replicated pieces are stored once: the replica_id-0 holder, or the lowest rank
    assert [i.relative_path for i in by_fqn["model.layers.0.b"]] == ["__0_0.distcp"]
    assert [i.relative_path for i in by_fqn["model.norm"]] == ["__0_0.distcp"]
    assert [i.relative_path for i in by_fqn["optim.param_groups.0.lr"]] == ["__0_0.distcp"]
    assert [i.relative_path for i in by_fqn["misc.note"]] == ["__2_0.distcp"]
    assert len(by_fqn["model.emb"]) == 3  # two halves and the empty shard
    # every stored item is a torch.save zip that Python's zipfile accepts (CRCs checked)
    for info in md.storage_data.values():
        with open(ckpt_dir / info.relative_path, "rb") as f:
            f.seek(info.offset)
            blob = f.read(info.length)
        z = zipfile.ZipFile(io.BytesIO(blob))
        assert z.testzip() is None
        torch.load(io.BytesIO(blob), weights_only=True)  # data.pkl passes the safe unpickler
        assert z.read("archive/byteorder") == b"little"
        assert z.read("archive/.storage_alignment") == b"64"
        for zi in z.infolist():
            data_start = zi.header_offset + 30 + len(zi.filename) + len(zi.extra)
            hdr = blob[zi.header_offset:zi.header_offset + 30]
            name_len = int.from_bytes(hdr[26:28], "little")
            extra_len = int.from_bytes(hdr[28:30], "little")
            assert (zi.header_offset + 30 + name_len + extra_len) % 64 == 0, zi.filename
            del data_start


def test_filesystem_reader_metadata(ckpt_dir):
    md = dcp.FileSystemReader(str(ckpt_dir)).read_metadata()
    assert md.storage_meta is not None and len(md.storage_meta.save_id) == 36


def test_same_bytes_as_torch_save(tmp_path, monkeypatch):
    """The same state_dict saved by torch 2.15 and by the saver: data files equal except the
    per-archive serialization ids (and their CRCs); .metadata the same opcodes except that
    we memoise the module string 'torch' of torch.Size, which Python writes twice."""
    import pickletools
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    monkeypatch.chdir(tmp_path)  # relative checkpoint ids: one-string PosixPath on both sides
    # --strides: torch 2.15's 6-field TensorProperties, as torch 2.15 itself writes
    p = subprocess.run([DRIVER, ".", "ours", "--mini", "--strides"], capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stderr
    dcp.save({"lr": 0.01, "model": {"w": torch.arange(6, dtype=torch.float32).reshape(2, 3)}},
             checkpoint_id="theirs", no_dist=True)
    p = subprocess.run([CKPT, "diff", str(ours), str(theirs)], capture_output=True, text=True)
    assert p.returncode == 0 and "2 same" in p.stdout, p.stdout + p.stderr
    a = (theirs / "__0_0.distcp").read_bytes()
    b = (ours / "__0_0.distcp").read_bytes()
    assert len(a) == len(b)
    # blank the serialization ids and the CRCs of their records, then compare everything
    def blank(blob):
        out = bytearray(blob)
        pos = 0
        while True:
            i = blob.find(b"archive/.data/serialization_id", pos)
            if i < 0:
                break
            if blob[i - 46:i - 42] == b"PK\x01\x02":   # central directory: crc at +16
                out[i - 46 + 16:i - 46 + 20] = b"\0" * 4
            else:                                       # local header: data 64-aligned after
                start = i + 30 + int.from_bytes(blob[i - 2:i], "little")
                out[start:start + 40] = b"0" * 40
                out[start + 44:start + 48] = b"\0" * 4  # crc in the data descriptor
            pos = i + 1
        return bytes(out)
    diff = [i for i in range(len(a)) if blank(a)[i] != blank(b)[i]]
    assert not diff, diff[:10]

    def ops(p):
        return [(op.name, arg) for op, arg, _ in pickletools.genops(p.read_bytes())
                if op.name not in ("FRAME", "MEMOIZE", "BINGET", "SHORT_BINUNICODE")] + \
               sorted(arg for op, arg, _ in pickletools.genops(p.read_bytes())
                      if op.name == "SHORT_BINUNICODE" and len(arg) != 36 and
                      arg not in ("./ours", "theirs"))
    ta, tb = ops(theirs / ".metadata"), ops(ours / ".metadata")
    # the 'torch' string written a second time by Python is the only extra string
    extra = list(ta)
    extra.remove("torch")
    assert extra == tb


# ---------------------------------------------------------------- real torch loads


def check_loaded(sd):
    for path, dtype, shape, seed in TENSORS:
        got = lookup(sd, path)
        assert bit_equal(got, expected(dtype, shape, seed)), path
    for path, want in VALUES.items():
        got = lookup(sd, path)
        assert got == want and type(got) is type(want), (path, got)


def test_torch_dcp_load_no_process_group(ckpt_dir):
    sd = placeholder_state_dict()
    dcp.load(sd, checkpoint_id=str(ckpt_dir), no_dist=True)
    check_loaded(sd)


def test_torch_dcp_to_torch_save(ckpt_dir, tmp_path):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    out = tmp_path / "full.pt"
    dcp_to_torch_save(str(ckpt_dir), str(out))
    sd = torch.load(out, weights_only=False)
    check_loaded(sd)
    assert isinstance(sd["optim"]["param_groups"], list)


def _dtensor_worker(rank, world, ckpt, init_file):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard
    with gloo_group(init_method=f"file://{init_file}", rank=rank, world_size=world):
        mesh = init_device_mesh("cpu", (world,))
        sd = placeholder_state_dict()
        spans = {}
        for path, dtype, shape, _ in TENSORS:
            parent = lookup(sd, path.rsplit("/", 1)[0])
            name = path.rsplit("/", 1)[1]
            if len(shape) == 0:
                local, placements, span = torch.zeros((), dtype=torch.uint8), [Replicate()], None
                local = torch.zeros(1, dtype=torch.uint8).view(dtype).reshape(()) \
                    if dtype.itemsize == 1 else torch.zeros((), dtype=dtype)
            else:
                n = shape[0]
                c = -(-n // world) if n else 0
                start = min(rank * c, n)
                end = min(start + c, n)
                span = (start, end)
                local = torch.zeros((end - start,) + tuple(shape[1:]), dtype=torch.uint8)
                local = local.view(dtype) if dtype.itemsize == 1 else \
                    torch.zeros((end - start,) + tuple(shape[1:]), dtype=dtype)
                placements = [Shard(0)]
            stride = torch.empty(shape, dtype=torch.uint8).stride() if len(shape) else ()
            parent[name] = DTensor.from_local(local, mesh, placements, run_check=False,
                                              shape=torch.Size(shape), stride=stride)
            spans[path] = span
        dcp.load(sd, checkpoint_id=ckpt)
        for path, dtype, shape, seed in TENSORS:
            dt = lookup(sd, path)
            assert isinstance(dt, DTensor), path
            want = expected(dtype, shape, seed)
            if spans[path] is not None:
                want = want[spans[path][0]:spans[path][1]]
            assert bit_equal(dt.to_local(), want), (rank, path)
        for path, want in VALUES.items():
            assert lookup(sd, path) == want, (rank, path)


@pytest.mark.parametrize("world", [1, 2])
def test_torch_dcp_load_dtensor(ckpt_dir, tmp_path, world):
    import torch.multiprocessing as mp
    mp.spawn(_dtensor_worker, args=(world, str(ckpt_dir), str(tmp_path / "pg-init")),
             nprocs=world, join=True)


@pytest.mark.parametrize("flag", ["--strides", "--protocol5"])
def test_strides_properties_and_protocol5_load(tmp_path, flag):
    run_driver(tmp_path, "step-7", flag)
    raw_md = (tmp_path / "step-7" / ".metadata").read_bytes()
    assert raw_md[:2] == (b"\x80\x05" if flag == "--protocol5" else b"\x80\x04")
    md = pickle.loads(raw_md)
    strides = md.state_dict_metadata["model.layers.0.w"].properties.strides
    assert strides == ((5, 1) if flag == "--strides" else None)
    sd = placeholder_state_dict()
    dcp.load(sd, checkpoint_id=str(tmp_path / "step-7"), no_dist=True)
    check_loaded(sd)


def test_many_entries_batches_and_frames(tmp_path):
    """2500 values and a 2500-chunk tensor: 1000-item SETITEMS/APPENDS batches, FRAMEs."""
    import pickletools
    n = 2500
    run_driver(tmp_path, "step-1", "--many", str(n))
    d = tmp_path / "step-1"
    raw_md = (d / ".metadata").read_bytes()
    ops = [op.name for op, _, _ in pickletools.genops(raw_md)]
    assert ops.count("FRAME") >= 2 and len(raw_md) > 65536
    md = pickle.loads(raw_md)
    assert len(md.state_dict_metadata["many.t"].chunks) == n
    sd = placeholder_state_dict()
    sd["many"] = {"t": torch.zeros(n), **{f"v{i}": None for i in range(n)}}
    dcp.load(sd, checkpoint_id=str(d), no_dist=True)
    check_loaded(sd)
    assert torch.equal(sd["many"]["t"], torch.arange(n, dtype=torch.float32) * 0.25)
    assert all(sd["many"][f"v{i}"] == i * 7 for i in range(n))
    p = subprocess.run([CKPT, "verify", str(d)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_sealed_commit(tmp_path):
    """--seal: the step is published with .ckptfs-manifest; ckpt verify --data passes, and
    fails once a stored byte changes."""
    run_driver(tmp_path, "step-1", "--seal")
    d = tmp_path / "step-1"
    assert (d / ".ckptfs-manifest").exists()
    p = subprocess.run([CKPT, "verify", "--data", str(d)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    sd = placeholder_state_dict()
    dcp.load(sd, checkpoint_id=str(d), no_dist=True)  # the sidecar does not bother torch
    check_loaded(sd)
    with open(d / ".metadata", "rb") as f:
        md = pickle.load(f)
    info = next(v for k, v in md.storage_data.items() if k.fqn == "model.layers.0.w")
    with open(d / info.relative_path, "r+b") as f:
        f.seek(info.offset + info.length - 200)
        b = f.read(1)
        f.seek(info.offset + info.length - 200)
        f.write(bytes([b[0] ^ 1]))
    p = subprocess.run([CKPT, "verify", "--data", str(d)], capture_output=True, text=True)
    assert p.returncode == 1, p.stdout + p.stderr


# ---------------------------------------------------------------- commit, latest, retention


def visible(parent):
    return sorted(n for n in os.listdir(parent) if not n.startswith("."))


def test_crash_before_commit_leaves_nothing_visible(tmp_path):
    run_driver(tmp_path, "step-1")
    p = run_driver(tmp_path, "step-2", "--crash-before-commit", check=False)
    assert p.returncode == -9, p.stderr  # SIGKILL after the staging .metadata was written
    assert visible(tmp_path) == ["latest", "step-1"]
    assert (tmp_path / "latest").read_text() == "step-1\n"
    hidden = [n for n in os.listdir(tmp_path) if n.startswith(".step-2.tmp-")]
    assert len(hidden) == 1 and (tmp_path / hidden[0] / ".metadata").exists()
    # the next save of that step works
    run_driver(tmp_path, "step-2")
    assert (tmp_path / "latest").read_text() == "step-2\n"


def test_abort_removes_staging(tmp_path):
    run_driver(tmp_path, "step-1")
    run_driver(tmp_path, "step-2", "--abort-before-commit")
    assert os.listdir(tmp_path) == ["latest", "step-1"] or \
        sorted(os.listdir(tmp_path)) == ["latest", "step-1"]
    assert (tmp_path / "latest").read_text() == "step-1\n"


def test_existing_step_is_refused(tmp_path):
    run_driver(tmp_path, "step-1")
    before = sorted(os.listdir(tmp_path / "step-1"))
    p = run_driver(tmp_path, "step-1", check=False)
    assert p.returncode == 1 and "already exists" in p.stderr
    assert sorted(os.listdir(tmp_path / "step-1")) == before
    assert sorted(os.listdir(tmp_path)) == ["latest", "step-1"]


def test_keep_n_retention(tmp_path):
    for s in (1, 2, 10, 3):
        run_driver(tmp_path, f"step-{s}", "--keep", "2")
    # numbered order: step-10 is the newest; the step just written (step-3) is protected
    assert visible(tmp_path) == ["latest", "step-10", "step-3"]
    assert (tmp_path / "latest").read_text() == "step-3\n"
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".deleting")]


@pytest.mark.skipif(not os.environ.get("CKPT_SAVE_BIG"), reason="set CKPT_SAVE_BIG=1 (writes 4.5 GiB)")
def test_zip64_tensor_over_4gib(tmp_path):
    """One 4.5 GiB chunk: Zip64 extra fields, records beyond 4 GiB; torch and zipfile read it."""
    n = 4831838208
    p = subprocess.run([os.environ["BENCH_SAVE"], str(tmp_path / "big"), "--one-tensor", str(n)],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    with open(tmp_path / "big" / "__0_0.distcp", "rb") as f:
        assert zipfile.ZipFile(f).testzip() is None
    t = torch.empty(n, dtype=torch.uint8)
    dcp.load({"big": t}, checkpoint_id=str(tmp_path / "big"), no_dist=True)
    a = t.numpy()
    for start in range(0, n, 1 << 28):
        idx = np.arange(start, min(n, start + (1 << 28)), dtype=np.int64)
        assert np.array_equal(a[start:start + len(idx)], ((idx * 131 + 7) & 0xFF).astype(np.uint8))


# ---------------------------------------------------------------- a real model and optimizer


def _json_value(v):
    import math
    if isinstance(v, tuple):
        return {"__tuple__": [_json_value(x) for x in v]}
    if isinstance(v, list):
        return [_json_value(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _json_value(x) for k, x in v.items()}
    if isinstance(v, float) and not math.isfinite(v):
        return {"__float__": "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")}
    if isinstance(v, float) and v == int(v) and abs(v) < 1e15:
        return float(v)  # json writes 1.0, still a float
    return v


def _spec_for(sd, tmp_path, nranks):
    """Flattens sd as dcp.save does and deals it over nranks simulated ranks: tensors with
    2+ rows Shard(0) (torch.chunk), others stored by rank 0 with the rest as replicas;
    values passed by every rank."""
    import json
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict
    flat, mappings = flatten_state_dict(sd)
    ranks = [{"rank": r, "items": []} for r in range(nranks)]
    n = 0
    for key, v in flat.items():
        path = list(mappings[key])
        for r in range(nranks):
            item = {"flat": key, "path": path}
            if isinstance(v, torch.Tensor):
                shape = list(v.shape)
                if v.dim() >= 1 and shape[0] >= 2:
                    c = -(-shape[0] // nranks)
                    lo, hi = min(r * c, shape[0]), min(r * c + c, shape[0])
                    box, replica = v[lo:hi], 0
                    offsets = [lo] + [0] * (v.dim() - 1)
                else:
                    box, replica, offsets = v, r, [0] * v.dim()
                f = tmp_path / f"t{n}.bin"
                n += 1
                f.write_bytes(raw(box.detach()).numpy().tobytes())
                item.update(kind="tensor", dtype=str(v.dtype).replace("torch.", ""),
                            shape=shape, offsets=offsets, sizes=list(box.shape), data=str(f),
                            replica=replica)
            else:
                item.update(kind="value", value=_json_value(v), replica=r)
            ranks[r]["items"].append(item)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"ranks": ranks}))
    return spec


def test_real_model_and_adamw_round_trip(tmp_path):
    """A model and its AdamW state (torch's get_state_dict), saved by the C saver over 3
    simulated ranks, loaded by dcp.load + set_state_dict into a fresh model and optimizer:
    parameters, optimizer state and the next training step are identical."""
    from torch import nn
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    spec_bin = os.environ.get("SAVE_SPEC")
    if not spec_bin:
        pytest.skip("SAVE_SPEC not set")

    def make(seed):
        torch.manual_seed(seed)
        m = nn.Sequential(nn.Linear(5, 7), nn.LayerNorm(7), nn.Linear(7, 3))
        m[2].to(torch.bfloat16)
        o = torch.optim.AdamW(m.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
        x = torch.randn(4, 5)
        m[2](m[1](m[0](x)).to(torch.bfloat16)).float().sum().backward()
        o.step()
        return m, o

    model, opt = make(0)
    msd, osd = get_state_dict(model, opt)
    spec = _spec_for({"model": msd, "optim": osd}, tmp_path, 3)
    p = subprocess.run([spec_bin, str(spec), str(tmp_path / "ckpt")], capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stderr

    model2, opt2 = make(1)
    msd2, osd2 = get_state_dict(model2, opt2)
    target = {"model": msd2, "optim": osd2}
    dcp.load(target, checkpoint_id=str(tmp_path / "ckpt"), no_dist=True)
    set_state_dict(model2, opt2, model_state_dict=target["model"],
                   optim_state_dict=target["optim"])
    for (n1, a), (n2, b) in zip(model.state_dict().items(), model2.state_dict().items()):
        assert n1 == n2 and bit_equal(a, b), n1
    s1, s2 = opt.state_dict(), opt2.state_dict()
    assert s1["param_groups"] == s2["param_groups"]
    for pid, st in s1["state"].items():
        for k, v in st.items():
            assert bit_equal(v, s2["state"][pid][k]), (pid, k)
    # one more identical step on both
    torch.manual_seed(5)
    x = torch.randn(4, 5)
    for m, o in ((model, opt), (model2, opt2)):
        o.zero_grad()
        m[2](m[1](m[0](x)).to(torch.bfloat16)).float().sum().backward()
        o.step()
    for a, b in zip(model.parameters(), model2.parameters()):
        assert bit_equal(a.detach(), b.detach())


def _older_torch_setstate(self, state):
    """TensorProperties.__setstate__ of torch 2.4 - 2.14 (checkpoint/metadata.py), which
    unpacks exactly five fields: torch 2.11 fails on torch 2.15's 6-tuple with "ValueError:
    too many values to unpack (expected 5)" (issue #23, seen on a GPU machine)."""
    from torch.distributed.checkpoint.metadata import _MEM_FORMAT_ENCODING
    (self.dtype, self.layout, self.requires_grad, mem_format_encoding,
     self.pin_memory) = state
    assert mem_format_encoding == _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT
    self.memory_format = torch.contiguous_format


def test_older_torch_reads_what_the_saver_and_reshard_write(tmp_path, monkeypatch):
    """By default the saver and `ckpt reshard` write the 5-field TensorProperties: torch
    2.4 - 2.14 (their __setstate__ stood in here) load both, values intact; with the 6th field
    (--strides, `ckpt reshard --torch 2.15`) they fail as torch 2.11 did."""
    from torch.distributed.checkpoint.metadata import TensorProperties
    run_driver(tmp_path, "step-1")
    run_driver(tmp_path, "step-2", "--strides")
    r = subprocess.run([CKPT, "reshard", "--ranks", "3", "-q", str(tmp_path / "step-1"),
                        str(tmp_path / "re")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([CKPT, "reshard", "--torch", "2.15", "-q", str(tmp_path / "step-1"),
                        str(tmp_path / "re215")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([CKPT, "reshard", "--torch", "2.3", str(tmp_path / "step-1"),
                        str(tmp_path / "re23")], capture_output=True, text=True)
    assert r.returncode == 2 and "before 2.4" in r.stderr, r.stderr
    monkeypatch.setattr(TensorProperties, "__setstate__", _older_torch_setstate)
    for d in ("step-1", "re"):
        sd = placeholder_state_dict()
        dcp.load(sd, checkpoint_id=str(tmp_path / d), no_dist=True)
        check_loaded(sd)
    for d in ("step-2", "re215"):
        with pytest.raises(ValueError, match="too many values to unpack"):
            dcp.FileSystemReader(str(tmp_path / d)).read_metadata()


def test_leftovers_of_killed_saves_are_reported_and_swept(tmp_path):
    """Issue #22: a killed save leaves its hidden staging directory, a killed retention its
    `.deleting` one.  `ckpt verify` on the run directory names them; the saver's retention
    removes `.deleting` ones and staging directories idle for a day, and keeps a recent
    staging directory (a save that may still be running)."""
    run_driver(tmp_path, "step-1")
    old = tmp_path / ".step-2.tmp-0123456789abcdef"
    fresh = tmp_path / ".step-3.tmp-fedcba9876543210"
    dele = tmp_path / ".step-0.deleting"
    for d in (old, fresh, dele):
        d.mkdir()
        (d / "__0_0.distcp").write_bytes(b"x" * 1000)
    two_days = time.time() - 2 * 86400
    for p in (old / "__0_0.distcp", old):
        os.utime(p, (two_days, two_days))
    r = subprocess.run([CKPT, "verify", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 1
    for d in (old, fresh, dele):
        assert d.name in r.stderr, r.stderr
    assert "safe to remove" in r.stderr and "once no save is running" in r.stderr, r.stderr
    run_driver(tmp_path, "step-4", "--keep", "5")
    assert not old.exists() and not dele.exists()
    assert fresh.is_dir() and (tmp_path / "step-1").is_dir() and (tmp_path / "step-4").is_dir()
