#!/usr/bin/env python3
"""test_gpu.py — the collective loader into real CUDA device memory (`ckpt load --device
cuda`, rank k on device k % ndev) under real `mpirun`: for every fixture, M = 1..3 ranks,
dim0/dim1, in-place and exchanged bytes, default and tiny staging budgets, the shards copied
back from the devices equal the host path's shards and torch's own reading (torch.chunk
slices), and the counters show every requested byte went host-to-device through the pinned
staging, each stored byte read once.

Exits 77 (meson: skipped) when the CUDA runtime finds no device, so CI without a GPU stays
green.  Environment: CKPT_BIN (a CUDA build of ckpt), CKPT_FIXTURES / CKPT_FIXTURES_DEFAULT.

--nccl (meson test `gpu-nccl`): the NCCL transport on real devices and real NCCL, one rank
per GPU (M = 1..min(4, devices)): `--transport nccl` shards equal the host path's and
torch's, and the counters show every shared byte went over NCCL.  With one device only M = 1
runs (NCCL refuses two ranks on one device): the communicator, the window upload and the
device-to-device placement, but no send or receive.  Exits 77 with a ckpt built without NCCL.

--part I/N: only every N-th fixture from the I-th (0-based), so that N runs can share a
machine's cores.

Both modes also load a realistic checkpoint (realistic.py: the README demo's model, saved by
4 ranks) at M = 1..8 (NCCL: one rank per device), dim0 and dim1, against torch."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mpi"))
import test_load as tl  # noqa: E402  (helpers: mpirun, tensors, shard, check)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import realistic as rl  # noqa: E402  (the demo model, saved and read by torch)


def realistic(transports, ms) -> tuple[int, int]:
    """Issue #26: the README demo's model (many small tensors, each its own cudaMalloc, back
    to back on the device) saved by 4 ranks, loaded at each M of `ms`, dim0 and dim1, over
    each transport; every rank's shard equals torch's.  (runs, failures)"""
    if not rl.DEMO:
        print("realistic checkpoint: skipped (no DEMO_GPT_SAVE)")
        return 0, 0
    runs = failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        ckpt = rl.save_demo(t / "run", 4)
        ref = rl.torch_reference(ckpt, t)
        for transport in transports:
            for m in ms:
                for dim in (0, 1):
                    try:
                        rl.load_and_compare(ckpt, ref, m, dim, transport, t / "out")
                    except AssertionError as e:
                        failures += 1
                        print(f"FAIL realistic {transport} M={m} dim{dim}: {str(e)[:400]}")
                    runs += 1
                    shutil.rmtree(t / "out", ignore_errors=True)
    print(f"{runs - failures} of {runs} realistic-checkpoint loads equal torch")
    return runs, failures


def probe() -> bool:
    r = tl.mpirun(1, tl.FIXTURES / "fsdp2_ws2" / "ckpt", "--device", "cuda", "-q")
    if r.returncode != 0 and "no usable CUDA device" in r.stderr:
        print("SKIP: no CUDA device:", r.stderr.strip().splitlines()[0])
        return False
    if r.returncode != 0:
        raise SystemExit(f"ckpt load --device cuda failed: {r.stderr}")
    return True


def device_count() -> int:
    smi = shutil.which("nvidia-smi")
    if smi:
        r = subprocess.run([smi, "-L"], capture_output=True, text=True)
        if r.returncode == 0:
            return sum(1 for line in r.stdout.splitlines() if line.startswith("GPU "))
    try:
        import torch
        return torch.cuda.device_count()
    except ImportError:
        return 0


def names() -> list[str]:
    """The fixtures of this run: all, or those of --part I/N."""
    args = sys.argv[1:]
    if "--part" not in args:
        return tl.NAMES
    i, n = (int(x) for x in args[args.index("--part") + 1].split("/"))
    return tl.NAMES[i::n]


def main_nccl() -> int:
    if not probe():
        return 77
    ndev = device_count()
    if ndev < 2:
        print(f"{ndev} device: M = 1 only, no send or receive (NCCL refuses two ranks on one "
              "device)")
    r = tl.mpirun(1, tl.FIXTURES / "fsdp2_ws2" / "ckpt", "--device", "cuda", "--transport",
                  "nccl", "-q")
    if r.returncode != 0 and "no NCCL support" in r.stderr:
        print("SKIP: this ckpt is built without NCCL")
        return 77
    failures = runs = 0
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        for name in names():
            fx = tl.FIXTURES / name
            for m in range(1, max(1, min(4, ndev)) + 1):
                for dim in (0, 1):
                    for direct, budget in (("1", "256M"), ("never", "2K")):
                        extra = ("--budget", budget)
                        try:
                            dev, _ = tl.check(fx, m, dim, t / "dev", direct=direct,
                                              extra=("--device", "cuda", "--transport", "nccl",
                                                     *extra))
                            host, _ = tl.check(fx, m, dim, t / "host", direct=direct, extra=extra)
                            per = dev["per_rank"]
                            assert all(p["transport"] == "nccl" for p in per), per
                            assert [p["sent_nccl"] for p in per] == [p["sent"] for p in per]
                            assert [p["received_nccl"] for p in per] == [p["received"] for p in per]
                            assert [p["device"] for p in per] == [p["requested"] for p in per]
                            assert sum(p["read_plan"] for p in per) == dev["union_bytes"]
                            for f in (t / "host").rglob("*"):
                                if f.is_file():
                                    g = t / "dev" / f.relative_to(t / "host")
                                    assert g.read_bytes() == f.read_bytes(), g
                        except AssertionError as e:
                            failures += 1
                            print(f"FAIL nccl {name} M={m} dim{dim} direct={direct} "
                                  f"budget={budget}: {str(e)[:400]}")
                        runs += 1
                        shutil.rmtree(t / "dev", ignore_errors=True)
                        shutil.rmtree(t / "host", ignore_errors=True)
    print(f"{runs - failures} of {runs} NCCL loads equal the host path and torch")
    r2, f2 = realistic(["nccl"], range(1, max(1, min(8, ndev)) + 1))
    return 1 if failures or f2 else 0


def main() -> int:
    if "--nccl" in sys.argv[1:]:
        return main_nccl()
    if not probe():
        return 77
    smi = shutil.which("nvidia-smi")
    if smi:
        print(subprocess.run([smi, "-L"], capture_output=True, text=True).stdout.strip())
    failures = 0
    runs = 0
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        for name in names():
            fx = tl.FIXTURES / name
            for m in (1, 2, 3):
                for dim in (0, 1):
                    for direct, budget in (("1", "256M"), ("never", "2K")):
                        extra = ("--budget", budget)
                        try:
                            dev, _ = tl.check(fx, m, dim, t / "dev", direct=direct,
                                              extra=("--device", "cuda", "--transport", "mpi",
                                                     *extra))
                            host, _ = tl.check(fx, m, dim, t / "host", direct=direct, extra=extra)
                            per = dev["per_rank"]
                            assert [p["device"] for p in per] == [p["requested"] for p in per]
                            assert sum(p["read_plan"] for p in per) == dev["union_bytes"]
                            for f in (t / "host").rglob("*"):
                                if f.is_file():
                                    g = t / "dev" / f.relative_to(t / "host")
                                    assert g.read_bytes() == f.read_bytes(), g
                        except AssertionError as e:
                            failures += 1
                            print(f"FAIL {name} M={m} dim{dim} direct={direct} budget={budget}: "
                                  f"{str(e)[:400]}")
                        runs += 1
                        shutil.rmtree(t / "dev", ignore_errors=True)
                        shutil.rmtree(t / "host", ignore_errors=True)
    print(f"{runs - failures} of {runs} device loads equal the host path and torch")
    r2, f2 = realistic(["mpi"], range(1, 9))
    return 1 if failures or f2 else 0


if __name__ == "__main__":
    sys.exit(main())
