"""save_device_check.py — shared by test_save_device_mock.py (stand-in CUDA runtime) and
test_save_gpu.py (real devices): runs save_device_driver (tests/gpu/save_device_driver.c) and
checks with real torch `dcp.load` (no process group) that the checkpoint it wrote holds
exactly the driver's values, bit for bit."""

from __future__ import annotations

import os
import subprocess

import torch
import torch.distributed.checkpoint as dcp

MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]


def expected():
    w = ((torch.arange(300000, dtype=torch.int64) % 4093).to(torch.float32) * 0.5 - 7)
    return {
        "model": {
            "w": w.reshape(1000, 300),
            "norm": (torch.arange(9, dtype=torch.float32) * 0.125).to(torch.float16).reshape(3, 3),
            "u8": ((torch.arange(257, dtype=torch.int64) * 7 + 3) % 256).to(torch.uint8),
            "e": torch.zeros(0, 3, dtype=torch.float32),
            "step": torch.tensor(12345678901, dtype=torch.int64),
        },
        "lr": 0.5,
    }


def stored_bytes():
    """Tensor bytes stored once each (what the ranks' device counters must add up to)."""
    m = expected()["model"]
    return sum(t.numel() * t.element_size() for t in m.values())


def bits(t):
    return t.contiguous().reshape(-1).view(torch.uint8)


def load_and_check(ckpt):
    want = expected()
    sd = {"model": {k: torch.full_like(v, 3) if v.numel() else torch.zeros_like(v)
                    for k, v in want["model"].items()}, "lr": None}
    # dcp.load turns a failing read_metadata into "metadata is None": read it here first,
    # so that a failure shows torch's own error
    dcp.FileSystemReader(str(ckpt)).read_metadata()
    dcp.load(sd, checkpoint_id=str(ckpt), no_dist=True)
    for k, v in want["model"].items():
        got = sd["model"][k]
        assert got.dtype == v.dtype and got.shape == v.shape, k
        assert torch.equal(bits(got), bits(v)), f"{k}: bytes differ"
    assert sd["lr"] == 0.5, sd["lr"]


def torch_reads_format(ckpt):
    """Whether this torch reads the metadata the saver writes (torch's current format: older
    torch, e.g. 2.11, unpickles only the 5-field TensorProperties state, not the 6 fields
    written since strides were added)."""
    try:
        dcp.FileSystemReader(str(ckpt)).read_metadata()
    except ValueError as e:
        if "too many values to unpack" not in str(e):
            raise
        print(f"NOTE: torch {torch.__version__} cannot read the current DCP metadata format "
              f"({e}): its own dcp.load check is skipped; `ckpt cat` checks every value")
        return False
    return True


def cat_and_check(ckpt_bin, ckpt):
    """Every value of the checkpoint, read back by `ckpt cat` (the reader library), equals the
    driver's values bit for bit."""
    for k, v in expected()["model"].items():
        r = subprocess.run([ckpt_bin, "cat", str(ckpt), f"model.{k}"], capture_output=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout == bits(v).numpy().tobytes(), f"{k}: bytes differ"
    r = subprocess.run([ckpt_bin, "cat", str(ckpt), "lr", "--text"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "0.5", r.stdout + r.stderr


def run_single(driver, out, *opts, env=None, timeout=120):
    r = subprocess.run([driver, "single", str(out), *opts], capture_output=True, text=True,
                       timeout=timeout, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    line = r.stdout.strip().splitlines()[-1]
    assert line.startswith("ok device="), r.stdout
    return int(line.split("=", 1)[1])


def run_mpi(driver, np_, parent, step, *opts, env_names=(), env=None, timeout=180):
    xs = [a for n in env_names for a in ("-x", n)]
    r = subprocess.run(MPIRUN + xs + ["-np", str(np_), driver, "mpi", str(parent), step, *opts],
                       capture_output=True, text=True, timeout=timeout, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    stats = {}
    for line in r.stdout.splitlines():
        if line.startswith("rank ") and ": ok " in line:
            k = int(line.split()[1].rstrip(":"))
            stats[k] = dict(kv.split("=") for kv in line.split(": ok ", 1)[1].split())
    assert sorted(stats) == list(range(np_)), r.stdout + r.stderr
    return {k: {n: int(v) for n, v in s.items()} for k, s in stats.items()}


def env_with(**kv):
    e = dict(os.environ)
    e.update({k: str(v) for k, v in kv.items()})
    return e
