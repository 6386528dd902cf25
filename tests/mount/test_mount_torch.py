"""test_mount_torch.py — the mount's `.torch/` view (real FUSE mounts), with torch as the
referee: for every fixture, through direct I/O and through the page cache,
torch.load(`.torch/@all.pt`, weights_only=True, mmap=True) equals torch's own
dcp_to_torch_save of the same checkpoint (or, where torch cannot read it, its reference
tensors), bit for bit, nested dicts, lists, values holding tensors and the optimizer state included,
and each
`.torch/<top>.pt` equals that top-level value; torch's own record-offset arithmetic agrees
with the layout; the view's bytes are `ckpt export --format torch`'s, real CRC-32s of the
tensor records included (computed when first read), also under concurrent unaligned preads,
and every `.torch/` archive of a checkpoint saved by real dcp.save passes zipfile's CRC
check (`-o torch_zero_crc` gives 0 instead, and a shard that fails to read fails the read
of a CRC with EIO); nothing is left out of them (the log says so); an optimizer state_dict
keyed by FQN also shows as
`<top>.by-id.pt` (torch.optim's form, as `ckpt export --by-id`), which a plain optimizer
loads; a 4 GiB tensor (a sparse safetensors file) gives a Zip64 archive that torch maps.

Environment: CKPTFS_BIN, CKPT_BIN (the built daemon and CLI); CKPT_FIXTURES /
CKPT_FIXTURES_DEFAULT.
"""

from __future__ import annotations

import gc
import json
import os
import random
import struct
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cli"))
import test_mount as tm  # noqa: E402  (the Mount helper; skips itself without a daemon)
from test_export_torch import (diff, leaves, load_checked, reference_tensors,  # noqa: E402
                               torch_reading)

CKPT = os.environ.get("CKPT_BIN")
if not CKPT:
    pytest.skip("CKPT_BIN is not set (run through meson test)", allow_module_level=True)
FIXTURES = tm.FIXTURES
NAMES = tm.NAMES


@pytest.fixture(scope="module", params=[(n, mode) for n in NAMES
                                        for mode in ("default", "page_cache")],
                ids=lambda p: f"{p[0]}-{p[1]}")
def mounted(request, tmp_path_factory):
    name, mode = request.param
    fixture = FIXTURES / name
    m = tm.Mount(fixture / "ckpt", *(() if mode == "default" else (mode,)))
    tmp = tmp_path_factory.mktemp(name)
    yield m, fixture, torch_reading(fixture / "ckpt", tmp), tmp
    m.close()


def escape(element: str) -> str:
    """A path element as the mount names it (docs/naming.md, "Escaping"; long names aside)."""
    if element in ("", ".", ".."):
        return {"": "%", ".": "%2E", "..": "%2E%2E"}[element]
    return "".join(f"%{ord(c):02X}" if c in "%/" or ord(c) < 0x20 or ord(c) == 0x7F else c
                   for c in element)


def zeroed_crcs(export: bytes) -> bytes:
    """An exported archive with the CRC-32 of every tensor record (data/N) zeroed in its data
    descriptor and central directory entry: what the view serves under -o torch_zero_crc."""
    out = bytearray(export)
    import io
    z = zipfile.ZipFile(io.BytesIO(export))
    for i in z.infolist():
        if not i.filename.startswith("archive/data/"):
            continue
        h = i.header_offset
        nl, xl = struct.unpack("<HH", export[h + 26:h + 30])
        assert export[h + 14:h + 18] == bytes(4)  # the local header's: in the descriptor
        if i.file_size:
            d = h + 30 + nl + xl + i.file_size
            assert export[d:d + 4] == b"PK\x07\x08"
            out[d + 4:d + 8] = bytes(4)
    at = z.start_dir
    while export[at:at + 4] == b"PK\x01\x02":
        nl, xl, cl = struct.unpack("<HHH", export[at + 28:at + 34])
        if export[at + 46:at + 46 + nl].startswith(b"archive/data/"):
            out[at + 16:at + 20] = bytes(4)
        at += 46 + nl + xl + cl
    return bytes(out)


def test_views_load_as_torch_reads_the_checkpoint(mounted, monkeypatch):
    m, fixture, want, _ = mounted
    tdir = m.dir / ".torch"
    names = sorted(p.name for p in tdir.iterdir())
    tops = sorted(p.name for p in m.dir.iterdir() if p.is_dir() and not p.name.startswith("."))
    optims = [t for t in tops if (m.dir / t / "param_groups").is_dir()]
    files = [p.name for p in m.dir.iterdir() if not p.name.startswith(".") and not p.is_dir()]
    assert names == sorted(["@all.pt"] + [t + ".pt" for t in tops] +
                           [t + ".by-id.pt" for t in optims] + (["@root.pt"] if files else []))
    got = load_checked(tdir / "@all.pt", monkeypatch)
    if files:  # @root.pt: the entries at the root, as torch reads them, in torch's order
        sub = load_checked(tdir / "@root.pt", monkeypatch)
        want_root = {k: v for k, v in got.items() if escape(k) in files}
        assert list(sub) == list(want_root)
        d = diff(want_root, sub)
        assert not d, d[:5]
    if want is not None:
        d = diff(want, got)
        assert not d, d[:10]
    else:
        flat = dict(leaves(got))
        for p, t in reference_tensors(fixture).items():
            assert not diff(t, flat[p], p), p
    for top in tops:
        sub = load_checked(tdir / f"{top}.pt", monkeypatch)
        d = diff(got[top], sub)
        assert not d, (top, d[:5])
    assert "left out" not in m.log()


def test_optimizer_state_keeps_its_shape(mounted):
    m, fixture, want, _ = mounted
    if fixture.name != "fsdp2_ws4":
        pytest.skip("the FSDP2 model + AdamW fixture")
    optim = torch.load(m.dir / ".torch" / "optim.pt", weights_only=True, mmap=True)
    assert list(optim) == ["state", "param_groups"]
    assert isinstance(optim["param_groups"], list) and len(optim["param_groups"]) == 1
    g = optim["param_groups"][0]
    assert g["params"] == list(optim["state"]) and g["betas"] == (0.9, 0.999)
    for fqn, st in optim["state"].items():
        assert set(st) == {"step", "exp_avg", "exp_avg_sq"}, fqn
        assert st["exp_avg"].shape == want["model"][fqn].shape


def test_by_id_view_is_torch_optims_form(mounted, monkeypatch):
    """`.torch/<top>.by-id.pt` for an FQN-keyed optimizer state_dict: the bytes of `ckpt
    export --by-id --keys <top>`, ids in param_groups order, loaded by a
    plain optimizer over parameters in that order."""
    m, fixture, want, tmp = mounted
    tops = [p.name[:-len(".by-id.pt")] for p in (m.dir / ".torch").iterdir()
            if p.name.endswith(".by-id.pt")]
    if not tops:
        pytest.skip("no optimizer state_dict here")
    for top in tops:
        out = tmp / f"{top}.by-id.pt"
        r = subprocess.run([CKPT, "export", "-q", "--by-id", "--keys", top,
                            str(fixture / "ckpt"), str(out)], capture_output=True)
        assert r.returncode == 0, r.stderr
        f = m.dir / ".torch" / f"{top}.by-id.pt"
        assert f.read_bytes() == out.read_bytes()
        sd = load_checked(f, monkeypatch)
        fqns = [p for g in want[top]["param_groups"] for p in g["params"]] if want else None
        ids = [i for g in sd["param_groups"] for i in g["params"]]
        assert ids == list(range(len(ids)))
        if fqns is None:
            continue
        assert len(fqns) == len(ids)
        assert list(sd) == ["state", "param_groups"]
        for i, fqn in enumerate(fqns):
            if fqn in want[top].get("state", {}):
                assert not diff(want[top]["state"][fqn], sd["state"][i], fqn)
        params = [torch.nn.Parameter(torch.zeros_like(sd["state"][i]["exp_avg"]))
                  if i in sd["state"] else torch.nn.Parameter(torch.zeros(1)) for i in ids]
        opt = torch.optim.AdamW(params)
        opt.load_state_dict(sd)
        for mine, saved in zip(opt.state_dict()["param_groups"], sd["param_groups"]):
            assert {k: mine[k] for k in saved} == saved


def test_root_views_never_collide_with_a_directory(tmp_path, monkeypatch):
    """`@all` and `@root` are the views' own names: top-level directories called `@all` and
    `@root` (saved by real dcp.save) show as `%40all.*` and `%40root.*`, each its own
    subtree, while `@root.*` holds the entries at the root and `@all.*` everything."""
    from safetensors.torch import load_file
    import torch.distributed.checkpoint as dcp
    g = torch.Generator().manual_seed(5)
    sd = {"w0": torch.randn(3, 2, generator=g),
          "@all": {"w": torch.randn(4, generator=g)},
          "@root": {"x": torch.randn(2, 2, generator=g), "n": 3}}
    dcp.save(sd, checkpoint_id=str(tmp_path / "ck"), no_dist=True)
    m = tm.Mount(tmp_path / "ck")
    try:
        st_names = sorted(p.name for p in (m.dir / ".safetensors").iterdir())
        assert st_names == ["%40all.safetensors", "%40root.safetensors", "@all.safetensors",
                            "@root.safetensors"]
        pt_names = sorted(p.name for p in (m.dir / ".torch").iterdir())
        assert pt_names == ["%40all.pt", "%40root.pt", "@all.pt", "@root.pt"]
        root = load_file(m.dir / ".safetensors" / "@root.safetensors")
        assert list(root) == ["w0"] and torch.equal(root["w0"], sd["w0"])
        a = load_file(m.dir / ".safetensors" / "%40all.safetensors")
        assert list(a) == ["w"] and torch.equal(a["w"], sd["@all"]["w"])
        assert sorted(load_file(m.dir / ".safetensors" / "@all.safetensors")) == \
            ["@all/w", "@root/x", "w0"]
        del root, a  # (mapped: the mount must not stay busy)

        def differs(want, name):  # the mapped archive dies with this frame
            return diff(want, load_checked(m.dir / ".torch" / name, monkeypatch))
        assert not differs({"w0": sd["w0"]}, "@root.pt")
        assert not differs(sd["@root"], "%40root.pt")
        assert not differs(sd, "@all.pt")
        gc.collect()
    finally:
        m.close()


def test_view_bytes_are_the_exports(mounted):
    m, fixture, _, tmp = mounted
    out = tmp / "export.pt"
    r = subprocess.run([CKPT, "export", "-q", "--format", "torch", str(fixture / "ckpt"),
                        str(out)], capture_output=True)
    assert r.returncode == 0, r.stderr
    want = out.read_bytes()
    f = m.dir / ".torch" / "@all.pt"
    assert f.stat().st_size == len(want)
    assert f.read_bytes() == want
    errors = []

    def reader(seed):
        rng = random.Random(seed)
        fd = os.open(f, os.O_RDONLY)
        try:
            for _ in range(200):
                a = rng.randrange(len(want))
                n = rng.randrange(1, min(len(want) - a, 70000) + 1)
                if os.pread(fd, n, a) != want[a:a + n]:
                    errors.append((a, n))
            if os.pread(fd, 10, len(want)) != b"":
                errors.append("past the end")
        finally:
            os.close(fd)

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]


def test_zip64_past_4_gib(tmp_path, monkeypatch):
    """A 4 GiB + 100 byte tensor (a sparse safetensors file): the archive takes Zip64 extra
    fields and 64-bit descriptors, as miniz writes them, and torch maps it."""
    n = (1 << 32) + 100
    hdr = {"big": {"dtype": "U8", "shape": [n], "data_offsets": [0, n]},
           "after": {"dtype": "F32", "shape": [3], "data_offsets": [n, n + 12]}}
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    d = tmp_path / "big"
    d.mkdir()
    with open(d / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        f.truncate(8 + len(h) + n)
        f.seek(8 + len(h) + n)
        f.write(struct.pack("<3f", 1.5, -2.0, 3.25))
    m = tm.Mount(d)
    try:
        pt = m.dir / ".torch" / "@all.pt"
        # mapped only (a plain load would read the 4 GiB): torch's own offset arithmetic,
        # debug-checked against the zip's, agrees with the layout past 4 GiB
        from torch.utils.serialization import config
        monkeypatch.setenv("TORCH_SERIALIZATION_DEBUG", "1")
        before = config.load.calculate_storage_offsets
        config.load.calculate_storage_offsets = True
        try:
            sd = torch.load(pt, weights_only=True, mmap=True)
        finally:
            config.load.calculate_storage_offsets = before
        assert sd["big"].shape == (n,) and sd["big"].dtype == torch.uint8
        assert sd["after"].tolist() == [1.5, -2.0, 3.25]
        assert sd["big"][-3:].tolist() == [0, 0, 0]
        del sd  # (its tensors map the file)
        with zipfile.ZipFile(pt) as z:
            info = {i.filename: i for i in z.infolist()}
            assert info["archive/data/0"].file_size == n
            assert info["archive/data/1"].header_offset > 1 << 32
            assert z.read("archive/version") == b"3\n"  # small records carry real CRCs
    finally:
        import gc
        gc.collect()
        m.close()


def crc_checked(pt: Path) -> dict:
    """zipfile's CRC check of every record of pt, and each tensor record's central directory
    and data descriptor CRC-32 against zlib.crc32 of the record's data; returns the CRCs."""
    import zlib
    with zipfile.ZipFile(pt) as z:
        assert z.testzip() is None, pt.name
        crcs = {}
        raw = pt.read_bytes()
        for i in z.infolist():
            data = z.read(i)  # (checked against i.CRC by zipfile too)
            assert i.CRC == zlib.crc32(data), (pt.name, i.filename)
            crcs[i.filename] = i.CRC
            if i.filename.startswith("archive/data/") and i.file_size:
                h = i.header_offset
                nl, xl = struct.unpack("<HH", raw[h + 26:h + 30])
                d = h + 30 + nl + xl + i.file_size
                assert raw[d:d + 4] == b"PK\x07\x08"
                assert struct.unpack("<I", raw[d + 4:d + 8])[0] == i.CRC, (pt.name, i.filename)
    return crcs


def saved_by_dcp(tmp_path: Path) -> tuple[Path, dict]:
    """A model + AdamW state (an optimizer keyed by FQN, a list, scalars, an empty tensor)
    saved by real dcp.save."""
    import torch.distributed.checkpoint as dcp
    g = torch.Generator().manual_seed(23)
    model = {"emb": torch.randn(64, 16, generator=g),
             "layers": {"0": {"w": torch.randn(16, 16, generator=g).to(torch.bfloat16),
                              "b": torch.arange(16, dtype=torch.int64)}},
             "empty": torch.zeros(0, 3)}
    optim = {"state": {"emb": {"step": torch.tensor(3.0),
                               "exp_avg": torch.randn(64, 16, generator=g)}},
             "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "params": ["emb"]}]}
    sd = {"model": model, "optim": optim, "step": 7, "big": torch.randn(300_000, generator=g)}
    dcp.save(sd, checkpoint_id=str(tmp_path / "ck"), no_dist=True)
    return tmp_path / "ck", sd


def test_view_crcs_are_real(tmp_path, monkeypatch):
    """Every `.torch/` archive of a checkpoint real dcp.save wrote passes zipfile's testzip,
    its tensor records' CRC-32s (central directory and data descriptor) are zlib's of their
    data, read cold (central directory first, as torch.load reads it) and again, and torch
    still loads it bit for bit; the export's CRCs are the same."""
    ck, sd = saved_by_dcp(tmp_path)
    m = tm.Mount(ck)
    try:
        tdir = m.dir / ".torch"
        names = sorted(p.name for p in tdir.iterdir())
        assert names == ["@all.pt", "@root.pt", "model.pt", "optim.by-id.pt", "optim.pt"]
        for name in names:
            pt = tdir / name
            # cold: the central directory alone first (torch.load's first read)
            with zipfile.ZipFile(pt) as z:
                cd = {i.filename: i.CRC for i in z.infolist()}
            assert crc_checked(pt) == cd, name

        def differs(want, name):  # the mapped archive dies with this frame
            return diff(want, load_checked(tdir / name, monkeypatch))
        d = differs(sd, "@all.pt")
        assert not d, d[:5]
        d = differs(sd["model"], "model.pt")
        assert not d, d[:5]
        out = tmp_path / "export.pt"
        r = subprocess.run([CKPT, "export", "-q", "--format", "torch", str(ck), str(out)],
                           capture_output=True)
        assert r.returncode == 0, r.stderr
        assert (tdir / "@all.pt").read_bytes() == out.read_bytes()
        gc.collect()
    finally:
        m.close()


def test_view_zero_crc_option_and_read_errors(tmp_path):
    """-o torch_zero_crc: the tensor records carry CRC-32 0 (zipfile's testzip names one),
    every other byte as the export; without it, a shard that can no longer be read fails the
    read of a CRC with EIO (the log names the tensor), while bytes needing none still read."""
    ck, _ = saved_by_dcp(tmp_path)
    out = tmp_path / "export.pt"
    r = subprocess.run([CKPT, "export", "-q", "--format", "torch", str(ck), str(out)],
                       capture_output=True)
    assert r.returncode == 0, r.stderr
    m = tm.Mount(ck, "torch_zero_crc")
    try:
        pt = m.dir / ".torch" / "@all.pt"
        assert pt.read_bytes() == zeroed_crcs(out.read_bytes())
        with zipfile.ZipFile(pt) as z:
            assert z.testzip() is not None
    finally:
        m.close()
    shard = next(ck.glob("*.distcp"))
    kept = shard.read_bytes()
    m = tm.Mount(ck)
    try:
        pt = m.dir / ".torch" / "@all.pt"
        size = pt.stat().st_size  # laid out: values read, no tensor byte yet
        cd = zipfile.ZipFile(out).start_dir
        shard.write_bytes(kept[:len(kept) // 2])
        fd = os.open(pt, os.O_RDONLY)
        try:
            with pytest.raises(OSError) as e:
                os.pread(fd, size - cd, cd)
            assert e.value.errno == 5  # EIO
            assert os.pread(fd, 64, 0) == out.read_bytes()[:64]  # no CRC needed there
        finally:
            os.close(fd)
            shard.write_bytes(kept)
    finally:
        m.close()
    assert "'big' (its CRC-32)" in m.log()
