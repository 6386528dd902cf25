#!/usr/bin/env python3
"""torch `dcp.save` with gloo on the data of bench_save_mpi: M spawned processes, each holding
its Shard(0) piece (DTensor, torch.chunk) of T float32 tensors [rows, 1024] (G GiB in all), save
a new step per round; timed from a barrier to a barrier on rank 0 (the job's wall time).

usage: bench_save_torch.py DIR [--ranks M] [--gib G] [--tensors T] [--rounds R] [--fsync]
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp


def worker(rank, a):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard
    dist.init_process_group("gloo", init_method=f"file://{a.dir}/pg-init", rank=rank,
                            world_size=a.ranks)
    mesh = init_device_mesh("cpu", (a.ranks,))
    rows = int(a.gib * (1 << 30) / 4096 / a.tensors)
    sd = {"model": {}}
    for i in range(a.tensors):
        full_shape = (rows, 1024)
        c = -(-rows // a.ranks)
        start, end = min(rank * c, rows), min(rank * c + c, rows)
        local = (torch.arange((end - start) * 1024, dtype=torch.float32) % 1000 * 0.001 + i)
        local = local.reshape(end - start, 1024)
        sd["model"][f"layers.{i}.w"] = DTensor.from_local(local, mesh, [Shard(0)], run_check=False,
                                                          shape=torch.Size(full_shape),
                                                          stride=(1024, 1))
    total = rows * 1024 * 4 * a.tensors
    for r in range(a.rounds):
        writer = dcp.FileSystemWriter(f"{a.dir}/torch-{r}", sync_files=a.fsync)
        dist.barrier()
        t0 = time.monotonic()
        dcp.save(sd, storage_writer=writer)
        dist.barrier()
        t = time.monotonic() - t0
        if rank == 0:
            print(f"round {r}: torch dcp.save, {a.ranks} ranks (gloo), {total / (1 << 30):.2f} GiB"
                  f"{', fsync' if a.fsync else ''}: {t:.3f} s ({total / t / 1e9:.2f} GB/s)",
                  flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("dir")
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument("--tensors", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--fsync", action="store_true")
    a = p.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    torch.set_num_threads(1)
    mp.spawn(worker, args=(a,), nprocs=a.ranks, join=True)


if __name__ == "__main__":
    main()
