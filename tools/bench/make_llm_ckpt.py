#!/usr/bin/env python3
"""make_llm_ckpt.py — writes an FSDP2-like LLM checkpoint with real torch for benchmarks: a
Llama-shaped model (token embedding and output of VOCAB x DIM, LAYERS blocks of attention
wq/wk/wv/wo DIM x DIM, feed-forward w1/w3 HIDDEN x DIM and w2 DIM x HIDDEN, two norms per
block and a final one) whose every parameter is a DTensor Shard(0) over WORLD ranks (gloo,
CPU), as fully_shard leaves them, plus AdamW's exp_avg / exp_avg_sq (same placements) and
its 0-d `step` per parameter unless --no-optim.  Each rank makes only its own shard.

  make_llm_ckpt.py OUTDIR [--world 4] [--vocab 32000] [--dim 512] [--layers 12]
                   [--hidden 1408] [--no-optim]

The defaults make 819 MiB in 4 shard files (449 entry files under the mount)."""
import argparse
import os
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard


def shapes(a):
    out = {"tok_embeddings.weight": (a.vocab, a.dim)}
    for i in range(a.layers):
        p = f"layers.{i}."
        for w in ("wq", "wk", "wv", "wo"):
            out[p + f"attention.{w}.weight"] = (a.dim, a.dim)
        out[p + "feed_forward.w1.weight"] = (a.hidden, a.dim)
        out[p + "feed_forward.w2.weight"] = (a.dim, a.hidden)
        out[p + "feed_forward.w3.weight"] = (a.hidden, a.dim)
        out[p + "attention_norm.weight"] = (a.dim,)
        out[p + "ffn_norm.weight"] = (a.dim,)
    out["norm.weight"] = (a.dim,)
    out["output.weight"] = (a.vocab, a.dim)
    return out


def shard0(shape, rank, world, seed, mesh):
    """Rank `rank`'s Shard(0) piece (torch.chunk's split: the last ranks may get less)."""
    rows = shape[0]
    per = -(-rows // world)
    lo, hi = min(rank * per, rows), min((rank + 1) * per, rows)
    g = torch.Generator().manual_seed(seed * 131 + rank)
    local = torch.randn((hi - lo, *shape[1:]), generator=g)
    stride = tuple(int(torch.tensor(shape[i + 1:]).prod()) for i in range(len(shape)))
    return DTensor.from_local(local, mesh, [Shard(0)], run_check=False, shape=torch.Size(shape),
                              stride=stride)


def worker(rank, world, out, a, initfile):
    dist.init_process_group("gloo", init_method=f"file://{initfile}", rank=rank, world_size=world)
    mesh = init_device_mesh("cpu", (world,))
    model, state = {}, {}
    for i, (k, shp) in enumerate(shapes(a).items()):
        model[k] = shard0(shp, rank, world, i, mesh)
        if a.optim:
            state[k] = {"step": torch.tensor(1000.0),
                        "exp_avg": shard0(shp, rank, world, 10000 + i, mesh),
                        "exp_avg_sq": shard0(shp, rank, world, 20000 + i, mesh).abs()}
    sd = {"model": model}
    if a.optim:
        sd["optim"] = {"state": state, "param_groups": [
            {"lr": 3e-4, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1,
             "params": list(model)}]}
    dcp.save(sd, checkpoint_id=out)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--dim", type=int, default=512)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=1408)
    ap.add_argument("--no-optim", dest="optim", action="store_false")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    initfile = tempfile.mktemp(prefix="ckptfs-bench-init-")
    mp.spawn(worker, args=(a.world, a.out, a, initfile), nprocs=a.world, join=True)
    total = sum(os.path.getsize(os.path.join(a.out, f)) for f in os.listdir(a.out))
    print(f"{a.out}: {total / (1 << 20):.0f} MiB in {len(os.listdir(a.out))} files")


if __name__ == "__main__":
    main()
