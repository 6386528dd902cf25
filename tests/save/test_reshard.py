"""`ckpt reshard SRC DST [--ranks M]`, one process and under mpirun.

Sources: checkpoints real torch wrote — one saved here with `dcp.save` (several dtypes, a
nested state_dict with lists, non-tensor values) and the bundled fixtures (FSDP2 over 4 ranks,
tensor parallel Shard(1), HSDP, replicated, every dtype, zstd-compressed chunks).  After a
reshard to M ranks:
  * `.metadata` lays every tensor out as torch.chunk Shard(0) pieces over the M files;
  * real torch reads both with `dcp_to_torch_save` and every tensor is bit-identical, every value
    equal, the nested structure the same (entry order aside); `dcp.load` into a placeholder
    state_dict too;
  * values of every kind torch pickles (bytes, sets, frozensets, big ints, dicts with int /
    tuple / None keys, OrderedDicts, objects of other classes) come back equal and of the same
    type: a plain stored item is copied byte for byte; a zstd-transformed one is pickled again
    through the saver's value model, byte-identical to torch's own data.pkl of the same value;
    an object inside a transformed item fails with exit 1 naming the key, and creates
    nothing.
Environment: CKPT_BIN, CKPT_FIXTURES / CKPT_FIXTURES_DEFAULT.
"""
import json
import os
import pickle
import subprocess
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save  # noqa: E402

CKPT = os.environ.get("CKPT_BIN", "")
FIXTURES = Path(os.environ.get("CKPT_FIXTURES") or os.environ.get("CKPT_FIXTURES_DEFAULT")
                or "tests/fixtures/data")
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]
pytestmark = pytest.mark.skipif(not CKPT, reason="CKPT_BIN not set")


def has_mpi():
    p = subprocess.run([CKPT, "--help"], capture_output=True, text=True)
    return "\n  load " in p.stdout


# sanitizer builds pass leak-checking ASAN_OPTIONS here; runs with leak=True use them
LEAK_ASAN = os.environ.get("CKPT_LEAK_ASAN_OPTIONS")


def reshard(src, dst, ranks, mpi, dim=0, leak=False):
    if mpi:
        cmd = MPIRUN + ["-np", str(ranks), CKPT, "reshard", "--no-fsync", "--budget", "64K",
                        "--layout", f"dim{dim}", str(src), str(dst)]
    else:
        cmd = [CKPT, "reshard", "--no-fsync", "--ranks", str(ranks), "--layout", f"dim{dim}",
               str(src), str(dst)]
    env = dict(os.environ, ASAN_OPTIONS=LEAK_ASAN) if leak and LEAK_ASAN else None
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)


def bits(t):
    return t.contiguous().reshape(-1).view(torch.uint8)


def same(a, b, where="root"):
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(bits(a), bits(b)), where
    elif isinstance(a, dict):
        # same keys; the order of entries in .metadata is not kept
        assert isinstance(b, dict) and sorted(a, key=str) == sorted(b, key=str), (where, list(a))
        for k in a:
            same(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}/{i}")
    elif isinstance(a, float) and a != a:
        assert isinstance(b, float) and b != b, (where, b)
    else:
        assert a == b and type(a) is type(b), (where, a, b)


def full(ckpt, tmp):
    out = tmp / (ckpt.name + ".pt")
    dcp_to_torch_save(str(ckpt), str(out))
    return torch.load(out, weights_only=False)


def check_layout(dst, ranks, dim=0):
    md = pickle.load(open(dst / ".metadata", "rb"))
    files = {info.relative_path for info in md.storage_data.values()}
    assert files <= {f"__{k}_0.distcp" for k in range(ranks)}
    for key, m in md.state_dict_metadata.items():
        if not hasattr(m, "chunks"):
            continue
        shape = tuple(m.size)
        if len(shape) <= dim:  # replicated: stored whole, once
            assert len(m.chunks) == 1 and tuple(m.chunks[0].sizes) == shape, key
            continue
        want = [(k * c, min(c, shape[dim] - k * c)) for c in [-(-shape[dim] // ranks)]
                for k in range(ranks) if k * c < shape[dim]] or [(0, 0)]
        got = sorted((ch.offsets[dim], ch.sizes[dim]) for ch in m.chunks)
        assert got == want, (key, got, want)
        assert all(tuple(ch.sizes[:dim]) + tuple(ch.sizes[dim + 1:]) ==
                   shape[:dim] + shape[dim + 1:] for ch in m.chunks), key


@pytest.fixture(scope="module")
def torch_ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("src") / "ckpt"
    g = torch.Generator().manual_seed(5)
    sd = {
        "model": {
            "emb": torch.randn(11, 6, generator=g),
            "w": torch.randn(5, 3, generator=g).to(torch.bfloat16),
            "h": torch.randn(4, generator=g).to(torch.float16),
            "ids": torch.arange(-7, 7, dtype=torch.int64).reshape(2, 7),
            "mask": torch.rand(3, 3, generator=g) > 0.5,
            "scale": torch.tensor(2.5),
            "empty": torch.empty(0, 4),
        },
        "optim": {"param_groups": [{"lr": 0.01, "betas": (0.9, 0.95), "name": "adamw",
                                    "params": ["model.emb", "model.w"], "fused": None,
                                    "amsgrad": False}],
                  "state": {"model.emb": {"step": torch.tensor(3.0),
                                          "exp_avg": torch.randn(11, 6, generator=g)}}},
        "step": 1234,
        "cfg": {"layers": [1, 2, 3], "act": "gelu"},
    }
    dcp.save(sd, checkpoint_id=str(d), no_dist=True)
    return d


CASES = [(1, False), (3, False), (2, True), (3, True)]


@pytest.mark.parametrize("ranks,mpi", CASES)
def test_reshard_torch_saved(torch_ckpt, tmp_path, ranks, mpi):
    if mpi and not has_mpi():
        pytest.skip("ckpt built without MPI")
    dst = tmp_path / "dst"
    p = reshard(torch_ckpt, dst, ranks, mpi, leak=True)
    assert p.returncode == 0, p.stdout + p.stderr
    check_layout(dst, ranks)
    same(full(torch_ckpt, tmp_path), full(dst, tmp_path))
    # dcp.load into a state_dict of placeholders of the right shapes
    ref = full(torch_ckpt, tmp_path)
    sd = {"model": {k: torch.zeros_like(v) for k, v in ref["model"].items()}}
    dcp.load(sd, checkpoint_id=str(dst), no_dist=True)
    same(ref["model"], sd["model"])


# (the `dtypes` and `plain_replicated` fixtures hold dicts with int keys, which the saver
# cannot write yet: test_unsupported_value_fails_cleanly)
@pytest.mark.parametrize("name", ["fsdp2_ws4", "fsdp2_ws1", "tp_shard1", "hsdp", "megatron",
                                  "zstd"])
@pytest.mark.parametrize("ranks,mpi", [(3, False), (2, True)])
def test_reshard_fixtures(tmp_path, name, ranks, mpi):
    if mpi and not has_mpi():
        pytest.skip("ckpt built without MPI")
    src = FIXTURES / name / "ckpt"
    if not (src / ".metadata").exists():  # a regenerated set lacks what needs a missing package
        pytest.skip(f"fixture {name} is not in {FIXTURES}")
    dst = tmp_path / "dst"
    p = reshard(src, dst, ranks, mpi)
    assert p.returncode == 0, p.stdout + p.stderr
    check_layout(dst, ranks)
    same(full(src, tmp_path), full(dst, tmp_path))


@pytest.mark.parametrize("name", ["hf_full", "hf_sharded", "megatron_flat", "torch113"])
@pytest.mark.parametrize("ranks,mpi", [(3, False), (2, True)])
def test_reshard_to_plain_dcp(tmp_path, name, ranks, mpi):
    """HuggingFace safetensors storage, Megatron's flattened optimizer states or a torch 1.13
    checkpoint in; a plain DCP checkpoint for M ranks out: torch alone reads every entry back
    as the fixture's reference has it (torch's HuggingFaceStorageReader; megatron-core's own
    load, in the original shapes, which torch alone cannot read from the source; torch 1.13's
    own load, where stock torch 2.15 fails on the source)."""
    if mpi and not has_mpi():
        pytest.skip("ckpt built without MPI")
    src = FIXTURES / name / "ckpt"
    if not src.is_dir():
        pytest.skip(f"fixture {name} is not in {FIXTURES}")
    dst = tmp_path / "dst"
    p = reshard(src, dst, ranks, mpi)
    assert p.returncode == 0, p.stdout + p.stderr
    check_layout(dst, ranks)
    got = full(dst, tmp_path)
    blob = (FIXTURES / name / "reference.bin").read_bytes()
    lines = (FIXTURES / name / "reference.tsv").read_text().splitlines()
    assert lines and len(got) == len(lines)
    for line in lines:
        if line.startswith("O\t"):  # a value: its JSON rendering (tuples as lists)
            key, js = line.split("\t")[1:3]
            assert json.dumps(got[key], separators=(",", ":"), ensure_ascii=False) == js, key
            continue
        kind, key, dtype, shape, off, n = line.split("\t")[:6]
        t = got[key]
        assert kind == "T" and str(t.dtype) == "torch." + dtype, key
        assert list(t.shape) == [int(x) for x in shape.split(",") if x], key
        raw = t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        assert raw == blob[int(off):int(off) + int(n)], key


@pytest.mark.parametrize("ranks,mpi", [(3, False), (2, True)])
def test_reshard_dim1(torch_ckpt, tmp_path, ranks, mpi):
    """--layout dim1: 2-D tensors split by columns, 1-D and 0-d ones stored whole once."""
    if mpi and not has_mpi():
        pytest.skip("ckpt built without MPI")
    for src in (torch_ckpt, FIXTURES / "tp_shard1" / "ckpt"):
        dst = tmp_path / ("dst-" + src.parent.name)
        p = reshard(src, dst, ranks, mpi, dim=1)
        assert p.returncode == 0, p.stdout + p.stderr
        check_layout(dst, ranks, dim=1)
        same(full(src, tmp_path), full(dst, tmp_path))


def data_values():
    """Values torch pickles as data (tuples keep nested dicts from being flattened)."""
    return {
        "w": torch.arange(10.0).reshape(5, 2),
        "raw": b"\x00\x01\xff", "nothing": b"", "ids": {1, 2, 3},
        "raws": (b"xy\x80", b"", b"z"),  # 'latin1' and the functions memoised (BINGET)
        "big": 2**80, "nbig": -3 * 2**300,
        "misc": ({1: "one", (2, 3): b"t", None: 1.5, 2**65: {4}, -5: {"k": 1},
                  2.5: [1, (), (1,)]},),
        # batch edges of CPython's pickler: 1001-item list and set, 1000- and 2001-item dicts
        "many": (list(range(1001)), {str(i): i for i in range(1000)}, set(range(1001)),
                 {i: i for i in range(2001)}, [[1]]),
    }


def object_values():
    import collections
    import datetime
    import types
    return {"frozen": frozenset({"a", "b"}), "ns": types.SimpleNamespace(a=1, b=[2]),
            "when": datetime.date(2024, 1, 2),
            "ods": (collections.OrderedDict([("b", 1), ("a", 2)]),)}


def deep_types(a, b, where="root"):
    assert type(a) is type(b), (where, type(a), type(b))
    if isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            deep_types(a[k], b[k], f"{where}/{k}")
    elif isinstance(a, (list, tuple)):
        for i, (x, y) in enumerate(zip(a, b)):
            deep_types(x, y, f"{where}/{i}")


def load_like(ckpt, sd):
    out = {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else None for k, v in sd.items()}
    dcp.load(out, checkpoint_id=str(ckpt), no_dist=True)
    return out


def check_values(got, want):
    for k, v in want.items():
        if isinstance(v, torch.Tensor):
            assert torch.equal(bits(got[k]), bits(v)), k
        else:
            assert got[k] == v, (k, got[k])
            deep_types(got[k], v, k)


def value_items(ckpt, member=None):
    """{fqn: the stored archive of each value (or its `member` record)}."""
    import io
    import zipfile
    md = pickle.load(open(ckpt / ".metadata", "rb"))
    out = {}
    for idx, info in md.storage_data.items():
        if idx.index is not None:
            continue
        with open(ckpt / info.relative_path, "rb") as f:
            f.seek(info.offset)
            blob = f.read(info.length)
        if member:
            z = zipfile.ZipFile(io.BytesIO(blob))
            blob = z.read(next(n for n in z.namelist() if n.endswith("/" + member)))
        out[idx.fqn] = blob
    return out


@pytest.mark.parametrize("mpi", [False, True])
def test_values_of_every_kind_copied_unchanged(tmp_path, mpi):
    """Plain stored value items (what dcp.save writes by default) are copied byte for byte,
    so objects, frozensets and OrderedDicts come back as they were."""
    if mpi and not has_mpi():
        pytest.skip("ckpt built without MPI")
    sd = {**data_values(), **object_values()}
    src, dst = tmp_path / "src", tmp_path / "dst"
    dcp.save(sd, checkpoint_id=str(src), no_dist=True)
    p = reshard(src, dst, 2, mpi, leak=not mpi)
    assert p.returncode == 0, p.stdout + p.stderr
    check_values(load_like(dst, sd), sd)
    a, b = value_items(src), value_items(dst)
    assert a.keys() == b.keys() == set(sd) - {"w"}
    assert all(a[k] == b[k] for k in a), [k for k in a if a[k] != b[k]]


def zstd_writer(path):
    from torch.distributed.checkpoint import FileSystemWriter
    from torch.distributed.checkpoint._extension import ZStandard
    if not ZStandard.is_available():
        pytest.skip("ZStandard unavailable (pip install zstandard)")
    return FileSystemWriter(str(path), _extensions=[ZStandard()])


@pytest.mark.parametrize("mpi", [False, True])
def test_transformed_values_pickled_again_like_torch(tmp_path, mpi):
    """zstd-transformed value items cannot be referenced without their transform, so the
    reshard decodes them and pickles them again through the saver's value model: torch reads
    equal values of the same types, and every data.pkl is byte-identical to the one torch
    writes for the same value in a plain checkpoint (CPython's protocol-2 opcodes)."""
    if mpi and not has_mpi():
        pytest.skip("ckpt built without MPI")
    sd = data_values()
    plain, z, dst = tmp_path / "plain", tmp_path / "z", tmp_path / "dst"
    dcp.save(sd, storage_writer=zstd_writer(z), no_dist=True)
    dcp.save(sd, checkpoint_id=str(plain), no_dist=True)
    p = reshard(z, dst, 2, mpi, leak=not mpi)
    assert p.returncode == 0, p.stdout + p.stderr
    check_values(load_like(dst, sd), sd)
    a, b = value_items(plain, "data.pkl"), value_items(dst, "data.pkl")
    assert a.keys() == b.keys()
    assert all(a[k] == b[k] for k in a), [k for k in a if a[k] != b[k]]


def test_transformed_frozenset_stays_frozen(tmp_path):
    """A frozenset in a zstd-transformed item is pickled again as a frozenset (the reader
    marks it, ckpt_value_set_frozen): it used to come back as a set."""
    sd = {"f": frozenset({"a", "b"}), "s": {1, 2}, "nested": [frozenset()]}
    z, dst = tmp_path / "z", tmp_path / "dst"
    dcp.save(sd, storage_writer=zstd_writer(z), no_dist=True)
    p = reshard(z, dst, 2, False, leak=True)
    assert p.returncode == 0, p.stdout + p.stderr
    got = load_like(dst, sd)
    check_values(got, sd)
    deep_types(got, sd)


@pytest.mark.parametrize("mpi", [False, True])
@pytest.mark.parametrize("key", ["ns", "when"])
def test_object_in_transformed_item_fails_cleanly(tmp_path, mpi, key):
    """An object of another class inside a transformed item cannot be rebuilt as data: exit 1
    naming the key, nothing created."""
    if mpi and not has_mpi():
        pytest.skip("ckpt built without MPI")
    src = tmp_path / "src"
    dcp.save({"w": torch.ones(5, 2), "lr": 0.5, key: object_values()[key]},
             storage_writer=zstd_writer(src), no_dist=True)
    p = reshard(src, tmp_path / "dst", 2, mpi)
    assert p.returncode == 1, p.stdout + p.stderr
    assert f"key '{key}': the value holds an object of another class" in p.stderr, p.stderr
    assert not (tmp_path / "dst").exists()
    assert [n for n in os.listdir(tmp_path) if n.startswith(".")] == []  # no staging left


def test_mpi_ranks_mismatch_is_a_usage_error(torch_ckpt, tmp_path):
    if not has_mpi():
        pytest.skip("ckpt built without MPI")
    p = subprocess.run(MPIRUN + ["-np", "2", CKPT, "reshard", "--ranks", "3", str(torch_ckpt),
                                 str(tmp_path / "dst")], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "--ranks 3" in p.stderr, p.stdout + p.stderr
    assert not (tmp_path / "dst").exists()


@pytest.mark.parametrize("mpi", [False, True])
@pytest.mark.parametrize("case", ["unknown_dtype", "outside_shape"])
def test_damaged_entry_fails_naming_it(tmp_path, mpi, case):
    """A tensor the reader marks as damaged (hostile or broken .metadata) stops the reshard
    with its key named; nothing is published."""
    if mpi and not has_mpi():
        pytest.skip("ckpt built without MPI")
    src = Path(__file__).resolve().parent.parent / "fixtures" / "corrupt" / case / "ckpt"
    p = reshard(src, tmp_path / "dst", 2, mpi)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "key 'a': " in p.stderr, p.stderr
    assert not (tmp_path / "dst").exists()
    assert [n for n in os.listdir(tmp_path) if n.startswith(".")] == []
