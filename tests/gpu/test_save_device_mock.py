"""test_save_device_mock.py — the saver's CUDA device sources (src/save/device.c) on the
stand-in CUDA runtime (mock_cudart.c: device memory the host cannot touch, so reading a
piece on the host crashes; device-to-host copies only into pinned memory and deferred until a
synchronization, so a pinned half read before its copy completed holds stale bytes; with
CKPT_MOCK_CUDA_RUNAHEAD=1 a synchronization runs every queued copy, so a half refilled
before the host was done with it shows).  save_device_driver puts its pieces in mock device
memory and saves them with the per-rank API (one process) and with the collective saver
(mpirun -np 2, deferred adds read at the commit); real torch `dcp.load` must read exactly the
values the same driver saves from host memory, for the default, a tiny (many blocks) and an
odd staging size, and the counters must show every stored tensor byte came from the device.

Environment: SAVE_DEVICE_MOCK (the driver built with mock_cudart.c); CKPT_BIN (ckpt, when
built): `ckpt cat` reads the device saves back bit for bit too."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parent))
import save_device_check as sdc  # noqa: E402

DRIVER = os.environ.get("SAVE_DEVICE_MOCK", "")
CKPT_BIN = os.environ.get("CKPT_BIN", "")
pytestmark = pytest.mark.skipif(not DRIVER, reason="SAVE_DEVICE_MOCK not set")

STAGING = [(), ("--staging", "512"), ("--staging", "1000")]


@pytest.mark.parametrize("staging", STAGING, ids=["default", "tiny", "odd"])
@pytest.mark.parametrize("runahead", [0, 1])
def test_single_process_device_equals_torch(tmp_path, staging, runahead):
    env = sdc.env_with(CKPT_MOCK_CUDA_RUNAHEAD=runahead)
    dev = sdc.run_single(DRIVER, tmp_path / "dev", *staging, env=env)
    assert dev == sdc.stored_bytes()
    sdc.load_and_check(tmp_path / "dev")
    host = sdc.run_single(DRIVER, tmp_path / "host", "--host", *staging, env=env)
    assert host == 0
    sdc.load_and_check(tmp_path / "host")
    if CKPT_BIN:  # the check the real-GPU test also makes where torch cannot read the format
        sdc.cat_and_check(CKPT_BIN, tmp_path / "dev")


def test_single_process_autodetect(tmp_path):
    """memory = AUTO: the saver asks the runtime (cudaPointerGetAttributes) and takes the
    device path for device pointers, the host path for host ones."""
    assert sdc.run_single(DRIVER, tmp_path / "dev", "--auto") == sdc.stored_bytes()
    sdc.load_and_check(tmp_path / "dev")


@pytest.mark.parametrize("staging", STAGING[:2], ids=["default", "tiny"])
@pytest.mark.parametrize("runahead", [0, 1])
def test_collective_device_equals_torch(tmp_path, staging, runahead):
    env = sdc.env_with(CKPT_MOCK_CUDA_RUNAHEAD=runahead)
    stats = sdc.run_mpi(DRIVER, 2, tmp_path, "dev", *staging, env=env,
                        env_names=("CKPT_MOCK_CUDA_RUNAHEAD",))
    assert all(s["device"] == s["stored"] for s in stats.values()), stats
    assert sum(s["stored"] for s in stats.values()) == sdc.stored_bytes(), stats
    sdc.load_and_check(tmp_path / "dev")
    stats = sdc.run_mpi(DRIVER, 2, tmp_path, "host", "--host", *staging, env=env,
                        env_names=("CKPT_MOCK_CUDA_RUNAHEAD",))
    assert all(s["device"] == 0 for s in stats.values()), stats
    sdc.load_and_check(tmp_path / "host")
