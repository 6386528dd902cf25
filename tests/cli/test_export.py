"""test_export.py — `ckpt export` against torch: every fixture exported whole loads with
safetensors.torch.load_file and equals torch's reference bit for bit (skipped dtypes listed);
`--keys model` names tensors relative to model/; `--dtype bf16|fp16|fp32` equals torch's own
`.to(dtype)` of the reference (NaN stays NaN); a failed export leaves no output file."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
st = pytest.importorskip("safetensors.torch")
from safetensors import safe_open  # noqa: E402

BIN = os.environ.get("CKPT_BIN")
FIXTURES = Path(os.environ.get("CKPT_FIXTURES") or os.environ.get("CKPT_FIXTURES_DEFAULT")
                or Path(__file__).resolve().parents[1] / "fixtures" / "data")
if not BIN:
    pytest.skip("CKPT_BIN is not set", allow_module_level=True)
NAMES = sorted(p.name for p in FIXTURES.iterdir() if (p / "reference.tsv").is_file())
TORCH_DT = {n: getattr(torch, n) for n in (
    "float64", "float32", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8",
    "uint16", "uint32", "uint64", "bool", "complex64", "complex128", "float8_e4m3fn",
    "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu") if hasattr(torch, n)}


def reference(fixture: Path):
    """tree path (as `ckpt ls` prints it) -> torch tensor, from reference.bin."""
    blob = (fixture / "reference.bin").read_bytes()
    meta = json.loads((fixture / "reference.json").read_text())
    keys = {e["key"]: e for e in meta["entries"]}
    out = {}
    for line in (fixture / "reference.tsv").read_text().splitlines():
        f = line.split("\t")
        if f[0] != "T":
            continue
        shape = [int(x) for x in f[3].split(",")] if f[3] else []
        raw = torch.frombuffer(bytearray(blob[int(f[4]):int(f[4]) + int(f[5])]) or bytearray(1),
                               dtype=torch.uint8)[:int(f[5])]
        t = raw.view(TORCH_DT[f[2]]).reshape(shape) if int(f[5]) else torch.empty(
            shape, dtype=TORCH_DT[f[2]])
        out[f[6]] = t
    return out


def tbytes(t):
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


def export(*args):
    return subprocess.run([BIN, "export", "-q", *map(str, args)], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("name", NAMES)
def test_export_whole_checkpoint(name, tmp_path):
    fx = FIXTURES / name
    out = tmp_path / "o.safetensors"
    r = export(fx / "ckpt", out)
    assert r.returncode == 0, r.stderr
    got = st.load_file(out)
    skipped = set(json.loads(safe_open(out, "pt").metadata().get("ckptfs.skipped", "[]")))
    ref = reference(fx)
    simple = {p for p in ref if "%" not in p}
    for p in simple:
        if p in skipped:
            continue
        assert got[p].dtype == ref[p].dtype and tuple(got[p].shape) == tuple(ref[p].shape), p
        assert tbytes(got[p]) == tbytes(ref[p]), p
    assert len(got) + len(skipped) == len(ref)


def test_export_subtree_and_casts(tmp_path):
    fx = FIXTURES / "fsdp2_ws4"
    ref = reference(fx)
    model = {p[len("model/"):]: t for p, t in ref.items() if p.startswith("model/")}
    for dt, tdt in (("bf16", torch.bfloat16), ("fp16", torch.float16), ("fp32", torch.float32),
                    (None, None)):
        out = tmp_path / f"m{dt}.safetensors"
        r = export("--keys", "model", *(["--dtype", dt] if dt else []), fx / "ckpt", out)
        assert r.returncode == 0, r.stderr
        got = st.load_file(out)
        assert set(got) == set(model)
        for k, t in model.items():
            want = t.to(tdt) if tdt is not None and t.is_floating_point() else t
            assert got[k].dtype == want.dtype, k
            a, b = got[k].float().numpy(), want.float().numpy()
            assert np.array_equal(np.isnan(a), np.isnan(b)), k
            ok = ~np.isnan(b)
            assert tbytes(got[k][torch.from_numpy(ok)] if got[k].dim() else got[k]) == \
                tbytes(want[torch.from_numpy(ok)] if want.dim() else want), k


def test_cast_rounding_matches_torch_on_hard_values(tmp_path):
    """The dtypes fixture's float32/float64 tensors hold subnormals, ties, infinities, NaNs."""
    fx = FIXTURES / "dtypes"
    ref = reference(fx)
    for dt, tdt in (("bf16", torch.bfloat16), ("fp16", torch.float16)):
        out = tmp_path / f"d{dt}.safetensors"
        assert export("--dtype", dt, fx / "ckpt", out).returncode == 0
        got = st.load_file(out)
        n = 0
        for p, t in ref.items():
            if t.dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
                continue
            want = t.to(tdt).reshape(-1)
            g = got[p].reshape(-1)
            nan = torch.isnan(want)
            assert torch.equal(torch.isnan(g), nan), p
            assert tbytes(g[~nan]) == tbytes(want[~nan]), p
            n += 1
        assert n >= 4


def test_failed_export_leaves_nothing(tmp_path):
    out = tmp_path / "none.safetensors"
    r = export("--keys", "no/such/dir", FIXTURES / "fsdp2_ws1" / "ckpt", out)
    assert r.returncode == 1 and "no tensors" in r.stderr
    assert not out.exists() and not list(tmp_path.iterdir())


def test_full_disk_names_the_output_file(tmp_path):
    """Issue #22: on a file system that fills up, export fails naming its output file and the
    cause (it said "error writing to standard output"), and leaves nothing behind."""
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(disk)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        out = disk / "model.safetensors"
        r = export(FIXTURES / "fsdp2_ws1" / "ckpt", out)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "standard output" not in r.stderr, r.stderr
        assert "model.safetensors" in r.stderr and "No space left on device" in r.stderr, r.stderr
        assert not list(disk.iterdir())
    finally:
        subprocess.run(["umount", str(disk)], check=True)
