"""test_diff.py — `ckpt diff` on checkpoints written by real torch that differ in known
ways (a value nudged by a known amount, a dtype, a shape, a non-tensor value, keys removed
and added), on a checkpoint against its own copy (identical, sealed or not), on a sealed
checkpoint against a copy with one flipped stored byte (the copy carries the original's
manifest: diff compares the data, not the hashes, and reports the tensor changed), and its
exit statuses (0 same, 1 different, 2 trouble)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.distributed.checkpoint as dcp  # noqa: E402

BIN = os.environ.get("CKPT_BIN")
FIXTURES = Path(os.environ.get("CKPT_FIXTURES") or os.environ.get("CKPT_FIXTURES_DEFAULT")
                or Path(__file__).resolve().parents[1] / "fixtures" / "data")
if not BIN:
    pytest.skip("CKPT_BIN is not set", allow_module_level=True)


def diff(*args):
    return subprocess.run([BIN, "diff", *map(str, args)], capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("diff")
    g = torch.Generator().manual_seed(0)
    w = torch.randn(64, 48, generator=g)
    base = {"model": {"w": w.clone(), "b": torch.randn(48, generator=g),
                      "same": torch.arange(100, dtype=torch.int64),
                      "grow": torch.zeros(4, 4), "gone": torch.ones(3)},
            "lr": 0.1, "betas": (0.9, 0.999)}
    dcp.save(base, checkpoint_id=str(root / "a"))
    w2 = w.clone()
    w2[5, 7] += 0.25
    changed = {"model": {"w": w2, "b": base["model"]["b"].to(torch.bfloat16),
                         "same": torch.arange(100, dtype=torch.int64),
                         "grow": torch.zeros(5, 4), "new": torch.ones(2)},
               "lr": 0.2, "betas": (0.9, 0.999)}
    dcp.save(changed, checkpoint_id=str(root / "b"))
    return root, w, w2


def test_known_differences(pair):
    root, w, w2 = pair
    r = diff("--json", "-a", root / "a", root / "b")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    by = {e["path"]: e for e in doc["entries"]}
    assert by["model/w"]["status"] == "changed"
    assert by["model/w"]["max_abs"] == pytest.approx(0.25, rel=1e-6)
    want_rel = float(torch.linalg.norm(w2 - w) / torch.linalg.norm(w))
    assert by["model/w"]["rel_l2"] == pytest.approx(want_rel, rel=1e-6)
    assert by["model/b"]["detail"] == "dtype float32 -> bfloat16"
    assert by["model/grow"]["detail"] == "shape [4, 4] -> [5, 4]"
    assert by["lr"]["status"] == "changed" and by["lr"]["a"] == 0.1 and by["lr"]["b"] == 0.2
    assert by["model/same"]["status"] == "same" and by["betas"]["status"] == "same"
    assert by["model/gone"]["status"] == "only-a" and by["model/new"]["status"] == "only-b"
    assert doc["counts"] == {"same": 2, "changed": 4, "only_a": 1, "only_b": 1}
    text = diff(root / "a", root / "b").stdout
    assert "changed  model/w  max_abs=0.25" in text and "only-a   model/gone" in text


def test_identical_sealed_or_not(tmp_path):
    src = FIXTURES / "fsdp2_ws3" / "ckpt"
    copy = tmp_path / "copy"
    shutil.copytree(src, copy)
    r = diff(src, copy)
    assert r.returncode == 0 and " 0 changed" in r.stdout, r.stdout
    a = tmp_path / "a"
    shutil.copytree(src, a)
    for d in (a, copy):
        assert subprocess.run([BIN, "seal", "-q", d]).returncode == 0
    r = diff("--json", a, copy)
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["identical"] and doc["counts"]["changed"] == 0, r.stdout
    assert "same_by_hash" not in doc["counts"]


def test_sealed_copy_with_a_flipped_byte(tmp_path):
    """Issue #22 item 6: a sealed checkpoint and a copy of it (manifest included) with one
    stored data byte flipped.  The manifests agree, the data does not: diff reports the tensor
    changed and exits 1 (it used to trust the copied manifest: `same (by hash)`, exit 0)."""
    fx = FIXTURES / "fsdp2_ws3"
    a = tmp_path / "a"
    shutil.copytree(fx / "ckpt", a)
    assert subprocess.run([BIN, "seal", "-q", a]).returncode == 0
    b = tmp_path / "b"
    shutil.copytree(a, b)
    assert (b / ".ckptfs-manifest").read_bytes() == (a / ".ckptfs-manifest").read_bytes()
    meta = json.loads((fx / "reference.json").read_text())
    entry, st = next((e, c["storage"]) for e in meta["entries"] if e["kind"] == "tensor"
                     and e["dtype"] == "float32" for c in e["chunks"]
                     if c.get("storage") and all(c["sizes"]))
    at = st["offset"] + st.get("data_offset", 0)
    with open(b / st["file"], "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x01]))
    path = "/".join(map(str, entry["path"]))
    r = diff("--json", "-a", a, b)
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    changed = [e["path"] for e in doc["entries"] if e["status"] == "changed"]
    assert changed == [path], changed
    assert not doc["identical"]
    r = diff(a, b)
    assert r.returncode == 1 and f"changed  {path}  max_abs=" in r.stdout, r.stdout
    assert "by hash" not in r.stdout
    # ckpt verify --data still tells which copy is damaged
    assert subprocess.run([BIN, "verify", "--data", a], capture_output=True).returncode == 0
    v = subprocess.run([BIN, "verify", "--data", b], capture_output=True, text=True)
    assert v.returncode == 1 and "FAIL: " + st["file"] in v.stdout + v.stderr, v.stdout + v.stderr


def test_same_values_different_sharding(tmp_path):
    """The fsdp2_ws4 model, re-saved by torch as whole tensors from torch's own reading of the
    4-way sharded checkpoint: diff must find every tensor the same despite the chunking."""
    fx = FIXTURES / "fsdp2_ws4"
    blob = (fx / "reference.bin").read_bytes()
    model = {}
    for line in (fx / "reference.tsv").read_text().splitlines():
        f = line.split("\t")
        if f[0] != "T" or not f[6].startswith("model/") or f[2] != "float32":
            continue
        shape = [int(x) for x in f[3].split(",")] if f[3] else []
        data = bytearray(blob[int(f[4]):int(f[4]) + int(f[5])])
        model[f[6][len("model/"):]] = (torch.frombuffer(data, dtype=torch.float32)
                                       .reshape(shape).clone())
    assert len(model) > 5
    dcp.save({"model": model}, checkpoint_id=str(tmp_path / "whole"))
    r = diff("-a", "--json", fx / "ckpt", tmp_path / "whole")
    doc = json.loads(r.stdout)
    status = {e["path"]: e["status"] for e in doc["entries"]}
    for k in model:
        assert status["model/" + k] == "same", (k, status["model/" + k])
    assert doc["counts"]["only_b"] == 0 and doc["counts"]["only_a"] > 0


def test_trouble(tmp_path):
    r = diff(tmp_path, FIXTURES / "fsdp2_ws1" / "ckpt")
    assert r.returncode == 2 and r.stderr


@pytest.mark.parametrize("name", ["megatron_flat", "hf_sharded", "torch113"])
def test_same_values_across_storage_formats(tmp_path, name):
    """A checkpoint in a format torch alone reads differently or not at all (Megatron's
    flattened optimizer states, HuggingFace per-rank shards, torch 1.13) against `ckpt
    reshard`'s plain DCP copy of it: every entry the same; then one stored data byte of the
    source changed (of a flattened Megatron piece where there is one): that tensor alone
    changes."""
    fx = FIXTURES / name
    if not (fx / "ckpt").is_dir():
        pytest.skip(f"fixture {name} is not in {FIXTURES}")
    src = tmp_path / "src"
    shutil.copytree(fx / "ckpt", src)
    dst = tmp_path / "plain"
    r = subprocess.run([BIN, "reshard", "--no-fsync", "--ranks", "2", str(src), str(dst)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    r = diff("--json", "-a", src, dst)
    doc = json.loads(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    n = len((fx / "reference.tsv").read_text().splitlines())
    assert doc["counts"]["same"] == n and doc["counts"]["changed"] == 0, doc["counts"]
    meta = json.loads((fx / "reference.json").read_text())
    tensors = [e for e in meta["entries"] if e["kind"] == "tensor"]
    tensors.sort(key=lambda e: "stored_shape" not in e)  # a Megatron flat piece first
    entry, st = next((e, c["storage"]) for e in tensors
                     for c in e["chunks"] if c.get("storage") and all(c["sizes"]))
    at = st["offset"] + st.get("data_offset", 0)  # HuggingFace: offset is the data itself
    with open(src / st["file"], "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x40]))
    r = diff("--json", "-a", src, dst)
    doc = json.loads(r.stdout)
    assert r.returncode == 1, r.stdout + r.stderr
    changed = [e["path"] for e in doc["entries"] if e["status"] != "same"]
    assert changed == ["/".join(map(str, entry["path"]))], changed
