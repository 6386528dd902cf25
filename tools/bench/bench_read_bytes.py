#!/usr/bin/env python3
"""bench_read_bytes.py — bytes read from storage / bytes needed, from the syscalls (issue 20):

  python3 tools/bench/bench_read_bytes.py [--build build] [--work /tmp/ckptfs-readbytes]
                                          [--ranks "2 4"] [--dims "1"] [--which demo,tall]
                                          [--ckpt NAME=DIR ...]

Checkpoints (made once under --work):
  demo   the demo model + AdamW state (`tools/demo/demo_gpt_save`, saved by 4 MPI ranks,
         403 MB, 8 layers, dim 512, vocab 8192)
  tall   one [1000000, 16] float32 tensor (64 MB), torch.distributed.checkpoint.save in one
         process (one chunk)
For each RANKS and layout dim<d>, every tensor of the checkpoint is loaded as its Shard(d)
slice (tensors with fewer dims whole, on every rank) by
  collective   mpirun -np RANKS ckpt load --mode collective
  independent  the same, every rank reading its own overlaps (the reader library)
  torch        torch.distributed.checkpoint.load into DTensors (gloo, world RANKS, CPU)
each run under `strace -f -y` (every process and thread); bytes read = what the read-family
syscalls (read, pread64, readv, preadv, preadv2) on the checkpoint's files returned
(tests/lib/strace_io.py): data files, and metadata files separately. Needed = the bytes of
the ranks' destination buffers (ckpt's `requested`, the same slices torch loads). The ckpt
rows also show the loader's own counters (`read`, `read_metadata`), which must equal strace's.
Wall times are not reported: strace slows every syscall."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tests" / "lib"))
import strace_io  # noqa: E402

TORCH_LOADER = textwrap.dedent("""
    import sys, warnings
    warnings.simplefilter("ignore")
    import torch, torch.distributed as dist, torch.distributed.checkpoint as dcp
    import torch.multiprocessing as mp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    def worker(rank, world, ckpt, dim, initfile):
        dist.init_process_group("gloo", init_method=f"file://{initfile}", rank=rank,
                                world_size=world)
        mesh = init_device_mesh("cpu", (world,))
        meta = dcp.FileSystemReader(ckpt).read_metadata()
        sd = {}
        for key, md in meta.state_dict_metadata.items():
            if not isinstance(md, TensorStorageMetadata):
                continue
            shape = list(md.size)
            if len(shape) <= dim:  # as ckpt load: replicated along a dim it lacks
                sd[key] = torch.empty(shape, dtype=md.properties.dtype)
                continue
            n = shape[dim]
            c = -(-n // world)
            lo, hi = min(rank * c, n), min((rank + 1) * c, n)
            local = list(shape)
            local[dim] = hi - lo
            t = torch.empty(local, dtype=md.properties.dtype)
            stride = torch.empty(shape, device="meta").stride()
            sd[key] = DTensor.from_local(t, mesh, [Shard(dim)], shape=torch.Size(shape),
                                         stride=stride, run_check=False)
        dcp.load(sd, checkpoint_id=ckpt, no_dist=False)
        dist.barrier()
        dist.destroy_process_group()

    if __name__ == "__main__":
        ckpt, world, dim, init = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
        mp.spawn(worker, args=(world, ckpt, dim, init), nprocs=world, join=True)
""")

TALL = textwrap.dedent("""
    import sys, warnings
    warnings.simplefilter("ignore")
    import torch, torch.distributed.checkpoint as dcp
    t = torch.arange(1000000 * 16, dtype=torch.float32).reshape(1000000, 16)
    dcp.save({"w": t}, checkpoint_id=sys.argv[1], no_dist=True)
""")

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "--mca",
          "btl_vader_single_copy_mechanism", "none"]


def make(which, build, work):
    d = work / which
    if (d / "ckpt" / ".metadata").is_file() or (d / "ckpt" / "step-1" / ".metadata").is_file():
        return d / "ckpt" if which == "tall" else d / "ckpt" / "step-1"
    d.mkdir(parents=True, exist_ok=True)
    if which == "tall":
        subprocess.run([sys.executable, "-c", TALL, str(d / "ckpt")], check=True)
        return d / "ckpt"
    (d / "ckpt").mkdir(exist_ok=True)
    subprocess.run([*MPIRUN, "-np", "4", str(build / "tools" / "demo" / "demo_gpt_save"),
                    str(d / "ckpt"), "step-1", "--no-fsync"], check=True, capture_output=True)
    return d / "ckpt" / "step-1"


def ckpt_row(build, ckpt, m, dim, mode, tmp):
    tmp.mkdir(parents=True, exist_ok=True)
    trace = " ".join(strace_io.STRACE)
    inner = f'exec {trace} -o "{tmp}/trace.$OMPI_COMM_WORLD_RANK" "$0" load "$@"'
    r = subprocess.run([*MPIRUN, "-np", str(m), "sh", "-c", inner,
                        str(build / "tools" / "ckpt" / "ckpt"), str(ckpt), "--layout",
                        f"dim{dim}", "--mode", mode, "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"ckpt load failed:\n{r.stdout}{r.stderr}")
    per = json.loads(r.stdout.strip().splitlines()[-1])["per_rank"]
    ts = [strace_io.tally(str(tmp / f"trace.{k}"), str(ckpt)) for k in range(m)]
    return {"needed": sum(p["requested"] for p in per),
            "data": sum(t.data_bytes for t in ts), "meta": sum(t.meta_bytes for t in ts),
            "counter": sum(p["read"] for p in per),
            "counter_meta": sum(p["read_metadata"] for p in per)}


def torch_row(ckpt, m, dim, tmp):
    tmp.mkdir(parents=True, exist_ok=True)
    script = tmp / "torch_loader.py"
    script.write_text(TORCH_LOADER)
    subprocess.run([*strace_io.STRACE, "-o", str(tmp / "trace"), sys.executable, str(script),
                    str(ckpt), str(m), str(dim), str(tmp / "init")], check=True,
                   capture_output=True)
    t = strace_io.tally(str(tmp / "trace"), str(ckpt))
    return {"data": t.data_bytes, "meta": t.meta_bytes}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--work", default="/tmp/ckptfs-readbytes")
    ap.add_argument("--ranks", default="2 4")
    ap.add_argument("--dims", default="1")
    ap.add_argument("--which", default="tall,demo")
    ap.add_argument("--ckpt", action="append", default=[],
                    help="NAME=DIR: also measure an existing checkpoint (e.g. make_big_ckpt.py's)")
    a = ap.parse_args()
    build, work = Path(a.build).resolve(), Path(a.work)
    print("| checkpoint | layout | method | needed MB | data read MB (strace) | read / needed "
          "| metadata read MB (strace) | ckpt counters: read, metadata MB |")
    print("|---|---|---|---|---|---|---|---|")
    todo = [(w, None) for w in a.which.split(",") if w]
    todo += [tuple(c.split("=", 1)) for c in a.ckpt]
    for which, given in todo:
        ckpt = Path(given).resolve() if given else make(which, build, work)
        for m in map(int, a.ranks.split()):
            for dim in map(int, a.dims.split()):
                rows = {}
                for mode in ("collective", "independent"):
                    rows[mode] = ckpt_row(build, ckpt, m, dim, mode,
                                          work / "runs" / f"{which}-{m}-{dim}-{mode}")
                rows["torch dcp.load"] = torch_row(ckpt, m, dim,
                                                   work / "runs" / f"{which}-{m}-{dim}-torch")
                need = rows["collective"]["needed"]
                for name, r in rows.items():
                    ctr = (f"{r['counter'] / 1e6:.3f}, {r['counter_meta'] / 1e6:.3f}"
                           if "counter" in r else "–")
                    print(f"| {which} | dim{dim}-of-{m} | {name} | {need / 1e6:.3f} | "
                          f"{r['data'] / 1e6:.3f} | {r['data'] / need:.2f}× | "
                          f"{r['meta'] / 1e6:.3f} | {ctr} |", flush=True)


if __name__ == "__main__":
    main()
