#!/usr/bin/env python3
"""bench_torchrun_load.py — ckptfs.load and dcp.load with ckptfs's StorageReader (collective
reads) against torch's dcp.load (FileSystemReader) into the same DTensor state_dict, under
torchrun (gloo, CPU), side by side in one job:

  python3 -m torch.distributed.run --standalone --nproc-per-node N \\
      tools/bench/bench_torchrun_load.py DIR --save [--mib 256]
  python3 -m torch.distributed.run --standalone --nproc-per-node M \\
      tools/bench/bench_torchrun_load.py DIR [--placement S1] [--runs 3] [--mib 256]

--save makes DIR with dcp.save by this job (float32 tensors of 4096 x 2048, Shard(0) over its
ranks; run it at N ranks, then load at M != N).  Without --save, DIR is made on the first run
by the loading job itself if it is missing.  Each run loads every tensor into DTensors of
--placement (S0, S1 or R over a 1-D mesh of the M ranks; "plain": plain tensors, as a model's
state_dict, meant for M = 1) with ckptfs.load, with dcp.load(StorageReader) and with
dcp.load(FileSystemReader), in that order, each into fresh destinations (one method's at a
time beside the first's, to bound memory); rank 0 prints the wall times (the slowest rank:
barriers around each load), whether every local shard equals ckptfs.load's, and the bytes read
against the needed bytes: `rchar` (/proc/self/io: bytes the read-family syscalls returned,
summed over the ranks, the page cache's included; gloo's sockets receive with recvmsg, which
rchar does not count: ckptfs's rchar equals its loader's counter) and, for ckptfs, the
loader's own counter of its preads of shard files (`bytes_read`, which
tests/python/test_load.py checks against strace) and the bytes exchanged over gloo.  --mib
decides the tensors (both for --save and the loads).  The source is hot in the page cache
after the first run.  Needs the package (`python3 -m pip install ./python`, or
PYTHONPATH=python with CKPTFS_LIBCKPT set to a built libckpt_load.so.0)."""

import argparse
import datetime
import os
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor

import ckptfs
from ckptfs.dcp import StorageReader


def rchar():
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--placement", default="S1", choices=["S0", "S1", "R", "plain"])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--save", action="store_true")
    a = ap.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=1800))
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    shapes = {f"layers.{i}.w": (4096, 2048) for i in range(max(1, a.mib // 32))}
    if a.save or not os.path.exists(os.path.join(a.dir, ".metadata")):
        g = torch.Generator().manual_seed(0)
        sd = {}
        for k, s in shapes.items():  # (each rank keeps only its shard)
            sd[k] = distribute_tensor(torch.randn(s, generator=g), mesh, [Shard(0)],
                                      src_data_rank=None)
        dcp.save(sd, checkpoint_id=a.dir)
        del sd
        dist.barrier()
        if a.save:
            if rank == 0:
                print(f"saved {len(shapes)} x 4096 x 2048 float32 at {world} ranks", flush=True)
            os._exit(0)
    pl = {"S0": Shard(0), "S1": Shard(1), "R": Replicate(), "plain": None}[a.placement]

    def dest():
        if pl is None:
            return {k: torch.zeros(s) for k, s in shapes.items()}
        return {k: distribute_tensor(torch.zeros(s), mesh, [pl], src_data_rank=None)
                for k, s in shapes.items()}

    def local(t):
        return t.to_local() if isinstance(t, DTensor) else t

    def timed(fn):
        dist.barrier()
        r0 = rchar()
        t = time.perf_counter()
        out = fn()
        dist.barrier()
        return time.perf_counter() - t, rchar() - r0, out

    def total(*vals):
        t = torch.tensor(vals, dtype=torch.int64)
        dist.all_reduce(t)
        return t.tolist()

    def methods():
        yield "ckptfs.load", lambda sd: ckptfs.load(sd, a.dir)

        def ours(sd):
            r = StorageReader(a.dir)
            dcp.load(sd, storage_reader=r)
            return r.stats
        yield "dcp.load(ckptfs StorageReader)", ours
        yield "dcp.load(FileSystemReader)", \
            lambda sd: dcp.load(sd, storage_reader=FileSystemReader(a.dir))

    for run in range(a.runs):
        first = None
        for name, fn in methods():
            sd = dest()
            secs, rc, st = timed(lambda: fn(sd))
            if first is None:
                first, differ = sd, 0
            else:
                differ = sum(not torch.equal(local(sd[k]), local(first[k])) for k in shapes)
            recv = st.bytes_received if st is not None else 0
            counted = st.bytes_read if st is not None else 0
            needed = st.union_bytes if st is not None else 0
            rc_sum, recv_sum, counted_sum, differ_sum = total(rc, recv, counted, differ)
            if name == "ckptfs.load":
                union = needed or 1
            if rank == 0:
                extra = (f", loader's preads {counted_sum / union:.2f}x, exchanged "
                         f"{recv_sum / 2**20:.0f} MiB" if st is not None else "")
                print(f"run {run}: M={world} {a.placement} {union / 2**20:.0f} MiB needed: "
                      f"{name} {secs:.3f} s, rchar {rc_sum / union:.2f}x{extra}, "
                      f"{'equal' if not differ_sum else f'{differ_sum} DIFFERENT'}", flush=True)
            if sd is not first:
                del sd
    dist.barrier()
    os._exit(0)  # (no group teardown: see tests/python/load_worker.py)


if __name__ == "__main__":
    main()
