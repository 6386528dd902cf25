#!/usr/bin/env python3
"""Writes the seed inputs of fuzz_dirscan (tests/fuzz/corpus/dirscan) from fixture files:
run directories with complete, half-copied and hostile steps (FIFO shards, symlinks to
/dev/zero, loops, `latest` pointing anywhere), a checkpoint at the top, HuggingFace
safetensors, torch-checkpointing.  The encoding is fuzz_dirscan.c's."""
import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "fixtures" / "data"


def name(s):
    b = s.encode()
    assert len(b) <= 48 and b"/" not in b
    return bytes([len(b)]) + b


def file(n, data):
    return bytes([0]) + name(n) + struct.pack("<H", len(data)) + data


def mkdir(n):
    return bytes([1]) + name(n)


LEAVE = bytes([2])


def symlink(n, target, absolute=False):
    return bytes([3]) + name(n) + name(target.replace("/", "_")) + bytes([1 if absolute else 0])


def fifo(n):
    return bytes([4]) + name(n)


def step(d, files):
    return mkdir(d) + b"".join(file(f.name, f.read_bytes()) for f in files) + LEAVE


def main():
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "corpus" / "dirscan"
    out.mkdir(parents=True, exist_ok=True)
    zstd = sorted((DATA / "zstd" / "ckpt").iterdir())
    st = sorted((DATA / "safetensors_fmt" / "ckpt").iterdir())
    hf = sorted((DATA / "hf_sharded" / "ckpt").iterdir())
    meta = (DATA / "zstd" / "ckpt" / ".metadata").read_bytes()
    tc = sorted((HERE.parent / "fixtures" / "torch-checkpointing" / "tc_sharded" / "ckpt")
                .iterdir())
    tcd = HERE.parent / "fixtures" / "torch-checkpointing"
    tcl = sorted((tcd / "tc_layouts" / "ckpt").iterdir())
    # a 4-rank step, less the per-rank files a load in one process never reads
    tcm = sorted(f for f in (tcd / "tc_mesh2d" / "ckpt").iterdir()
                 if not (f.name.startswith(("config_", "blob_", "train_"))
                         and not f.stem.endswith("_0")))
    seeds = {
        "seed-run": step("step-1", zstd) + step("step-2", zstd) + file("latest", b"step-2\n"),
        "seed-hostile-run": (
            step("step-1", zstd)
            + mkdir("step-3") + file(".metadata", meta) + fifo("__0_0.distcp")
            + symlink("__1_0.distcp", "/dev/zero", absolute=True) + LEAVE
            + mkdir("step-4") + file(".metadata", meta) + LEAVE  # shards not copied yet
            + symlink("step-5", "step-1") + symlink("loop", "loop")
            + symlink("up", "..") + file("latest", b"step-4")
            + file("latest_checkpointed_iteration.txt", b"4")),
        "seed-top": b"".join(file(f.name, f.read_bytes()) for f in zstd),
        "seed-safetensors": step("iter_0000010", st) + step("hf", hf),
        # torch-checkpointing: metadata.pkl and <item>_<rank>.pt, and a step without metadata
        "seed-torch-checkpointing": (step("step_10", tc) + step("step_20", [
            f for f in tc if f.name.startswith("train_")])),
        # its other item layouts: safetensors, JSON, raw bytes, a torch.save file of its own
        # name (metadata.pkl), and beside `<item>_0.pt` files without metadata.pkl; a 2-D mesh
        # in torch.save and safetensors files
        "seed-tc-layouts": (step("step_10", tcl) + step("step_20", [
            f for f in tcl if f.name.startswith(("step_", "config_", "blob_"))])),
        "seed-tc-mesh2d": step("step_30", tcm),
    }
    for k, v in seeds.items():
        (out / k).write_bytes(v)
        print(out / k, len(v))


if __name__ == "__main__":
    main()
