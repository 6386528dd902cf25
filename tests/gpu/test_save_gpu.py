#!/usr/bin/env python3
"""test_save_gpu.py — the saver from real CUDA device memory: save_device_driver (built
against the real runtime) puts its pieces in device memory (rank k on device k % ndev) and
saves them with the per-rank API and under `mpirun -np 2` with the collective saver, for the
default and a tiny (many staging blocks) and an odd staging size; torch `dcp.load` reads
exactly the values the same driver saves from host memory, and every stored tensor byte went
device-to-host through the pinned staging.

`ckpt cat` (CKPT_BIN, the reader library) reads every value back bit for bit as well, which
also covers a torch too old to read the current metadata format (torch 2.11 on the GPU
machine of 2026-11-25: then torch's own check is skipped, with a note).

Exits 77 (meson: skipped) when the CUDA runtime finds no device, so CI without a GPU stays
green.  Environment: SAVE_DEVICE_CUDA (the driver), CKPT_BIN (ckpt)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> int:
    driver = os.environ.get("SAVE_DEVICE_CUDA", "")
    if not driver:
        print("SKIP: SAVE_DEVICE_CUDA not set")
        return 77
    r = subprocess.run([driver, "probe"], capture_output=True, text=True, timeout=120)
    if r.returncode != 0 or int(r.stdout.strip() or 0) == 0:
        print("SKIP: no CUDA device", r.stderr.strip())
        return 77
    import save_device_check as sdc
    ckpt_bin = os.environ.get("CKPT_BIN", "")
    if not ckpt_bin:
        print("FAIL: CKPT_BIN not set")
        return 1
    failures = runs = 0
    torch_reads = None
    for staging in ((), ("--staging", "512"), ("--staging", "1000")):
        for mode in ("single", "mpi"):
            runs += 1
            with tempfile.TemporaryDirectory() as tmp:
                t = Path(tmp)
                try:
                    if mode == "single":
                        assert sdc.run_single(driver, t / "dev", *staging) == sdc.stored_bytes()
                        assert sdc.run_single(driver, t / "host", "--host", *staging) == 0
                    else:
                        st = sdc.run_mpi(driver, 2, t, "dev", *staging)
                        assert all(s["device"] == s["stored"] for s in st.values()), st
                        assert sum(s["stored"] for s in st.values()) == sdc.stored_bytes()
                        sdc.run_mpi(driver, 2, t, "host", "--host", *staging)
                    if torch_reads is None:
                        torch_reads = sdc.torch_reads_format(t / "host")
                    for d in (t / "dev", t / "host"):
                        sdc.cat_and_check(ckpt_bin, d)
                        if torch_reads:
                            sdc.load_and_check(d)
                except AssertionError as e:
                    failures += 1
                    print(f"FAIL {mode} staging={staging}: {str(e)[:400]}")
    print(f"{runs - failures} of {runs} device saves equal the host path and the driver's "
          f"values (ckpt cat{', torch dcp.load' if torch_reads else ''})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
