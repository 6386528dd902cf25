"""load_ref.py — what a rank's load must hold, from a fixture's reference files (torch's own
reading): the tensors and their bytes, torch.chunk slices, and the check of a job's dumps
(OUTDIR/rank<k>/<path>).  Shared by the loader's tests (tests/mpi, tests/gpu,
tests/transport); needs no MPI and no torch."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

ITEM = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int8": 1, "int16": 2,
        "int32": 4, "int64": 8, "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8, "bool": 1,
        "complex64": 8, "complex128": 16}


def tensors(fixture: Path):
    """path -> (dtype, shape, bytes) and torch's chunk data sizes."""
    blob = (fixture / "reference.bin").read_bytes()
    meta = json.loads((fixture / "reference.json").read_text())
    paths = {}
    for e in meta["entries"]:
        if e.get("kind") == "tensor":
            paths[e["key"]] = e
    out = {}
    for line in (fixture / "reference.tsv").read_text().splitlines():
        f = line.split("\t")
        if f[0] != "T":
            continue
        shape = tuple(int(x) for x in f[3].split(",")) if f[3] else ()
        out[f[6]] = (f[2], shape, blob[int(f[4]):int(f[4]) + int(f[5])])
    # each stored item once (the boxes of a Megatron flat piece share its item)
    items = {(c["storage"]["file"], c["storage"]["offset"]): c["storage"].get("data_size", 0)
             for e in paths.values() for c in e["chunks"]
             if c.get("storage") and all(s > 0 for s in c["sizes"])}
    return out, sum(items.values())


def shard(raw: bytes, dtype: str, shape, dim: int, m: int, r: int) -> bytes:
    """torch.chunk semantics along dim (replicated when dim >= ndim), C-order bytes."""
    if dim >= len(shape):
        return raw
    a = np.frombuffer(raw, dtype=np.uint8).reshape(*shape, ITEM.get(dtype, 1))
    n = shape[dim]
    c = -(-n // m) if n else 0
    lo, hi = min(r * c, n), min((r + 1) * c, n)
    return np.ascontiguousarray(np.take(a, range(lo, hi), axis=dim)).tobytes()


def check_dumps(out: Path, ref, m: int, want, what=()) -> int:
    """Every rank's dump (out/rank<k>/<path>) of every tensor of `ref` (path -> (dtype, shape,
    bytes)) equals want(raw, dtype, shape, k); skips escaped paths and dtypes not in ITEM.
    Returns how many were compared (asserted non-zero)."""
    checked = 0
    for path, (dtype, shape, raw) in ref.items():
        if "%" in path or dtype not in ITEM:
            continue
        for k in range(m):
            got = (out / f"rank{k}" / path).read_bytes()
            assert got == want(raw, dtype, shape, k), (*what, path, shape, m, k)
            checked += 1
    assert checked
    return checked
