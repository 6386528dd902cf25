"""test_device_hooks_mock.py — the collective loader's device-to-device exchange through a
caller transport's device hooks (ckpt_transport.device), on the stand-in CUDA runtime
(mock_cudart.c: device memory the host cannot touch, asynchronous copies deferred until a
sync).  tests/transport/load_threads.c built with LOAD_THREADS_CUDA runs the ranks as threads
of one process; with --hooks its transport's device all-to-all copies device to device
(cudaMemcpyAsync on the loader's stream) from the peers' send buffers, with --device every
rank's shards go into stand-in device buffers, copied back to be compared.

* Fixtures under DTensor layouts and dim0/dim1 at 2–4 ranks: every rank's shard equals
  torch's DTensor local shard (tests/lib/dtensor_ref.py) and the host path's bytes; the
  exchange went over the hooks (transport DEVICE, device all-to-alls made, every byte placed
  in device memory); tiny budgets (many rounds), in-place runs and the exchange.
* A planted bug — the hooks' received blocks each starting with their second byte — fails
  the comparison (the test can fail).
* A device all-to-all or sync failing on one rank (alone, on every rank, or taking the
  transport down) fails every rank with that rank's message, in well under the barrier's
  timeout (no hang).
* The choice of transport: auto takes the hooks when every rank has device destinations
  only, the host transport otherwise; DEVICE without hooks or with host destinations is
  refused on every rank.

Environment: CKPT_LOAD_THREADS (load-threads-mockcuda), CKPT_FIXTURES / CKPT_FIXTURES_DEFAULT."""

from __future__ import annotations

import filecmp
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "transport"))
import test_transport as tt  # noqa: E402  (run, check_load, same_everywhere; skips without BIN)
import sweep  # noqa: E402  (tests/lib, on the path through test_transport)

FIXTURES = tt.FIXTURES
NAMES = tt.NAMES
NEVER = str(2**64 - 1)
HOST, NCCL, DEVICE = 1, 2, 3  # ckpt_load_transport
E_INVAL, E_UNSUPPORTED = 8, 4
# (mesh spec, direct-min): DTensor layouts, dim0 and dim1, 2-4 ranks
SPECS = [("2x2:S0,S1", NEVER), ("2:S1", "1"), ("3:S0", NEVER), ("4:S1", NEVER),
         ("2x2:S0s2,S0", "1"), ("3x1:S1,R", NEVER)]


def hooks_run(name, spec, out, *extra):
    """A device load over the hooks that succeeded on every rank, and its stats."""
    rc, ranks, stats, _ = tt.run(FIXTURES / name / "ckpt", spec, out, "--device", "--hooks",
                                 *extra)
    assert rc == 0 and all(s == 0 for s, _ in ranks), ranks
    return stats


def compare(name, spec, out, what=()):
    """Every rank's dump equals torch's DTensor local shard (test_transport.check_load)."""
    ref, _ = tt.tensors(FIXTURES / name)
    return tt.check_dumps(out, ref, len(list(out.glob("rank*"))), tt.expected(spec),
                          (name, spec, *what))


def hooks_load(name, spec, out, *extra):
    """A device load over the hooks, bit-exact against torch, each needed byte read once;
    returns the stats."""
    stats = hooks_run(name, spec, out, *extra)
    compare(name, spec, out, extra)
    assert sum(s[0] for s in stats) == stats[0][1], stats
    assert all(s[8] == DEVICE for s in stats), stats  # the stats' transport
    # every requested byte placed in device memory (bytes_device: a rank's dumps)
    dumped = [sum(f.stat().st_size for f in (out / f"rank{k}").rglob("*") if f.is_file())
              for k in range(len(stats))]
    assert [s[9] for s in stats] == dumped, (stats, dumped)
    if any(s[7] for s in stats):  # bytes sent: they went through device all-to-alls
        assert all(s[10] > 0 for s in stats), stats
    return stats


@pytest.mark.parametrize("name", NAMES)
def test_hooks_every_fixture_bit_exact(name, tmp_path):
    for i, (spec, direct) in enumerate(sweep.pick(SPECS, NAMES.index(name), 2,
                                                  keep=[SPECS[0]])):
        hooks_load(name, spec, tmp_path / f"s{i}", "--direct-min", direct)
        shutil.rmtree(tmp_path / f"s{i}")


@pytest.mark.parametrize("spec", ["2x2:S0,S1", "3:S1"])
@pytest.mark.parametrize("name", ["fsdp2_ws4", "fsdp2_ws3", "dtypes"])
def test_hooks_equal_the_host_path(name, spec, tmp_path):
    """The same shards, byte for byte, as the host transport into host buffers; a 2 KiB
    budget: many rounds, each one device all-to-all and one sync (the host window is reread
    every round, the send buffer repacked: a round that does not wait shows)."""
    fx = FIXTURES / name / "ckpt"
    args = ("--direct-min", NEVER, "--budget", "2048")
    rc, ranks, host, _ = tt.run(fx, spec, tmp_path / "host", *args)
    assert rc == 0, ranks
    stats = hooks_load(name, spec, tmp_path / "dev", *args)
    assert all(s[10] > 3 for s in stats), stats  # many rounds
    assert all(s[8] == HOST and s[10] == 0 for s in host), host
    cmp = filecmp.dircmp(tmp_path / "host", tmp_path / "dev")
    diff = []
    stack = [cmp]
    while stack:
        c = stack.pop()
        diff += c.diff_files + c.left_only + c.right_only
        stack += c.subdirs.values()
    assert not diff, diff
    # (dircmp compares by stat signature first: compare the bytes)
    for f in (tmp_path / "host").rglob("*"):
        if f.is_file():
            assert f.read_bytes() == (tmp_path / "dev" / f.relative_to(tmp_path / "host")) \
                .read_bytes(), f


def test_corrupted_hooks_fail_the_comparison(tmp_path):
    """The planted bug: every block the hooks receive starts with its second byte.  The
    loads still succeed, and the comparison catches it."""
    for spec in ("2x2:S0,S1", "3:S1"):
        out = tmp_path / spec.replace(":", "_")
        stats = hooks_run("fsdp2_ws4", spec, out, "--corrupt-hooks", "--direct-min", NEVER)
        assert all(s[10] > 0 for s in stats), stats
        with pytest.raises(AssertionError):
            compare("fsdp2_ws4", spec, out)


@pytest.mark.parametrize("fault,want", [
    ("2:dalltoallv:3:lone", "rank 2: transport device all-to-all failed: injected fault: "
                            "rank 2's call 3 of dalltoallv failed here alone"),
    ("0:dalltoallv:1:lone", "rank 0: transport device all-to-all failed: injected fault"),
    ("1:dalltoallv:2:op", "rank 0: transport device all-to-all failed: injected fault: "
                          "rank 1's call 2 of dalltoallv failed"),
    ("3:dalltoallv:1:down", "transport agreement (minimum) failed: transport down: injected "
                            "fault: rank 3's call 1 of dalltoallv failed, the transport is down"),
    ("1:dsync:2:lone", "rank 1: transport device sync failed: injected fault: rank 1's call 2 "
                       "of dsync failed here alone"),
    ("3:dsync:1:op", "rank 0: transport device sync failed: injected fault: rank 3's call 1"),
    ("2:dsync:4:down", "transport down: injected fault: rank 2's call 4 of dsync failed"),
])
def test_a_failing_device_hook_fails_every_rank_alike(fault, want, tmp_path):
    rc, ranks, _, secs = tt.run(tt.FX, "2x2:S0,S1", tmp_path / "o", "--device", "--hooks",
                                "--fault", fault, "--budget", "4096", "--direct-min", NEVER,
                                "--timeout-ms", "10000")
    assert rc == 1
    msg = tt.same_everywhere(ranks)
    assert want in msg, msg
    assert not any("timed out" in m for _, m in ranks), ranks  # agreed, not timed out
    assert secs < 8, secs
    assert not (tmp_path / "o").exists()


def test_the_choice_of_transport(tmp_path):
    fx = tt.FX
    spec, args = "2x2:S0,S1", ("--direct-min", NEVER)
    # hooks, host destinations: auto takes the host transport, no device call
    rc, ranks, stats, _ = tt.run(fx, spec, tmp_path / "a", "--hooks", *args)
    assert rc == 0 and all(s[8] == HOST and s[10] == 0 for s in stats), (ranks, stats)
    # device destinations, no hooks (and no NCCL in this build): through host memory and the
    # pinned sink, the same bytes
    rc, ranks, stats, _ = tt.run(fx, spec, tmp_path / "b", "--device", *args)
    assert rc == 0 and all(s[8] == HOST and s[10] == 0 and s[9] > 0 for s in stats), stats
    # the hooks: the same bytes again
    rc, ranks, stats, _ = tt.run(fx, spec, tmp_path / "c", "--device", "--hooks", *args)
    assert rc == 0 and all(s[8] == DEVICE and s[10] > 0 for s in stats), stats
    for f in (tmp_path / "a").rglob("*"):
        if f.is_file():
            rel = f.relative_to(tmp_path / "a")
            assert f.read_bytes() == (tmp_path / "b" / rel).read_bytes() == \
                (tmp_path / "c" / rel).read_bytes(), rel
    # forced DEVICE: refused on every rank without hooks, or with host destinations
    rc, ranks, _, _ = tt.run(fx, spec, tmp_path / "d", "--device", "--transport", "device",
                             *args)
    assert "the transport has no device hooks" in tt.same_everywhere(ranks, E_UNSUPPORTED)
    rc, ranks, _, _ = tt.run(fx, spec, tmp_path / "e", "--hooks", "--transport", "device",
                             *args)
    assert "transport device: every destination must be device memory" in \
        tt.same_everywhere(ranks, E_UNSUPPORTED)
    # hooks naming another device than the current one: auto falls back to the host
    # transport (the same bytes), forced DEVICE fails on every rank
    rc, ranks, stats, _ = tt.run(fx, spec, tmp_path / "h", "--device", "--hooks",
                                 "--hooks-device", "1", *args)
    assert rc == 0 and all(s[8] == HOST and s[10] == 0 for s in stats), (ranks, stats)
    for f in (tmp_path / "a").rglob("*"):
        if f.is_file():
            rel = f.relative_to(tmp_path / "a")
            assert f.read_bytes() == (tmp_path / "h" / rel).read_bytes(), rel
    rc, ranks, _, _ = tt.run(fx, spec, tmp_path / "i", "--device", "--hooks", "--hooks-device",
                             "1", "--transport", "device", *args)
    assert "rank 0: transport device hooks: their device is 1, the current device is 0" in \
        tt.same_everywhere(ranks, E_INVAL)
    # forced DEVICE with hooks: as auto; the independent mode reads in place, no exchange
    rc, ranks, stats, _ = tt.run(fx, spec, tmp_path / "f", "--device", "--hooks",
                                 "--transport", "device", *args)
    assert rc == 0 and all(s[8] == DEVICE and s[10] > 0 for s in stats), stats
    rc, ranks, stats, _ = tt.run(fx, spec, tmp_path / "g", "--device", "--hooks", "--mode",
                                 "independent")
    assert rc == 0 and all(s[10] == 0 and s[9] > 0 for s in stats), stats
