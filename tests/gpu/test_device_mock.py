"""test_device_mock.py — the collective loader's CUDA device path on a stand-in CUDA runtime
(mock_cudart.c: device memory the host cannot touch, asynchronous copies deferred until a
sync, so a pinned staging half reused too early, a copy from pageable memory or a missing
final sync shows).  `ckpt load --device cuda` under real `mpirun`: every rank's shards, copied
back from "device" memory, equal the torch.chunk slice of torch's own reading of each
fixture, for dim0/dim1, in-place and exchanged bytes, decoded (zstd) and byte-swapped
chunks, many rounds and many staging flips; the counters show every requested byte went
through the pinned staging and each stored byte was read once; no device fails every rank.

Environment: CKPT_BIN (ckpt-load-mockcuda), CKPT_FIXTURES / CKPT_FIXTURES_DEFAULT."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mpi"))
import test_load as tl  # noqa: E402  (helpers: mpirun, tensors, shard, check)

sys.path.insert(0, str(Path(__file__).resolve().parent))
import realistic as rl  # noqa: E402  (the demo model, saved and read by torch)
import sweep  # noqa: E402  (tests/lib, on the path through test_load)

FIXTURES = tl.FIXTURES
NAMES = tl.NAMES


def device_check(fx, m, dim, out, direct="4K", extra=(), leak=True):
    # --transport mpi: exchanged bytes through host memory and the pinned sink (auto would
    # take the NCCL transport where this executable has the stand-in NCCL: test_nccl_mock.py)
    stats, data = tl.check(fx, m, dim, out, direct=direct,
                           extra=("--device", "cuda", "--transport", "mpi", *extra), leak=leak)
    per = stats["per_rank"]
    assert [p["device"] for p in per] == [p["requested"] for p in per], stats
    assert all(p["transport"] == "mpi" for p in per), stats
    return stats, data


@pytest.mark.parametrize("name", NAMES)
def test_device_layouts_equal_torch(name, tmp_path):
    fx = FIXTURES / name
    combos = [(1, 0, "1"), (2, 1, "1"), (3, 0, "never"), (3, 1, "1")]
    # a short sweep: one per fixture, in turn, and the leak-checked one on each
    for m, dim, direct in sweep.pick(combos, NAMES.index(name), 1, keep=[(3, 0, "never")]):
        out = tmp_path / f"m{m}d{dim}"
        stats, _ = device_check(fx, m, dim, out, direct=direct, leak=m == 3 and dim == 0)
        assert sum(p["read_plan"] for p in stats["per_rank"]) == stats["union_bytes"]
        shutil.rmtree(out)


@pytest.mark.parametrize("name", ["fsdp2_ws4", "zstd", "dtypes"])
def test_device_mesh_layouts_equal_dtensor(name, tmp_path):
    """DTensor layouts (tests/mpi/test_load_mesh.py) into device memory: a rank's boxes, one
    request each, fill one device buffer in torch's order (strided shards of several boxes,
    on dim 0 and dim 1); every requested byte goes through the pinned staging."""
    pytest.importorskip("torch")
    import test_load_mesh as tm  # noqa: E402  (needs torch)
    fx = FIXTURES / name
    if not fx.is_dir():
        pytest.skip(f"no fixture {name}")
    for i, spec in enumerate(("2x2:S0s2,S0", "2x2:S1s2,R", "2:S0s2", "3x2:S1,R")):
        stats = tm.check(fx, spec, tmp_path / f"s{i}",
                         extra=("--device", "cuda", "--transport", "mpi",
                                "--direct-min", "never" if i % 2 else "1"))
        per = stats["per_rank"]
        assert [p["device"] for p in per] == [p["requested"] for p in per], stats


@pytest.mark.parametrize("name", ["fsdp2_ws4", "zstd", "dtypes"])
def test_device_tiny_staging(name, tmp_path):
    """A 2 KiB budget: many rounds and 256-byte pinned halves (the minimum), so the sink
    flips between halves many times and decoded regions go in many slabs."""
    fx = FIXTURES / name
    if not fx.is_dir():
        pytest.skip(f"no fixture {name}")
    for direct in ("never", "1"):
        out = tmp_path / direct
        stats, _ = device_check(fx, 2, 0, out, direct=direct,
                                extra=("--budget", "2K", "--io-piece", "100", "--io-threads", "3"))
        shutil.rmtree(out)


def tallies(fx, m, dim, out, env, direct="4K"):
    """The stand-in runtime's counts (mock_cudart.c, CKPT_MOCK_CUDA_TALLY) of every process
    of a device load, with the extra environment `env`."""
    tally = out.parent / f"{out.name}.tally"
    env = {"CKPT_MOCK_CUDA_TALLY": str(tally), **env}
    os.environ.update(env)
    try:
        device_check(fx, m, dim, out, direct=direct, leak=False)
    finally:
        for k in env:
            del os.environ[k]
    return [{k: int(v) for k, v in (line.split() for line in f.read_text().splitlines())}
            for f in out.parent.glob(f"{tally.name}.*")]


def test_device_copies_merge_consecutive_rows(tmp_path):
    """dim1 shards of row-sharded tensors (saved by 2 ranks): each row is its own run of the
    shard files, but consecutive rows are adjacent in both the pinned staging and the
    destination, so the sink merges them: at most one host-to-device copy per tensor and
    saved file (one per row before: 272 per rank here, against 216 rows and 80 tensors)."""
    fx = FIXTURES / "fsdp2_ws2"
    ref = tl.tensors(fx)[0]
    rows = sum(shape[0] for _, shape, _ in ref.values() if len(shape) >= 2)
    h2d = [t["h2d"] for t in tallies(fx, 2, 1, tmp_path / "o", {}, direct="1") if t["h2d"]]
    assert len(h2d) == 2 and rows > 100, (h2d, rows)
    assert all(n <= 2 * len(ref) and n < rows for n in h2d), (h2d, rows, len(ref))


@pytest.mark.parametrize("register", [True, False], ids=["registered", "hostalloc"])
def test_device_pinned_staging(register, tmp_path):
    """The pinned staging is huge-page memory registered with cudaHostRegister (one range per
    rank for both halves, and the NCCL window where that transport runs); where registering
    fails (CKPT_MOCK_CUDA_NO_REGISTER) cudaHostAlloc takes over and the shards are the same."""
    env = {} if register else {"CKPT_MOCK_CUDA_NO_REGISTER": "1"}
    regs = [t["registered"] for t in tallies(FIXTURES / "fsdp2_ws4", 2, 1, tmp_path / "o", env)]
    ranks = [n for n in regs if n]
    assert (len(ranks) == 2 and all(n == 1 for n in ranks)) if register else not ranks, regs


def test_device_independent_mode(tmp_path):
    stats, _ = tl.check(FIXTURES / "fsdp2_ws4", 3, 1, tmp_path, mode="independent",
                        extra=("--device", "cuda", "--transport", "mpi", "--budget", "2K"))
    per = stats["per_rank"]
    assert [p["device"] for p in per] == [p["requested"] for p in per]


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The README demo's model + AdamW state saved by 4 ranks, and torch's reading of it."""
    if not rl.DEMO:
        pytest.skip("needs DEMO_GPT_SAVE (tools/demo/demo_gpt_save)")
    tmp = tmp_path_factory.mktemp("demo")
    ckpt = rl.save_demo(tmp / "run", 4)
    return ckpt, rl.torch_reference(ckpt, tmp)


@pytest.mark.parametrize("dim", [0, 1])
def test_realistic_model_every_world_size(demo, dim, tmp_path):
    """Issue #26: a real model's many small tensors, each in its own device allocation packed
    back to back, loaded at M = 1..8 (4 = the saved N): no copy spans two allocations (the
    stand-in refuses one, as CUDA did on an H200 at M = 4 and 8), and every rank's shard
    equals torch's."""
    ckpt, ref = demo
    for m in sweep.pick(range(1, 9), dim, 2, keep=[4, 8]):  # short: 4 and 8, 2 more in turn
        rl.load_and_compare(ckpt, ref, m, dim, "mpi", tmp_path / f"m{m}")
        shutil.rmtree(tmp_path / f"m{m}")


def test_torch_fsdp2_every_world_size(tmp_path):
    """The torch-written FSDP2 fixture (saved by 4 ranks) at M = 1..8, dim0 and dim1, into
    device buffers packed back to back: every rank's shard equals torch's reading."""
    fx = FIXTURES / "fsdp2_ws4"
    combos = [(m, dim) for m in range(1, 9) for dim in (0, 1)]
    for m, dim in sweep.pick(combos, 0, 4, keep=[(4, 0), (8, 1)]):  # short: 6 of the 16
        out = tmp_path / f"m{m}d{dim}"
        device_check(fx, m, dim, out, direct="1" if m % 2 else "never", leak=False)
        shutil.rmtree(out)


def test_realistic_model_independent_mode(demo, tmp_path):
    ckpt, ref = demo
    for m in (4, 8):
        rl.load_and_compare(ckpt, ref, m, 0, "mpi", tmp_path / f"m{m}", mode="independent")


def test_no_device_fails_everywhere(tmp_path):
    env = dict(os.environ, CKPT_MOCK_CUDA_DEVICES="0")
    import subprocess
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-x", "CKPT_MOCK_CUDA_DEVICES",
           "-np", "2", tl.BIN, "load", str(FIXTURES / "fsdp2_ws2" / "ckpt"), "--device", "cuda"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "no usable CUDA device" in r.stderr


@pytest.mark.parametrize("extra", [("--layout", "dim1", "--direct-min", "1"),
                                   ("--layout", "dim1", "--direct-min", "never"),
                                   ("--layout", "dim1", "--mode", "independent")],
                         ids=["in-place", "exchanged", "independent"])
def test_device_counters_equal_strace(extra, tmp_path):
    """The device paths count what their preads returned: in-place runs read into the pinned
    staging, exchanged bytes, the independent mode's slabs — each rank's read, preads and
    read_metadata equal strace's count of its read syscalls (tests/mpi/test_load_counters.py)."""
    import test_load_counters as tc  # noqa: E402  (skips without strace)
    stats, tallies = tc.traced_load(FIXTURES / "fsdp2_ws4" / "ckpt", 2, tmp_path, "--device",
                                    "cuda", "--transport", "mpi", *extra)
    tc.check_exact(stats, tallies)
    assert all(p["device"] == p["requested"] > 0 for p in stats["per_rank"]), stats
