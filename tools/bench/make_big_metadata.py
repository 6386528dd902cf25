#!/usr/bin/env python3
"""Build a large, realistic DCP `.metadata` file for benchmarking the ckptfs pickle parser.

Usage: python3 tools/bench/make_big_metadata.py N OUTDIR [--load]

Writes OUTDIR/.metadata with exactly N chunk entries, built from torch's real metadata classes
(Metadata, TensorStorageMetadata, ChunkStorageMetadata, TensorProperties, MetadataIndex,
_StorageInfo, BytesStorageMetadata, StorageMeta) and pickled with pickle.dump exactly like
FileSystemWriter.finish does. The layout imitates an 8-way FSDP2 checkpoint of a MoE
transformer saved as {"model": msd, "optim": osd} (get_state_dict): bf16 parameters and fp32
exp_avg/exp_avg_sq sharded Shard(0) over 8 ranks (8 chunks each), 0-d fp32 `step` tensors
(1 chunk each) and per-group BYTE_IO hyper-parameters. Byte offsets grow past 4 GiB, so the
file contains LONG1 integers. No data files are written. Prints the file size (and, with
--load, how long pickle.load takes).
"""

from __future__ import annotations

import argparse
import itertools
import pickle
import sys
import time
import uuid
from pathlib import Path

import torch
from torch.distributed.checkpoint.filesystem import CURRENT_DCP_VERSION, _StorageInfo
from torch.distributed.checkpoint.metadata import (
    BytesStorageMetadata,
    ChunkStorageMetadata,
    Metadata,
    MetadataIndex,
    StorageMeta,
    TensorProperties,
    TensorStorageMetadata,
)

WORLD = 8
ZIP_OVERHEAD = 1577 - 64  # a tiny torch.save chunk archive minus its data (see fixtures)
DIM, FFN, EXPERTS, KV = 4096, 1408, 64, 1024
DENSE = [("attention.wq.weight", (DIM, DIM)), ("attention.wk.weight", (KV, DIM)),
         ("attention.wv.weight", (KV, DIM)), ("attention.wo.weight", (DIM, DIM)),
         ("attention_norm.weight", (DIM,)), ("ffn_norm.weight", (DIM,)),
         ("moe.router.gate.weight", (EXPERTS, DIM))]
EXPERT = [("w1", (FFN, DIM)), ("w2", (DIM, FFN)), ("w3", (FFN, DIM))]


def fresh(s: str) -> str:
    """A new str object: in real files each rank's plan is unpickled separately, so equal
    strings from different places are distinct objects and are not memo-shared."""
    return s.encode().decode()


def param_names():
    """Realistic parameter FQNs (as get_state_dict reports them), forever."""
    yield "tok_embeddings.weight", (128256, DIM)
    for layer in itertools.count():
        for name, shape in DENSE:
            yield f"layers.{layer}.{name}", shape
        for e in range(EXPERTS):
            for name, shape in EXPERT:
                yield f"layers.{layer}.moe.experts.{e}.{name}", shape


def shard0_chunks(shape: tuple, nshards: int):
    """torch.chunk semantics along dim 0: (offsets, sizes) per rank."""
    c = -(-shape[0] // nshards)
    for r in range(nshards):
        lo = min(r * c, shape[0])
        hi = min(lo + c, shape[0])
        yield r, (lo,) + (0,) * (len(shape) - 1), (hi - lo,) + shape[1:]


class Builder:
    def __init__(self, outdir: Path):
        self.sdm: dict = {}
        self.planner_data: dict = {}
        self.storage: dict = {}
        self.file_pos = [0] * WORLD
        # one storage_key string per rank, shared by all its items (memoized, as in real files)
        self.file_name = [f"__{r}_0.distcp" for r in range(WORLD)]
        self.outdir = outdir
        self.chunks = 0

    def _store(self, rank: int, nbytes: int) -> _StorageInfo:
        length = nbytes + ZIP_OVERHEAD
        info = _StorageInfo(self.file_name[rank], self.file_pos[rank], length)
        self.file_pos[rank] += length
        return info

    def tensor(self, key: str, path: tuple, shape: tuple, dtype: torch.dtype, nshards: int):
        itemsize = torch.empty((), dtype=dtype).element_size()
        stride = tuple(itertools.accumulate((1,) + shape[:0:-1], lambda a, b: a * b))[::-1]
        props = TensorProperties(dtype=dtype, strides=stride) if "strides" in \
            TensorProperties.__dataclass_fields__ else TensorProperties(dtype=dtype)
        chunks = []
        for i, (rank, off, size) in enumerate(shard0_chunks(shape, nshards) if shape else
                                              [(0, (), ())]):
            chunks.append(ChunkStorageMetadata(offsets=torch.Size(off), sizes=torch.Size(size)))
            numel = 1
            for s in size:
                numel *= s
            self.storage[MetadataIndex(fresh(key), off, i)] = self._store(rank, numel * itemsize)
        self.sdm[key] = TensorStorageMetadata(props, torch.Size(shape), chunks)
        self.planner_data[fresh(key)] = tuple(fresh(p) if isinstance(p, str) else p for p in path)
        self.chunks += len(chunks)

    def blob(self, key: str, path: tuple, rank: int, nbytes: int):
        self.sdm[key] = BytesStorageMetadata()
        self.planner_data[fresh(key)] = tuple(fresh(p) if isinstance(p, str) else p for p in path)
        self.storage[MetadataIndex(fresh(key))] = self._store(rank, nbytes)

    def metadata(self) -> Metadata:
        return Metadata(state_dict_metadata=self.sdm, planner_data=self.planner_data,
                        storage_data=self.storage,
                        storage_meta=StorageMeta(checkpoint_id=self.outdir.resolve(),
                                                 save_id=str(uuid.uuid4())),
                        version=CURRENT_DCP_VERSION)


def build(n: int, outdir: Path) -> Metadata:
    b = Builder(outdir)
    params = []
    for fqn, shape in param_names():
        if b.chunks >= n:
            break
        params.append(fqn)
        want = n - b.chunks
        b.tensor(f"model.{fqn}", ("model", fqn), shape, torch.bfloat16, min(WORLD, want))
        for state in ("exp_avg", "exp_avg_sq", "step"):
            want = n - b.chunks
            if want <= 0:
                break
            shape_s, dt = (shape, torch.float32) if state != "step" else ((), torch.float32)
            b.tensor(f"optim.state.{fqn}.{state}", ("optim", "state", fqn, state), shape_s, dt,
                     min(WORLD, want))
    hyper = {"lr": 8, "betas": 64, "eps": 8, "weight_decay": 8, "amsgrad": 1, "maximize": 1,
             "foreach": 1, "capturable": 1, "differentiable": 1, "fused": 1,
             "decoupled_weight_decay": 1, "params": 48 * len(params)}
    for i, (k, nbytes) in enumerate(hyper.items()):
        b.blob(f"optim.param_groups.0.{k}", ("optim", "param_groups", 0, k), i % WORLD, nbytes)
    assert b.chunks == n, (b.chunks, n)
    return b.metadata()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", type=int, help="number of tensor chunk entries")
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--load", action="store_true", help="also time pickle.load of the result")
    args = ap.parse_args()
    if args.n < 1:
        ap.error("N must be >= 1")
    args.outdir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    md = build(args.n, args.outdir)
    t1 = time.perf_counter()
    path = args.outdir / ".metadata"
    with open(path, "wb") as f:
        pickle.dump(md, f)
    t2 = time.perf_counter()
    size = path.stat().st_size
    print(f"{path}: {size} bytes ({size / 2**20:.1f} MiB), {args.n} chunks, "
          f"{len(md.state_dict_metadata)} entries, {len(md.storage_data)} storage items; "
          f"build {t1 - t0:.1f}s, pickle.dump {t2 - t1:.1f}s")
    if args.load:
        del md
        t3 = time.perf_counter()
        with open(path, "rb") as f:
            pickle.load(f)
        print(f"pickle.load: {time.perf_counter() - t3:.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
