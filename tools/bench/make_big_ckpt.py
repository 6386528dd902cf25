#!/usr/bin/env python3
"""make_big_ckpt.py — writes a large DCP checkpoint with real torch for benchmarks:
WORLD ranks (gloo, CPU) each save their Shard(0) piece of TENSORS float32 tensors whose total
size is about GIB GiB, plus a few small values.  Usage: make_big_ckpt.py OUTDIR [GIB] [WORLD]"""
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor


def worker(rank, world, out, gib, initfile):
    dist.init_process_group("gloo", init_method=f"file://{initfile}", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    n_tensors = 8
    rows = 1021  # odd: uneven shards
    cols = int(gib * (1 << 30) / 4 / n_tensors / rows)
    sd = {"model": {}, "meta": {"step": 1000, "lr": 3e-4}}
    for i in range(n_tensors):
        g = torch.Generator().manual_seed(i)
        full = torch.randn(rows, cols, generator=g)
        sd["model"][f"layers.{i}.weight"] = distribute_tensor(full, mesh, [Shard(0)])
    dcp.save(sd, checkpoint_id=out)
    dist.destroy_process_group()


def main():
    out = sys.argv[1]
    gib = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    world = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    os.makedirs(out, exist_ok=True)
    initfile = tempfile.mktemp(prefix="ckptfs-bench-init-")
    mp.spawn(worker, args=(world, out, gib, initfile), nprocs=world, join=True)
    total = sum(os.path.getsize(os.path.join(out, f)) for f in os.listdir(out))
    print(f"{out}: {total / (1 << 30):.2f} GiB in {len(os.listdir(out))} files")


if __name__ == "__main__":
    main()
