#!/usr/bin/env python3
"""bench_load.py — the collective loader (issue 4) against its baselines, in one run:

  python3 tools/bench/bench_load.py [--build build] [--work /tmp/ckptfs-load-bench]
                                    [--gib 2.5] [--saved 4] [--ranks 3] [--runs 3] [--gpu]
                                    [--transport auto|mpi|nccl] [--sweep "1 1:4 4 8:2"]
                                    [--extra "CKPT LOAD OPTIONS"] [--ckpt-bin PATH]
                                    [--replicated]

A checkpoint of GIB GiB is written by real torch with SAVED gloo ranks (make_big_ckpt.py:
float32 tensors of 1021 rows, Shard(0), uneven). RANKS processes then load it as Shard(0) and
as Shard(1) DTensor-style slices:
  collective   mpirun -np RANKS ckpt load --mode collective (each stored byte read once)
  independent  the same code, every rank reading its own overlaps
  torch        torch.distributed.checkpoint.load into DTensors (gloo, world RANKS)
Reported: wall time of the load (slowest rank, process start-up and group set-up excluded),
bytes read from storage (ckpt: the loader's counters; torch: the processes' rchar deltas from
/proc/self/io, i.e. bytes returned by read syscalls, page cache hits included) relative to
the bytes actually needed. Best of --runs. The source is hot in the page cache.

--gpu (a CUDA build on a machine with GPUs): instead, the host-to-device placement rate of
`ckpt load --device cuda` (bytes placed on the devices / wall time of the load, rank k on
device k % ndev) against the pinned cudaMemcpy bandwidth of the same devices (torch: a
pinned host tensor copied to each device, synchronised, best of --runs), as a ratio.
--transport (with --gpu) is passed to `ckpt load`: how shared bytes travel between ranks
(mpi: through host memory; nccl: device to device; auto: nccl when available); the table
says which one the loader used.  --sweep "1 1:4 4 8:2" (with --gpu): one row pair per
RANKS[:IO_THREADS], with each phase of the slowest rank.  Ranks run unbound
(`mpirun --bind-to none`), like torch's processes.

--replicated: instead, replicated targets (#20 item 3): RANKS processes load the model as
`RANKS:R` (every rank the whole model) and `2x(RANKS/2):R,S0` (HSDP), collective and
independent; reported per layout: wall time, bytes read / union, the bytes each rank sent
(max and mean over the ranks) against the union U, and the lower bound of a rank's egress
when every needed byte is read once, spread evenly and each rank receives what it does not
read (a ring all-gather's): (c-1)/M x U for bytes needed by c ranks (M:R: c = M; R,S0: c = 2).
Metadata and chunk headers once per job (docs/loader.md "Read once") show in `meta read`."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent

TORCH_LOADER = textwrap.dedent("""
    import json, os, sys, time
    import torch, torch.distributed as dist, torch.distributed.checkpoint as dcp
    import torch.multiprocessing as mp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    def rchar():
        for line in open("/proc/self/io"):
            if line.startswith("rchar:"):
                return int(line.split()[1])

    def worker(rank, world, ckpt, dim, initfile, out):
        dist.init_process_group("gloo", init_method=f"file://{initfile}", rank=rank,
                                world_size=world)
        mesh = init_device_mesh("cpu", (world,))
        meta = dcp.FileSystemReader(ckpt).read_metadata()
        sd = {"model": {}}
        for key, md in meta.state_dict_metadata.items():
            if not key.startswith("model."):
                continue
            shape = list(md.size)
            n = shape[dim]
            c = -(-n // world)
            lo, hi = min(rank * c, n), min((rank + 1) * c, n)
            local = list(shape)
            local[dim] = hi - lo
            t = torch.empty(local, dtype=md.properties.dtype)
            stride = torch.empty(shape, device="meta").stride()
            sd["model"][key[len("model."):]] = DTensor.from_local(
                t, mesh, [Shard(dim)], shape=torch.Size(shape), stride=stride, run_check=False)
        dist.barrier()
        r0, t0 = rchar(), time.perf_counter()
        dcp.load(sd, checkpoint_id=ckpt)
        dist.barrier()
        t1, r1 = time.perf_counter(), rchar()
        with open(f"{out}.{rank}", "w") as f:
            json.dump({"seconds": t1 - t0, "read": r1 - r0}, f)
        dist.destroy_process_group()

    if __name__ == "__main__":
        ckpt, world, dim, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
        init = out + ".init"
        mp.spawn(worker, args=(world, ckpt, dim, init, out), nprocs=world, join=True)
""")


def ckpt_load(ckpt_bin, ckpt, ranks, dim, mode, extra=(), full=False):
    layout = dim if isinstance(dim, str) else f"dim{dim}"
    # unbound, like torch's processes (mpirun binds up to 2 ranks to one core each)
    r = subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
                        "--mca", "btl_vader_single_copy_mechanism", "none", "-np", str(ranks),
                        str(ckpt_bin), "load", str(ckpt), "--layout", layout, "--keys",
                        "model", "--mode", mode, "--json", *extra],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"ckpt load failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    s = json.loads(r.stdout.strip().splitlines()[-1])
    per = s["per_rank"]
    if full:
        return s
    return (max(p["total_s"] for p in per), sum(p["read"] for p in per),
            sum(p["requested"] for p in per), per[0].get("transport", "mpi"))


def torch_load(ckpt, ranks, dim, work):
    script = Path(work) / "torch_loader.py"
    script.write_text(TORCH_LOADER)
    out = tempfile.mktemp(dir=work, prefix="tl-")
    subprocess.run([sys.executable, str(script), str(ckpt), str(ranks), str(dim), out],
                   check=True, capture_output=True)
    res = [json.loads(Path(f"{out}.{k}").read_text()) for k in range(ranks)]
    for k in range(ranks):
        os.unlink(f"{out}.{k}")
    return max(x["seconds"] for x in res), sum(x["read"] for x in res)


PINNED_H2D = textwrap.dedent("""
    import json, sys, time, torch
    n, runs = int(sys.argv[1]), int(sys.argv[2])
    out = []
    for d in range(torch.cuda.device_count()):
        src = torch.empty(n, dtype=torch.uint8, pin_memory=True)
        src.fill_(1)
        dst = torch.empty(n, dtype=torch.uint8, device=f"cuda:{d}")
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize(d)
        best = 1e9
        for _ in range(runs):
            t0 = time.perf_counter()
            dst.copy_(src, non_blocking=True)
            torch.cuda.synchronize(d)
            best = min(best, time.perf_counter() - t0)
        out.append(n / best)
    print(json.dumps(out))
""")


def gpu_bench(a, ckpt_bin, ckpt):
    """Placement rate of ckpt load --device cuda vs pinned cudaMemcpy bandwidth, for each
    RANKS[:THREADS] of --sweep (THREADS: --io-threads; default: the loader's)."""
    r = subprocess.run([sys.executable, "-c", PINNED_H2D, str(1 << 30), str(a.runs)],
                       capture_output=True, text=True, check=True)
    bw = json.loads(r.stdout.strip().splitlines()[-1])
    ndev = len(bw)
    print(f"pinned cudaMemcpy host-to-device, 1 GiB, per device: "
          + ", ".join(f"{b / 2**30:.2f} GiB/s" for b in bw))
    print("\nwall: the slowest rank's load; setup, plan, read, exchange: that rank's phases "
          "(setup: pinned staging, I/O threads, NCCL communicator; read: in-place runs and "
          "windows, placed as they are read; exchange: moving and placing)\n")
    print("| layout | ranks | I/O threads | devices used | transport | wall s | setup s | plan s | "
          "read s | exchange s | placed GiB | placement GiB/s | pinned bound GiB/s | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for spec in (a.sweep.split() if a.sweep else [str(a.ranks)]):
        ranks, _, threads = spec.partition(":")
        ranks = int(ranks)
        extra = ["--device", "cuda", "--transport", a.transport, *a.extra.split()]
        if threads:
            extra += ["--io-threads", threads]
        for dim in (0, 1):
            runs = [ckpt_load(ckpt_bin, ckpt, ranks, dim, "collective", extra, full=True)
                    for _ in range(a.runs)]
            best = min(runs, key=lambda s: s["wall_seconds"])
            per = best["per_rank"]
            slow = max(per, key=lambda p: p["total_s"])
            sec = slow["total_s"]
            placed = sum(p["requested"] for p in per)
            used = min(ranks, ndev)
            bound = sum(sorted(bw)[:used])  # devices work in parallel, one stream each
            rate = placed / sec
            # builds before 2026-11-25 print neither io_threads nor setup_s (and count the
            # setup in plan_s): their rows still print, with '-'
            threads = slow.get("io_threads", "-")
            setup = f"{slow['setup_s']:.3f}" if "setup_s" in slow else "-"
            print(f"| dim{dim}-of-{ranks} | {ranks} | {threads} | {used} | "
                  f"{slow['transport']} | {sec:.3f} | {setup} | "
                  f"{slow['plan_s']:.3f} | "
                  f"{slow['read_s']:.3f} | {slow['exchange_s']:.3f} | {placed / 2**30:.2f} | "
                  f"{rate / 2**30:.2f} | {bound / 2**30:.2f} | {rate / bound:.2f} |",
                  flush=True)


def replicated_bench(a, ckpt_bin, ckpt):
    m = a.ranks
    print("| layout | ranks | method | wall s | read / union | meta read (job) | "
          "sent per rank max / mean | max sent / U | bound / U |")
    print("|---|---|---|---|---|---|---|---|---|")
    for layout, copies in ((f"{m}:R", m), (f"2x{m // 2}:R,S0", 2)):
        for mode in ("collective", "independent"):
            runs = [ckpt_load(ckpt_bin, ckpt, m, layout, mode, full=True)
                    for _ in range(a.runs)]
            best = min(runs, key=lambda s: max(p["total_s"] for p in s["per_rank"]))
            per = best["per_rank"]
            u = best["union_bytes"] or sum(p["requested"] for p in per) // copies
            sent = [p["sent"] for p in per]
            wall = max(p["total_s"] for p in per)
            read = sum(p["read"] for p in per)
            meta = sum(p["read_metadata"] for p in per)
            bound = (copies - 1) / m  # each rank's part of the ring all-gathers, over U
            print(f"| {layout} | {m} | {mode} | {wall:.3f} | {read / u:.3f}x | {meta} B | "
                  f"{max(sent) / 2**20:.1f} / {sum(sent) / len(sent) / 2**20:.1f} MiB | "
                  f"{max(sent) / u:.3f} | {bound:.3f} |", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--work", default="/tmp/ckptfs-load-bench")
    ap.add_argument("--gib", type=float, default=2.5)
    ap.add_argument("--saved", type=int, default=4)
    ap.add_argument("--ranks", type=int, default=3)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--gpu", action="store_true",
                    help="placement rate into GPU memory vs pinned cudaMemcpy bandwidth")
    ap.add_argument("--transport", choices=("auto", "mpi", "nccl"), default="auto",
                    help="with --gpu: how shared bytes travel between ranks")
    ap.add_argument("--sweep", default="",
                    help="with --gpu: rows 'RANKS[:IO_THREADS] ...' instead of --ranks alone")
    ap.add_argument("--extra", default="",
                    help="with --gpu: more `ckpt load` options, e.g. '--budget 64M'")
    ap.add_argument("--replicated", action="store_true",
                    help="replicated layouts (RANKS:R, 2x(RANKS/2):R,S0): bytes sent per rank")
    ap.add_argument("--ckpt-bin", default="",
                    help="the ckpt executable (default: BUILD/tools/ckpt/ckpt)")
    a = ap.parse_args()
    Path(a.work).mkdir(parents=True, exist_ok=True)
    ckpt_bin = Path(a.ckpt_bin) if a.ckpt_bin else Path(a.build).resolve() / "tools/ckpt/ckpt"
    ckpt = Path(a.work) / f"ckpt-{a.gib}g-{a.saved}"
    if not (ckpt / ".metadata").exists():
        subprocess.run([sys.executable, str(HERE / "make_big_ckpt.py"), str(ckpt), str(a.gib),
                        str(a.saved)], check=True)
    for f in ckpt.glob("*.distcp"):  # hot source
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass
    print(f"\n{ckpt}: saved by {a.saved} ranks, loaded by {a.ranks}; best of {a.runs}\n")
    if a.gpu:
        gpu_bench(a, ckpt_bin, ckpt)
        return
    if a.replicated:
        replicated_bench(a, ckpt_bin, ckpt)
        return
    print("| layout | method | wall s | read from storage / needed | vs torch |")
    print("|---|---|---|---|---|")
    for dim in (0, 1):
        res = {}
        for mode in ("collective", "independent"):
            runs = [ckpt_load(ckpt_bin, ckpt, a.ranks, dim, mode) for _ in range(a.runs)]
            res[mode] = (min(r[0] for r in runs), runs[0][1], runs[0][2])
        needed = res["collective"][2]
        truns = [torch_load(ckpt, a.ranks, dim, a.work) for _ in range(a.runs)]
        res["torch dcp.load"] = (min(t[0] for t in truns), truns[0][1], needed)
        tt = res["torch dcp.load"][0]
        for name, (sec, read, _) in res.items():
            print(f"| dim{dim}-of-{a.ranks} | {name} | {sec:.3f} | {read / needed:.2f}x | "
                  f"{tt / sec:.2f}x faster |" if name != "torch dcp.load" else
                  f"| dim{dim}-of-{a.ranks} | {name} | {sec:.3f} | {read / needed:.2f}x | 1.00 |")


if __name__ == "__main__":
    main()
