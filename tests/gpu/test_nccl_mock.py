"""test_nccl_mock.py — the collective loader's NCCL transport on stand-ins: `ckpt load --device
cuda --transport nccl` under real `mpirun`, built against the stand-in CUDA runtime
(mock_cudart.c: device memory the host cannot touch, deferred asynchronous copies) and the
stand-in NCCL (mock_nccl.c: sends and receives only at ncclGroupEnd, carried out when the
stream is synchronized, device buffers only, matching byte counts, an id from rank 0).
Every rank's shards, copied back from "device" memory, equal the torch.chunk slice of
torch's own reading of each fixture (M = 1..4, dim0 and dim1); the counters say the shared
bytes went over NCCL, and the stand-in's own tally of what it carried agrees with them;
errors in NCCL set-up or in a group fail every rank with the same message, no hang.

Environment: CKPT_BIN (ckpt-load-mockcuda built with the stand-in NCCL),
CKPT_FIXTURES / CKPT_FIXTURES_DEFAULT."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
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
TALLY = re.compile(r"mock_nccl rank (\d+)/(\d+): sent (\d+) B, received (\d+) B in (\d+) groups")


@pytest.fixture(autouse=True)
def _tally(monkeypatch):
    # the stand-in prints what it carried when the communicator is destroyed (mpirun passes
    # the environment on to local ranks)
    monkeypatch.setenv("CKPT_MOCK_NCCL_LOG", "1")


def nccl_check(fx, m, dim, out, direct="4K", extra=(), leak=False):
    stats, data = tl.check(fx, m, dim, out, direct=direct,
                           extra=("--device", "cuda", "--transport", "nccl", *extra), leak=leak)
    per = stats["per_rank"]
    assert all(p["transport"] == "nccl" for p in per), stats
    # every shared byte went over NCCL, none over MPI
    assert [p["sent_nccl"] for p in per] == [p["sent"] for p in per], stats
    assert [p["received_nccl"] for p in per] == [p["received"] for p in per], stats
    assert sum(p["sent"] for p in per) == sum(p["received"] for p in per)
    assert [p["device"] for p in per] == [p["requested"] for p in per], stats
    assert sum(p["read_plan"] for p in per) == stats["union_bytes"]
    return stats


def run(m, *args, env=None, timeout=120):
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca",
           "btl_vader_single_copy_mechanism", "none", "-np", str(m), tl.BIN, "load",
           *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **(env or {})))


@pytest.mark.parametrize("name", NAMES)
def test_nccl_layouts_equal_torch(name, tmp_path):
    fx = FIXTURES / name
    combos = [(m, dim) for m in (1, 2, 3, 4) for dim in (0, 1)]
    # a short sweep: 2 per fixture, in turn, and the leak-checked one on each
    for m, dim in sweep.pick(combos, NAMES.index(name), 2, keep=[(3, 0)]):
        # odd M: everything through the exchange; even: single-owner runs read in place
        direct = "never" if m % 2 else "1"
        out = tmp_path / f"m{m}d{dim}"
        nccl_check(fx, m, dim, out, direct=direct, leak=(m, dim) == (3, 0))
        shutil.rmtree(out)


def test_nccl_tally_matches_counters(tmp_path):
    """The stand-in's own count of bytes it carried equals the loader's NCCL counters, rank by
    rank, and is not zero: NCCL, not MPI, moved the shared bytes."""
    fx = FIXTURES / "fsdp2_ws4"
    r = run(3, fx / "ckpt", "--layout", "dim1", "--device", "cuda", "--transport", "nccl",
            "--direct-min", "never", "--json")
    assert r.returncode == 0, r.stderr
    import json
    per = json.loads(r.stdout.strip().splitlines()[-1])["per_rank"]
    tally = {int(g[0]): (int(g[2]), int(g[3])) for g in TALLY.findall(r.stderr)}
    assert sorted(tally) == [0, 1, 2], r.stderr
    for k, p in enumerate(per):
        assert tally[k] == (p["sent_nccl"], p["received_nccl"]), (k, tally, p)
    assert sum(p["sent_nccl"] for p in per) > 0


@pytest.mark.parametrize("name", ["fsdp2_ws4", "fsdp2_ws3", "dtypes"])
def test_nccl_tiny_staging_many_rounds(name, tmp_path):
    """A 2 KiB budget: 256-byte windows, many rounds, each a group; the host window is reread
    every round, so a round that does not wait for its stream delivers wrong bytes."""
    fx = FIXTURES / name
    for m, dim in ((2, 0), (3, 1), (4, 0)):
        out = tmp_path / f"m{m}d{dim}"
        stats = nccl_check(fx, m, dim, out, direct="never",
                           extra=("--budget", "2K", "--io-piece", "100", "--io-threads", "3"))
        assert stats["per_rank"][0]["rounds"] > 1, stats
        shutil.rmtree(out)


def test_transport_choice(tmp_path):
    fx = FIXTURES / "fsdp2_ws3"
    # auto: NCCL when every rank loads into device memory (this build has the stand-in)
    auto = nccl_check(fx, 2, 0, tmp_path / "auto", direct="never", extra=("--transport", "auto"))
    assert sum(p["sent_nccl"] for p in auto["per_rank"]) > 0
    # mpi: the same bytes over MPI, no communicator made
    r = run(2, fx / "ckpt", "--layout", "dim0", "--device", "cuda", "--transport", "mpi",
            "--direct-min", "never", "--json")
    assert r.returncode == 0, r.stderr
    import json
    per = json.loads(r.stdout.strip().splitlines()[-1])["per_rank"]
    assert all(p["transport"] == "mpi" and p["sent_nccl"] == 0 for p in per), per
    assert sum(p["sent"] for p in per) == sum(p["sent"] for p in auto["per_rank"])
    assert not TALLY.search(r.stderr)
    # host destinations: auto takes MPI, nccl is refused on every rank
    r = run(2, fx / "ckpt", "--json")
    assert r.returncode == 0 and '"transport": "mpi"' in r.stdout, r.stderr
    r = run(2, fx / "ckpt", "--transport", "nccl")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "every destination must be device memory" in r.stderr, r.stderr
    r = run(1, fx / "ckpt", "--transport", "tcp")
    assert r.returncode == 2 and "--transport wants" in r.stderr, r.stderr


@pytest.mark.parametrize("fault", ["init:1", "group:1", "group:0"])
def test_nccl_faults_fail_everywhere(fault, tmp_path):
    """NCCL failing on one rank — making the communicator, or a group (the others' groups are
    queued: the communicator is aborted everywhere) — fails every rank with that rank's
    message, without a hang."""
    fx = FIXTURES / "fsdp2_ws4"
    r = run(3, fx / "ckpt", "--device", "cuda", "--transport", "nccl", "--direct-min", "never",
            env={"CKPT_MOCK_NCCL_FAIL": fault}, timeout=90)
    assert r.returncode == 1, r.stdout + r.stderr
    what = "communicator" if fault.startswith("init") else "group"
    assert f"rank {fault[-1]}: NCCL {what}" in r.stderr, r.stderr


def test_auto_falls_back_to_mpi_when_nccl_cannot_start(tmp_path):
    fx = FIXTURES / "fsdp2_ws4"
    r = run(3, fx / "ckpt", "--device", "cuda", "--direct-min", "never", "--json",
            env={"CKPT_MOCK_NCCL_FAIL": "init:2"})
    assert r.returncode == 0, r.stderr
    assert '"transport": "mpi"' in r.stdout and '"transport": "nccl"' not in r.stdout


def test_missing_shard_fails_everywhere_over_nccl(tmp_path):
    ck = tmp_path / "ck"
    shutil.copytree(FIXTURES / "fsdp2_ws4" / "ckpt", ck)
    victim = sorted(ck.glob("*.distcp"))[1]
    victim.unlink()
    r = run(3, ck, "--device", "cuda", "--transport", "nccl", "--direct-min", "never",
            timeout=60)
    assert r.returncode == 1, r.stdout + r.stderr
    assert victim.name in r.stderr and "rank" in r.stderr, r.stderr


@pytest.mark.parametrize("dim", [0, 1])
def test_realistic_model_every_world_size(dim, tmp_path):
    """Issue #26 over NCCL: the demo model's small tensors, each in its own device allocation
    packed back to back, placed device to device at M = 1..8 (saved by 4): no copy spans two
    allocations, and every rank's shard equals torch's."""
    if not rl.DEMO:
        pytest.skip("needs DEMO_GPT_SAVE (tools/demo/demo_gpt_save)")
    ckpt = rl.save_demo(tmp_path / "run", 4)
    ref = rl.torch_reference(ckpt, tmp_path)
    for m in sweep.pick(range(1, 9), dim, 2, keep=[4, 8]):  # short: 4 and 8, 2 more in turn
        stats = rl.load_and_compare(ckpt, ref, m, dim, "nccl", tmp_path / f"m{m}")
        per = stats["per_rank"]
        assert [p["sent_nccl"] for p in per] == [p["sent"] for p in per], stats
        shutil.rmtree(tmp_path / f"m{m}")
