#!/usr/bin/env python3
"""bench_torchrun_load.py — ckptfs.load against torch's dcp.load (FileSystemReader) into the
same DTensor state_dict, under torchrun (gloo, CPU), side by side in one job:

  python3 -m torch.distributed.run --standalone --nproc-per-node M \\
      tools/bench/bench_torchrun_load.py DIR [--mib 256] [--placement S1] [--runs 3]

DIR is made on the first run (dcp.save by this job: float32 tensors of 4096 x 2048, Shard(0)
over M ranks; delete it to change --mib or M's save).  Each run loads every tensor into
DTensors of --placement (S0, S1 or R over a 1-D mesh of the M ranks) with ckptfs.load, then
with dcp.load; rank 0 prints the wall times (the slowest rank: barriers around each load),
whether every local shard is equal, and the job's bytes read (ckptfs's counters, summed)
against the needed bytes.  The source is hot in the page cache after the first run.  Needs the
package (`python3 -m pip install ./python`, or PYTHONPATH=python with CKPTFS_LIBCKPT set to a
built libckpt_load.so.0)."""

import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

import ckptfs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--placement", default="S1", choices=["S0", "S1", "R"])
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    shapes = {f"layers.{i}.w": (4096, 2048) for i in range(max(1, a.mib // 32))}
    if not os.path.exists(os.path.join(a.dir, ".metadata")):
        g = torch.Generator().manual_seed(0)
        sd = {k: distribute_tensor(torch.randn(s, generator=g), mesh, [Shard(0)],
                                   src_data_rank=None) for k, s in shapes.items()}
        dcp.save(sd, checkpoint_id=a.dir)
        del sd
        dist.barrier()
    pl = {"S0": Shard(0), "S1": Shard(1), "R": Replicate()}[a.placement]

    def dest():
        return {k: distribute_tensor(torch.zeros(s), mesh, [pl], src_data_rank=None)
                for k, s in shapes.items()}

    def timed(fn):
        dist.barrier()
        t = time.perf_counter()
        out = fn()
        dist.barrier()
        return time.perf_counter() - t, out

    for run in range(a.runs):
        ours, theirs = dest(), dest()
        t_ours, st = timed(lambda: ckptfs.load(ours, a.dir))
        t_torch, _ = timed(lambda: dcp.load(theirs, storage_reader=FileSystemReader(a.dir)))
        equal = all(torch.equal(ours[k].to_local(), theirs[k].to_local()) for k in shapes)
        tot = torch.tensor([st.bytes_read, int(not equal)], dtype=torch.int64)
        dist.all_reduce(tot)
        if rank == 0:
            print(f"run {run}: M={world} {a.placement} {st.union_bytes / 2**20:.0f} MiB needed: "
                  f"ckptfs.load {t_ours:.3f} s (read {tot[0].item() / st.union_bytes:.2f}x, "
                  f"exchange {st.seconds_exchange:.3f} s), dcp.load {t_torch:.3f} s, "
                  f"{'equal' if not tot[1].item() else 'DIFFERENT'}", flush=True)
    dist.barrier()
    os._exit(0)  # (no group teardown: see tests/python/load_worker.py)


if __name__ == "__main__":
    main()
