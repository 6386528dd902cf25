#!/usr/bin/env python3
"""bench_reader.py — the reader's benchmarks (issue 2), side by side in one run:

  index  open + index a .metadata with N chunk entries (default 1,000,000) with libckpt
         (bench_open) vs Python's pickle.load of the same file (torch imported beforehand,
         so only unpickling is timed).  Best of RUNS each.
  cat    `ckpt cat` of every tensor of a >= 1 GiB checkpoint to /dev/null vs `cat` of its
         shard files to /dev/null, page cache hot.  Best of RUNS each.
  hf     open + index of HuggingFace safetensors storage written by torch's
         HuggingFaceStorageWriter(save_distributed=True) on 4 gloo ranks (--hf-tensors
         Shard(0) tensors, each a chunk per rank) with libckpt (bench_open) vs torch's
         HuggingFaceStorageReader.read_metadata of the same directory.  Best of RUNS each.

Usage: bench_reader.py [--build build] [--work /tmp/ckptfs-bench] [--runs 3] index|cat|hf|all
Prints a markdown table row per measurement (paste into docs/benchmarks.md)."""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def best_of(runs, fn):
    return min(fn() for _ in range(runs))


def timed(cmd, **kw):
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, **kw)
    return time.perf_counter() - t0


def libckpt_open(a, d):
    """bench_open's JSON: best of RUNS opens of checkpoint directory d."""
    out = subprocess.run([os.path.join(a.build, "tools/bench/bench_open"), d, str(a.runs)],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def bench_index(a):
    d = os.path.join(a.work, f"meta-{a.chunks}")
    if not os.path.exists(os.path.join(d, ".metadata")):
        subprocess.run([sys.executable, os.path.join(HERE, "make_big_metadata.py"), str(a.chunks), d], check=True)
    c = libckpt_open(a, d)
    py = subprocess.run([sys.executable, "-c", f"""
import pickle, time, torch, torch.distributed.checkpoint
best = 1e9
for _ in range({a.runs}):
    with open({os.path.join(d, '.metadata')!r}, 'rb') as f:
        t0 = time.perf_counter(); pickle.load(f); best = min(best, time.perf_counter() - t0)
print(best)
"""], check=True, capture_output=True, text=True).stdout
    p = float(py.strip())
    mib = c["metadata_bytes"] / (1 << 20)
    print(f"| open+index {c['chunks']:,} chunks ({mib:.0f} MiB .metadata) | libckpt {c['seconds']:.3f} s "
          f"(peak RSS {c['peak_rss_mib']:.0f} MiB) | pickle.load {p:.3f} s | {p / c['seconds']:.1f}x faster |")


def bench_cat(a):
    d = os.path.join(a.work, f"big-{a.gib}g")
    if not os.path.exists(os.path.join(d, ".metadata")):
        subprocess.run([sys.executable, os.path.join(HERE, "make_big_ckpt.py"), d, str(a.gib)], check=True)
    ckpt = os.path.join(a.build, "tools/ckpt/ckpt")
    shards = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".distcp"))
    keys = json.loads(subprocess.run([ckpt, "ls", "--json", "-R", d], check=True, capture_output=True,
                                     text=True).stdout)
    tensors = [k["key"] for k in keys if k.get("kind") == "tensor"]
    total = sum(os.path.getsize(s) for s in shards)
    with open(os.devnull, "wb") as null:
        subprocess.run(["cat"] + shards, stdout=null, check=True)  # warm the page cache
        t_cat = best_of(a.runs, lambda: timed(["cat"] + shards, stdout=null))
        t_ckpt = best_of(a.runs, lambda: sum(timed([ckpt, "cat", "-f", d, k], stdout=null) for k in tensors))
    gib = total / (1 << 30)
    print(f"| ckpt cat of {len(tensors)} tensors ({gib:.2f} GiB, {len(shards)} shards) | ckpt cat {t_ckpt:.3f} s "
          f"({gib / t_ckpt:.2f} GiB/s) | cat {t_cat:.3f} s ({gib / t_cat:.2f} GiB/s) | {t_cat / t_ckpt:.2f}x of cat |")


HF_WRITER = """
import os, sys, torch, torch.distributed as dist, torch.multiprocessing as mp
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import HuggingFaceStorageWriter
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor

def worker(rank, ws, out, n):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + out + ".init", rank=rank, world_size=ws)
    mesh = init_device_mesh("cpu", (ws,))
    g = torch.Generator().manual_seed(0)
    sd = {f"model.layers.{i // 8}.w{i % 8}": distribute_tensor(torch.randn(8, 4, generator=g), mesh,
                                                               [Shard(0)], src_data_rank=None)
          for i in range(n)}
    dcp.save(sd, storage_writer=HuggingFaceStorageWriter(out, save_distributed=True))
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(worker, args=(4, sys.argv[1], int(sys.argv[2])), nprocs=4)
"""


def bench_hf(a):
    d = os.path.join(a.work, f"hf-{a.hf_tensors}")
    if not os.path.isdir(d):
        script = os.path.join(a.work, "hf_writer.py")  # spawned workers import it by name
        with open(script, "w") as f:
            f.write(HF_WRITER)
        subprocess.run([sys.executable, script, d, str(a.hf_tensors)], check=True,
                       stderr=subprocess.DEVNULL)
    c = libckpt_open(a, d)
    py = subprocess.run([sys.executable, "-c", f"""
import time, torch
from torch.distributed.checkpoint import HuggingFaceStorageReader
best = 1e9
for _ in range({a.runs}):
    t0 = time.perf_counter(); md = HuggingFaceStorageReader({d!r}).read_metadata()
    best = min(best, time.perf_counter() - t0)
print(best, sum(len(v.chunks) for v in md.state_dict_metadata.values()))
"""], check=True, capture_output=True, text=True).stdout.split()
    p, nchunks = float(py[0]), int(py[1])
    assert nchunks == c["chunks"], (nchunks, c["chunks"])
    print(f"| open+index HuggingFace storage, {c['entries']:,} tensors, {c['chunks']:,} chunks in 4 "
          f"files | libckpt {c['seconds']:.3f} s (peak RSS {c['peak_rss_mib']:.0f} MiB) | "
          f"HuggingFaceStorageReader.read_metadata {p:.3f} s | {p / c['seconds']:.1f}x faster |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["index", "cat", "hf", "all"])
    ap.add_argument("--build", default="build")
    ap.add_argument("--work", default="/tmp/ckptfs-bench")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--chunks", type=int, default=1_000_000)
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--hf-tensors", type=int, default=20_000)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    print(f"<!-- {platform.node()} {platform.machine()} {os.cpu_count()} cpus, {time.strftime('%Y-%m-%d')} -->")
    if a.what in ("index", "all"):
        bench_index(a)
    if a.what in ("cat", "all"):
        bench_cat(a)
    if a.what in ("hf", "all"):
        bench_hf(a)


if __name__ == "__main__":
    main()
