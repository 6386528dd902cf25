"""ckptfs.Checkpoint against torch's own reading of every fixture: listing (keys, paths,
torch dtypes, shapes), whole tensors and regions bit for bit, caller-supplied destinations,
values, and the errors of damaged checkpoints."""

import random
import re
import shutil
from pathlib import Path

import pytest
import torch

import ckptfs
from common import CORRUPT, bits, fixture_names, json_text, ref

NAMES = fixture_names()


def test_fixtures_present():
    assert len(NAMES) >= 5, NAMES


def test_installed_package_and_library():
    import os
    import sys
    assert ckptfs.__file__.startswith(sys.prefix), (ckptfs.__file__, sys.prefix)
    assert os.path.dirname(ckptfs.library_path) == os.path.dirname(ckptfs.__file__)
    assert ckptfs.__version__ == ckptfs._lib.lib.ckpt_version().decode()
    assert ckptfs._lib.has_loader and ckptfs._lib.has_object_budget  # the package's own


@pytest.mark.parametrize("name", NAMES)
def test_listing_and_whole_tensors(name):
    r = ref(name)
    with ckptfs.open(r.dir) as ck:
        assert [e.key for e in ck] == [e.key for e in r.entries]
        for re_, e in zip(r.entries, ck):
            assert e.is_tensor == re_.is_tensor, e.key
            assert ck.find(e.path) is e and ck[e.key] is e
            if re_.elems is not None:
                assert e.path_elems == re_.elems, e.key  # ints stay ints
            if not e.is_tensor:
                continue
            assert e.dtype == getattr(torch, re_.dtype), e.key
            assert e.shape == re_.shape, e.key
            t = ck.read_tensor(e)
            assert t.dtype == e.dtype and tuple(t.shape) == e.shape
            assert bits(t) == bits(r.tensor(re_)), f"{name}: {e.key}"


@pytest.mark.parametrize("name", NAMES)
def test_values(name):
    r = ref(name)
    with ckptfs.open(r.dir) as ck:
        for re_ in r.entries:
            if re_.is_tensor:
                continue
            v = ck.read_value(re_.key)
            assert json_text(v) == re_.json, f"{name}: {re_.key}: {v!r}"
            assert json_text(ck.read(re_.key)) == re_.json


@pytest.mark.parametrize("name", NAMES)
def test_random_regions(name):
    rnd = random.Random(name)
    r = ref(name)
    with ckptfs.open(r.dir) as ck:
        tensors = [e for e in r.entries if e.is_tensor and e.shape and 0 not in e.shape]
        for re_ in tensors[:25]:
            full = r.tensor(re_)
            for _ in range(4):
                region = []
                for n in re_.shape:
                    if rnd.random() < 0.2:
                        region.append(rnd.randrange(-n, n))  # an index: drops the dim
                    else:
                        a = rnd.randrange(0, n)
                        region.append(slice(a, rnd.randrange(a, n) + 1))
                region = tuple(region)
                got = ck.read_tensor(re_.key, region)
                want = full[region]
                assert got.shape == want.shape, (re_.key, region)
                assert bits(got) == bits(want), (name, re_.key, region)


def test_region_edge_cases():
    r = ref("fsdp2_ws2")
    re_ = next(e for e in r.entries if e.key == "model.tok_embeddings.weight")
    full = r.tensor(re_)
    with ckptfs.open(r.dir) as ck:
        for region in [(slice(3, 3),), (slice(3, 3), slice(10, 20)), (slice(-2, None),),
                       (-1, 2), (slice(1, 2),), slice(1, 2), (slice(None, 100), -6)]:
            got = ck.read_tensor(re_.key, region)
            want = full[region]
            assert got.shape == want.shape and bits(got) == bits(want), region
        import numpy as np
        assert bits(ck.read_tensor(re_.key, (np.int64(-1), 2))) == bits(full[-1, 2])
        with pytest.raises(ckptfs.InvalidArgumentError, match="True"):
            ck.read_tensor(re_.key, (True,))
        with pytest.raises(ckptfs.InvalidArgumentError, match="dimensions"):
            ck.read_tensor(re_.key, (0, 0, 0))


def test_every_dtype_as_torch_dtype():
    with ckptfs.open(ref("dtypes").dir) as ck:
        got = {e.dtype for e in ck if e.is_tensor}
    for dt in (torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.float8_e5m2,
               torch.complex64, torch.complex128, torch.bool, torch.uint16, torch.int8):
        assert dt in got, dt


def big_tensor(ck):
    return max((e for e in ck if e.is_tensor and e.ndim == 2), key=lambda e: e.numel)


def test_caller_supplied_destination():
    r = ref("fsdp2_ws4")
    with ckptfs.open(r.dir) as ck:
        e = big_tensor(ck)
        want = r.tensor(next(x for x in r.entries if x.key == e.key))
        out = torch.full(e.shape, float("nan"), dtype=e.dtype)
        ptr = out.data_ptr()
        assert ck.read_tensor(e, out=out) is out and out.data_ptr() == ptr
        assert bits(out) == bits(want)
        # a region into a view of a bigger buffer: rows 1.. of the tensor into buf[1:]
        buf = torch.zeros((e.shape[0] + 1,) + e.shape[1:], dtype=e.dtype)
        ck.read_tensor(e, (slice(1, None),), out=buf[2:])
        assert bits(buf[2:]) == bits(want[1:]) and bits(buf[:2]) == bits(torch.zeros_like(buf[:2]))


def test_refused_destinations():
    with ckptfs.open(ref("fsdp2_ws2").dir) as ck:
        e = big_tensor(ck)
        with pytest.raises(ckptfs.InvalidArgumentError, match="dtype"):
            ck.read_tensor(e, out=torch.empty(e.shape, dtype=torch.float64))
        with pytest.raises(ckptfs.InvalidArgumentError, match="shape"):
            ck.read_tensor(e, out=torch.empty((e.shape[0] + 1, e.shape[1]), dtype=e.dtype))
        with pytest.raises(ckptfs.InvalidArgumentError, match="contiguous"):
            ck.read_tensor(e, out=torch.empty(e.shape[::-1], dtype=e.dtype).t())
        with pytest.raises(ckptfs.InvalidArgumentError, match="torch.Tensor"):
            ck.read_tensor(e, out=bytearray(e.nbytes))
        with pytest.raises(ckptfs.InvalidArgumentError, match="out of range"):
            ck.read_tensor(e, (e.shape[0],))
        with pytest.raises(ckptfs.InvalidArgumentError, match="steps"):
            ck.read_tensor(e, (slice(0, 4, 2),))
        with pytest.raises(ckptfs.InvalidArgumentError, match="value"):
            ck.read_tensor("optim/param_groups/0/lr")
        with pytest.raises(ckptfs.NotFoundError) as ei:
            ck.read_tensor("no/such/key")
        assert isinstance(ei.value, KeyError) and "no/such/key" in str(ei.value)
    with pytest.raises(ckptfs.InvalidArgumentError, match="closed"):
        ck.read_tensor(e)


def test_staged_reads_slab_by_slab():
    """The staging loop of device reads, run on the CPU with a tiny staging buffer: slabs of
    rows, a row bigger than the buffer, 0-d, empty and index (dropped-dim) regions."""
    from ckptfs._reader import _region
    r = ref("dtypes")
    with ckptfs.open(r.dir) as ck:
        n = 0
        for re_ in r.entries:
            if not re_.is_tensor:
                continue
            full = r.tensor(re_)
            regions = [None]
            if re_.shape and re_.shape[0] > 1:
                regions += [(slice(1, None),), (re_.shape[0] - 1,)]
            for region in regions:
                start, count, shape = _region(re_.shape, region)
                want = full[region] if region else full
                for stage in (1, 24, 1000):
                    out = torch.empty(shape, dtype=want.dtype)
                    ck._read_staged(ck[re_.key], start, count, out, stage_bytes=stage)
                    assert bits(out) == bits(want), (re_.key, region, stage)
                    n += 1
        assert n > 100


def test_cuda_destination():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    r = ref("dtypes")
    with ckptfs.open(r.dir) as ck:
        for re_ in r.entries:
            if re_.is_tensor:
                t = ck.read_tensor(re_.key, device="cuda")
                assert t.is_cuda and bits(t) == bits(r.tensor(re_)), re_.key
                out = torch.empty(re_.shape, dtype=t.dtype, device="cuda")
                ck.read_tensor(re_.key, out=out)
                assert bits(out) == bits(r.tensor(re_)), re_.key


def test_open_errors(tmp_path):
    with pytest.raises(ckptfs.NotFoundError, match="nonexistent"):
        ckptfs.open(tmp_path / "nonexistent")
    with pytest.raises(ckptfs.NotFoundError, match=".metadata"):
        ckptfs.open(tmp_path)


def damaged_copy(tmp_path, name="fsdp2_ws4"):
    d = tmp_path / name
    shutil.copytree(ref(name).dir, d)
    return d


def test_missing_shard_names_the_file(tmp_path):
    d = damaged_copy(tmp_path)
    (d / "__3_0.distcp").unlink()
    with ckptfs.open(d) as ck:  # the index opens; reads that need the file fail
        failed = ok = 0
        for e in ck:
            try:
                ck.read(e)
                ok += 1
            except ckptfs.CkptError as ex:
                assert "__3_0.distcp" in str(ex), str(ex)
                assert isinstance(ex, ckptfs.NotFoundError), type(ex)
                failed += 1
        assert failed and ok


def test_corrupt_file_names_the_file(tmp_path):
    d = damaged_copy(tmp_path)
    p = d / "__0_0.distcp"
    p.write_bytes(p.read_bytes()[:len(p.read_bytes()) // 3])  # truncated
    with ckptfs.open(d) as ck:
        errors = []
        for e in ck:
            try:
                ck.read(e)
            except ckptfs.CkptError as ex:
                errors.append(ex)
        assert errors
        assert all("__0_0.distcp" in str(ex) for ex in errors), [str(x) for x in errors]


@pytest.mark.skipif(not (CORRUPT / "bitflip_frame").is_dir(), reason="no corrupt fixtures")
def test_corrupt_fixtures_raise_ckpt_errors():
    seen = 0
    for case in sorted(p for p in CORRUPT.iterdir() if (p / "ckpt").is_dir()):
        try:
            ck = ckptfs.open(case / "ckpt")
        except ckptfs.CkptError as ex:
            assert str(ex), case.name
            seen += 1
            continue
        with ck:
            for e in ck:
                try:
                    ck.read(e)
                except ckptfs.CkptError as ex:
                    assert str(ex), case.name
                    seen += 1
    assert seen > 10


class Custom:  # an instance of a class ckptfs does not rebuild
    def __init__(self):
        self.a, self.b = 1, "two"


def test_values_of_every_kind_against_torch(tmp_path):
    """A checkpoint torch writes with values of every kind: ckptfs's data-only decoding gives
    what torch's unpickling gives (a symbolic Object for an unknown class)."""
    import collections
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict
    from torch.distributed.checkpoint.default_planner import _EmptyStateDictLoadPlanner
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict
    vals = {
        "none": None, "t": True, "i": -7, "big": 2 ** 100, "neg_big": -(3 ** 70), "f": -0.0,
        "nan": float("nan"), "s": "ünï\tcode", "b": b"\x00\xff", "l": [1, [2, (3, "x")]],
        "tup": (1.5, None), "d": ({1: "a", (2, 3): [4]},),
        "od": (collections.OrderedDict(z=1, a=2),), "set": {1, 2, 3}, "fs": frozenset({"a"}),
        "c": complex(1.5, -2), "r": range(1, 10, 3), "sl": slice(1, None, 2),
        "ba": bytearray(b"xy"), "dt": torch.bfloat16,
        "tensor_in": ("x", {"w": torch.arange(6, dtype=torch.int16).reshape(2, 3)}),
        "custom": Custom(),
    }
    d = tmp_path / "c"
    dcp.save({"w": torch.arange(4.0), "vals": vals}, checkpoint_id=d, no_dist=True)
    theirs = {}
    _load_state_dict(theirs, storage_reader=FileSystemReader(d),
                     planner=_EmptyStateDictLoadPlanner(), no_dist=True)
    flat, _ = flatten_state_dict(theirs)
    seen = set()
    with ckptfs.open(d) as ck:
        for e in ck:
            if e.is_tensor:
                continue
            got, want = ck.read_value(e), flat[e.key]
            seen.add(e.path_elems[1])
            if e.key == "vals.custom":
                assert isinstance(got, ckptfs.Object) and got.cls.endswith(".Custom"), got
                assert got.state == {"a": 1, "b": "two"}, got
            elif e.key == "vals.nan":
                assert got != got
            elif e.key == "vals.od":  # OrderedDict is read as a dict (docs/python.md)
                assert got == want and type(got[0]) is dict, got
            elif e.key == "vals.tensor_in":
                assert got[0] == "x" and torch.equal(got[1]["w"], want[1]["w"])
            else:
                assert got == want and repr(got) == repr(want), (e.key, got, want)
    assert seen == set(vals), seen


def test_deepest_value(tmp_path):
    """A value nested as deep as libckpt allows (256 containers) builds; deeper is its
    LimitError, not a Python RecursionError."""
    import torch.distributed.checkpoint as dcp
    for depth, ok in ((254, True), (300, False)):
        v = 1
        for _ in range(depth):
            v = [v]
        d = tmp_path / str(depth)
        dcp.save({"v": (v,)}, checkpoint_id=d, no_dist=True)
        with ckptfs.open(d) as ck:
            if not ok:
                with pytest.raises(ckptfs.LimitError, match="nested too deeply"):
                    ck.read_value("v")
                continue
            x, n = ck.read_value("v")[0], 0
            while isinstance(x, list):
                x, n = x[0], n + 1
            assert (x, n) == (1, depth)


def test_value_memory_budget(tmp_path):
    """Issue #22: a value's decode is held to a memory budget.  A list of 400 k small ints
    that torch's dcp.save pickles into ~0.8 MB (2 bytes an int) decodes into ~35 MB: at
    max_memory=8 MiB read_value raises LimitError naming the key and the budget (read, and a
    Checkpoint's max_value_memory, too); with the default (1 GiB) and with 0 (the reader's
    limits only) it reads whole; a small dict reads within 1 MiB."""
    import torch.distributed.checkpoint as dcp
    ints = [i % 100 for i in range(400_000)]
    small = {"lr": 0.001, "betas": (0.9, 0.999), "name": "adamw", "steps": [1, 2, 3]}
    d = tmp_path / "c"
    dcp.save({"w": torch.arange(4.0), "ints": (ints,), "cfg": (small,)}, checkpoint_id=d,
             no_dist=True)
    stored = sum(p.stat().st_size for p in d.glob("*.distcp"))
    assert stored < 2 << 20, stored  # the pickle stays small
    budget = 8 << 20
    with ckptfs.open(d) as ck:
        assert ck.VALUE_MEMORY == 1 << 30 and ck.max_value_memory is None
        for read in (ck.read_value, ck.read):
            with pytest.raises(ckptfs.LimitError) as ex:
                read("ints", max_memory=budget)
            msg = str(ex.value)
            assert "'ints'" in msg and f"memory budget of {budget} bytes" in msg, msg
            assert ex.value.status == "CKPT_E_LIMIT"
        assert ck.read_value("ints") == (ints,)  # the default budget
        assert ck.read("ints") == (ints,)
        assert ck.read_value("ints", max_memory=0) == (ints,)  # the reader's limits only
        assert ck.read_value("cfg", max_memory=1 << 20) == (small,)
        assert ck.read("cfg", max_memory=1 << 20) == (small,)
        assert torch.equal(ck.read("w", max_memory=1 << 20), torch.arange(4.0))  # (ignored)
        for bad in (-1, 1.5, "8M", True):
            with pytest.raises(ckptfs.InvalidArgumentError):
                ck.read_value("cfg", max_memory=bad)
    with ckptfs.open(d, max_value_memory=budget) as ck:  # the Checkpoint's default
        with pytest.raises(ckptfs.LimitError, match="'ints'"):
            ck.read_value("ints")
        assert ck.read_value("ints", max_memory=64 << 20) == (ints,)
        assert ck.read_value("cfg") == (small,)


def test_reads_from_many_threads():
    """One Checkpoint read from 8 threads at once (the C calls release the GIL)."""
    from concurrent.futures import ThreadPoolExecutor
    r = ref("zstd") if "zstd" in NAMES else ref("fsdp2_ws4")
    tensors = [e for e in r.entries if e.is_tensor] * 20
    with ckptfs.open(r.dir) as ck, ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda e: bits(ck.read_tensor(e.key)), tensors))
    assert got == [bits(r.tensor(e)) for e in tensors]


# The ctypes mirrors of the public structs (python/ckptfs/_lib.py) against the headers they
# copy: a field added in C but not here makes the library write past a Python-made struct
# (ckpt_load_stats grew by four fields once and every rank of a load crashed).
MIRRORS = {"Error": "ckpt_error", "Limits": "ckpt_limits", "OpenOptions": "ckpt_open_options",
           "ReaderInfo": "ckpt_reader_info", "ChunkInfo": "ckpt_chunk_info",
           "Placement": "ckpt_placement", "Layout": "ckpt_layout",
           "Transport": "ckpt_transport", "LoadOptions": "ckpt_load_options",
           "LoadStats": "ckpt_load_stats", "ObjectOptions": "ckpt_object_options"}


def c_fields(text, name):
    m = re.search(r"typedef struct %s\s*\{(.*?)\}\s*%s;" % (name, name), text, re.S)
    assert m, name
    body = re.sub(r"/\*.*?\*/", "", m.group(1), flags=re.S)
    body = re.sub(r"\([^()]*\)\s*;", ";", body)  # function pointers: drop the argument list
    names = []
    for decl in body.split(";"):
        decl = decl.strip()
        if not decl:
            continue
        fp = re.search(r"\(\s*\*\s*(\w+)\s*\)", decl)
        if fp:
            names.append(fp.group(1))
            continue
        for part in decl.split(","):
            part = re.sub(r"\[.*?\]", "", part).strip()
            names.append(re.findall(r"\w+", part)[-1])
    return names


def test_ctypes_mirrors_match_the_headers():
    import ckptfs._lib as lib
    root = Path(__file__).resolve().parents[2] / "include"
    text = "\n".join(p.read_text() for p in sorted(root.glob("*.h")))
    for py, c in MIRRORS.items():
        ours = [f[0] for f in getattr(lib, py)._fields_]
        assert ours == c_fields(text, c), (py, c)
