"""test_transport.py — the collective loader over a caller-supplied transport that is not MPI
(ckpt_load_open_transport, include/ckpt_transport.h): tests/transport/load_threads runs the
ranks as threads of one process whose collectives meet in shared memory (linked against the
loader core, which does not link MPI).

* Every fixture under 2x2:S0,S1, 2x2:S0s2,S0, 2x3:R,S0, 3x2:S1,R, 2:S0s2 and 5:S0: each rank's
  buffer equals what torch's DTensor holds (tests/lib/dtensor_ref.py, as test_load_mesh.py),
  and the ranks' reads add up to the job's union of needed bytes (each byte read once); tiny
  budgets (many rounds), everything through the exchange or read in place, the independent
  mode, and bcast/minimum derived from allgatherv.
* A transport callback failing on one rank (alone, on every rank, or taking the transport
  down), at the open, the plan and the exchange, and a shard file damaged or missing for one
  rank only: every rank returns the same status and message, naming what failed; nothing
  hangs (the barrier's timeout and the subprocess timeout would turn a hang into a failure).

Environment: CKPT_LOAD_THREADS, CKPT_FIXTURES / CKPT_FIXTURES_DEFAULT."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

BIN = os.environ.get("CKPT_LOAD_THREADS")
FIXTURES = Path(os.environ.get("CKPT_FIXTURES") or os.environ.get("CKPT_FIXTURES_DEFAULT")
                or Path(__file__).resolve().parents[1] / "fixtures" / "data")
if not BIN:
    pytest.skip("needs CKPT_LOAD_THREADS", allow_module_level=True)
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from load_ref import ITEM, check_dumps, shard, tensors  # noqa: E402

NAMES = sorted(p.name for p in FIXTURES.iterdir() if (p / "reference.tsv").is_file())

SPECS = ["2x2:S0,S1", "2x2:S0s2,S0", "2x3:R,S0", "3x2:S1,R", "2:S0s2", "5:S0"]
E_TRANSPORT = 11  # CKPT_E_TRANSPORT


def run(fx: Path | str, spec: str, out: Path, *extra, timeout=120):
    """load_threads -> (exit code, [(status, message) per rank], [(read, union, calls)])."""
    t0 = time.monotonic()
    r = subprocess.run([BIN, str(fx), spec, str(out), *map(str, extra)], capture_output=True,
                       text=True, timeout=timeout)
    ranks, stats = [], []
    for line in r.stdout.splitlines():
        f = line.split("\t")
        if f[0] == "rank":
            assert int(f[1]) == len(ranks)
            ranks.append((int(f[2]), f[3]))
        elif f[0] == "stats":  # plan reads, union, calls, metadata read, received, read,
            stats.append(tuple(int(x) for x in f[2:]))  # chunks adopted, sent, transport,
            # device bytes, device all-to-alls
    assert r.returncode in (0, 1), r.stdout + r.stderr
    assert ranks and len(stats) == len(ranks), r.stdout + r.stderr
    return r.returncode, ranks, stats, time.monotonic() - t0


def expected(spec: str):
    """rank k's local shard: torch's DTensor splitting (numpy's torch.chunk for N:Sd without
    torch)."""
    try:
        import torch
        import dtensor_ref
    except ImportError:
        mesh, place = spec.split(":")
        if "x" in mesh or not place.startswith("S") or "s" in place[1:]:
            pytest.skip("needs torch for " + spec)
        return lambda raw, dt, shape, k: shard(raw, dt, shape, int(place[1:]), int(mesh), k)

    def want(raw, dtype, shape, k):
        full = torch.from_numpy(np.frombuffer(raw, dtype=np.uint8).copy()
                                .reshape(*shape, ITEM[dtype]))
        return dtensor_ref.expected_local(full, spec, k, ndim=len(shape)).numpy().tobytes()
    return want


def check_load(name: str, spec: str, out: Path, *extra):
    fx = FIXTURES / name
    rc, ranks, stats, _ = run(fx / "ckpt", spec, out, *extra)
    assert rc == 0 and all(s == 0 for s, _ in ranks), ranks
    ref, _ = tensors(fx)
    n = check_dumps(out, ref, len(ranks), expected(spec), (name, spec, *extra))
    if "independent" not in extra:  # each needed byte read once across the job (as planned:
        # the preads also fetch each touched chunk's zip headers, docs/loader.md "What read counts")
        assert sum(s[0] for s in stats) == stats[0][1], (name, spec, stats)
        assert len({s[1] for s in stats}) == 1, stats
    return n


@pytest.mark.parametrize("name", NAMES)
def test_every_fixture_and_layout_bit_exact(name, tmp_path):
    for i, spec in enumerate(SPECS):
        # alternate: everything through the exchange / single-owner runs read in place
        check_load(name, spec, tmp_path / f"s{i}", "--direct-min",
                   str(2**64 - 1) if i % 2 else "1")
        shutil.rmtree(tmp_path / f"s{i}")


@pytest.mark.parametrize("extra", [
    ("--budget", "2048"),                         # many rounds
    ("--derived",),                               # bcast and the minimum from allgatherv
    ("--derived", "--budget", "2048", "--direct-min", str(2**64 - 1)),
    ("--mode", "independent"),
])
@pytest.mark.parametrize("name", ["fsdp2_ws3", "hsdp", "zstd", "megatron_flat"])
def test_variants_bit_exact(name, extra, tmp_path):
    check_load(name, "2x3:R,S0", tmp_path / "o", *extra)


def test_many_rounds_use_the_all_to_all(tmp_path):
    """A tiny budget moves the bytes in many all-to-alls (the stats' call counts grow)."""
    fx = FIXTURES / "fsdp2_ws4" / "ckpt"
    _, _, few, _ = run(fx, "2x2:S0,S1", tmp_path / "a", "--direct-min", str(2**64 - 1))
    _, _, many, _ = run(fx, "2x2:S0,S1", tmp_path / "b", "--direct-min", str(2**64 - 1),
                        "--budget", "2048")
    assert many[0][2] > few[0][2] + 10, (few, many)


def same_everywhere(ranks, status=E_TRANSPORT):
    assert len({r for r in ranks}) == 1, ranks
    assert ranks[0][0] == status, ranks
    return ranks[0][1]


FX = FIXTURES / "fsdp2_ws4" / "ckpt"


@pytest.mark.parametrize("fault,want", [
    # one rank's call fails alone: agreed, that rank's message everywhere
    ("1:alltoallv:1:lone", "rank 1: transport all-to-all failed: injected fault: rank 1's call 1 "
                           "of alltoallv failed here alone"),
    ("3:alltoallv:3:lone", "rank 3: transport all-to-all failed: injected fault: rank 3's call 3"),
    ("2:allgatherv:1:lone", "rank 2: transport all-gather (CPU sets) failed: injected fault"),
    # the open: rank 0 reads the metadata and broadcasts it (size, then bytes)
    ("0:bcast:1:lone", "rank 0: transport broadcast (metadata size) failed: injected fault"),
    ("2:bcast:2:lone", "rank 2: transport broadcast (metadata) failed: injected fault: rank 2's "
                       "call 2 of bcast failed here alone"),
    # the execute: the chunks' headers resolved once (needs, then results), then the plan
    ("2:allgatherv:2:lone", "rank 2: transport all-gather (chunk need counts) failed"),
    ("0:allgatherv:3:lone", "rank 0: transport all-gather (chunk needs) failed"),
    ("3:allgatherv:5:lone", "rank 3: transport all-gather (chunk headers) failed"),
    ("2:allgatherv:6:lone", "rank 2: transport all-gather (piece counts) failed"),
    ("0:allgatherv:7:lone", "rank 0: transport all-gather (pieces) failed"),
    # the call fails on every rank: agreed, the lowest rank's message
    ("1:alltoallv:2:op", "rank 0: transport all-to-all failed: injected fault: rank 1's call 2 "
                         "of alltoallv failed"),
    ("3:allgatherv:7:op", "rank 0: transport all-gather (pieces) failed: injected fault: "
                          "rank 3's call 7"),
    ("1:bcast:2:op", "rank 0: transport broadcast (metadata) failed: injected fault: rank 1's "
                     "call 2 of bcast failed"),
    # the minimum (all-or-nothing) fails everywhere: not agreed, but the same failure
    ("3:min:7:op", "transport minimum (execute options) failed: injected fault: rank 3's call 7 "
                   "of min failed"),
    ("2:min:1:op", "transport agreement (minimum) failed: injected fault: rank 2's call 1"),
    # the transport goes down: every later call fails on every rank
    ("1:alltoallv:1:down", "transport agreement (minimum) failed: transport down: injected "
                           "fault: rank 1's call 1 of alltoallv failed, the transport is down"),
    ("0:min:6:down", "failed: transport down: injected fault: rank 0's call 6 of min"),
])
def test_a_failing_callback_fails_every_rank_alike(fault, want, tmp_path):
    rc, ranks, _, secs = run(FX, "2x2:S0,S1", tmp_path / "o", "--fault", fault, "--budget",
                             "4096", "--direct-min", str(2**64 - 1), "--timeout-ms", "10000")
    assert rc == 1
    msg = same_everywhere(ranks)
    assert want in msg, msg
    assert not any("timed out" in m for _, m in ranks), ranks  # agreed, not timed out
    assert not (tmp_path / "o").exists()


def test_the_fault_is_seen_where_it_happens(tmp_path):
    """Sanity of the injection: rank 2's 7th all-gather (the pieces) alone: rank 2 named."""
    rc, ranks, _, _ = run(FX, "2x3:R,S0", tmp_path / "o", "--fault", "2:allgatherv:7:lone")
    assert "rank 2: transport all-gather (pieces) failed" in same_everywhere(ranks)


def test_a_broken_contract_fails_by_timeout_not_a_hang(tmp_path):
    """With the minimum made from allgatherv, a lone allgatherv failure breaks T2 (the minimum
    must be all-or-nothing): the failing rank stops agreeing, the others' barrier times out;
    every rank still fails with CKPT_E_TRANSPORT, by that timeout."""
    rc, ranks, _, secs = run(FX, "2x3:R,S0", tmp_path / "o", "--derived", "--fault",
                             "1:allgatherv:3:lone", "--timeout-ms", "1500", timeout=60)
    assert rc == 1 and all(s == E_TRANSPORT for s, _ in ranks), ranks
    assert "injected fault: rank 1's call 3 of allgatherv" in ranks[1][1]
    assert all("timed out" in m for k, (_, m) in enumerate(ranks) if k != 1), ranks
    # (bounded: the barriers' timeout is the mechanism asserted; run's 60 s is a hang guard)


@pytest.mark.parametrize("derived", [(), ("--derived",)])
def test_a_shard_file_damaged_for_one_rank(derived, tmp_path):
    """Rank 2 sees the checkpoint with every shard file cut to 100 bytes: its plan fails,
    every rank returns its message (naming the file)."""
    bad = tmp_path / "bad"
    shutil.copytree(FX, bad)
    for f in bad.glob("*.distcp"):
        os.truncate(f, 100)
    for mode in ("collective", "independent"):
        rc, ranks, _, secs = run(FX, "2x2:S0,S1", tmp_path / f"o{mode}", "--dir-of",
                                 f"2:{bad}", "--mode", mode, *derived)
        assert rc == 1
        assert len(set(ranks)) == 1, ranks
        status, msg = ranks[0]
        assert status != 0 and msg.startswith("rank 2: ") and ".distcp" in msg, ranks
        assert "timed out" not in msg, ranks  # agreed, not timed out


@pytest.mark.parametrize("mode", ["collective", "independent"])
def test_a_shard_file_missing_for_one_rank(mode, tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(FX, bad)
    gone = sorted(bad.glob("*.distcp"))[-1]
    gone.unlink()
    rc, ranks, _, _ = run(FX, "2x2:S0,S1", tmp_path / "o", "--dir-of", f"1:{bad}", "--mode", mode)
    msg = same_everywhere(ranks, status=6)  # CKPT_E_NOTFOUND
    assert msg.startswith(f"rank 1: {gone}: cannot open"), msg


@pytest.mark.parametrize("mode", ["collective", "independent"])
def test_corrupt_compressed_chunks_for_one_rank(mode, tmp_path):
    """zstd chunks (decoded by the rank that needs them, after the exchange) zeroed in rank
    2's copy: its decode error, everywhere."""
    bad = tmp_path / "bad"
    shutil.copytree(FIXTURES / "zstd" / "ckpt", bad)
    for f in bad.glob("*.distcp"):
        f.write_bytes(bytes(f.stat().st_size))
    rc, ranks, _, _ = run(FIXTURES / "zstd" / "ckpt", "2x2:S0,S1", tmp_path / "o", "--dir-of",
                          f"2:{bad}", "--mode", mode)
    msg = same_everywhere(ranks, status=3)  # CKPT_E_FORMAT
    assert msg.startswith("rank 2: transform 'stream.zstd/1': zstd error"), msg


def test_a_checkpoint_missing_for_one_rank(tmp_path):
    rc, ranks, _, _ = run(FX, "2x2:S0,S1", tmp_path / "o", "--dir-of", f"1:{tmp_path}/none")
    msg = same_everywhere(ranks, status=ranks[0][0])
    assert ranks[0][0] != 0 and msg.startswith("rank 1: ") and "none" in msg, ranks


def test_different_files_for_one_rank(tmp_path):
    """Rank 3's copy lists another set of data files: the open's check fails on every rank."""
    other = tmp_path / "other"
    shutil.copytree(FIXTURES / "fsdp2_ws3" / "ckpt", other)
    rc, ranks, _, _ = run(FX, "2x2:S0,S1", tmp_path / "o", "--dir-of", f"3:{other}")
    msg = same_everywhere(ranks, status=8)  # CKPT_E_INVAL, agreed: rank 0's dir
    assert "ranks see different checkpoint metadata" in msg


def test_a_failing_broadcast_in_the_agreement(tmp_path):
    """Rank 1's checkpoint is missing, and the agreement's broadcast of its message fails on
    every rank: the agreement says so, the same on every rank."""
    rc, ranks, _, _ = run(FX, "2x2:S0,S1", tmp_path / "o", "--dir-of", f"1:{tmp_path}/none",
                          "--fault", "0:bcast:3:op")  # (1, 2: the metadata's)
    msg = same_everywhere(ranks)
    assert msg == ("rank 0: transport agreement (broadcast) failed, sending rank 1's error"), msg


def test_the_open_refuses_bad_transports_before_any_call():
    """Version, rank, size, a missing callback, device hooks missing one: refused on the calling
    rank with no callback made; destroy is called once, by the failed open or by the free.
    Complete device hooks are accepted (the open calls neither)."""
    r = subprocess.run([BIN, "--check-open", str(FX)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = [ln.split("\t") for ln in r.stdout.splitlines()]
    got = {f[1]: (int(f[2]), f[3], int(f[4]), f[5]) for f in lines if f[0] == "open"}
    # ckpt_load_get_stats(l, out, size): never past `size` bytes (an older caller's struct,
    # the fields before bytes_received_metadata), returns the library's sizeof
    abi = [tuple(map(int, f[1:])) for f in lines if f[0] == "stats-abi"]
    assert len(abi) == 1 and abi[0][0] == abi[0][1] == abi[0][2] and abi[0][3] == 0, abi
    assert got["ok"][:2] == (0, "0/1") and got["ok"][2] > 0, got["ok"]
    assert got["device-hooks"][:2] == (0, "0/1") and got["device-hooks"][2] > 0, got
    assert got["device-hooks"][2] == got["ok"][2], got  # (the same host calls, no device one)
    want = {"version": (4, "version 2, this loader knows version 1"),
            "rank": (8, "rank 1 of 1 ranks"), "size": (8, "rank 0 of 0 ranks"),
            "no-allgatherv": (8, "no allgatherv callback"),
            "no-alltoallv": (8, "no alltoallv callback"),
            "device": (8, "device hooks with no alltoallv callback"),
            "device-no-sync": (8, "device hooks with no sync callback")}
    for case, (status, text) in want.items():
        st, destroyed, calls, msg = got[case]
        assert (st, destroyed, calls) == (status, "1/1", 0) and text in msg, (case, got[case])
    st, destroyed, calls, msg = got["missing-dir"]  # agreed over the transport, then destroyed
    assert st == 6 and destroyed == "1/1" and calls > 0 and "rank 0: " in msg, got["missing-dir"]


# ---------------------------------------------------------------- read once: metadata, headers

def metadata_bytes(ckpt: Path):
    """The sizes of the metadata files the index reads: `.metadata`, else `__<r>.metadata`."""
    one = ckpt / ".metadata"
    files = [one] if one.is_file() else list(ckpt.glob("__*.metadata"))
    return sum(f.stat().st_size for f in files)


@pytest.mark.parametrize("name", ["fsdp2_ws4", "rank_local", "megatron_flat", "torch113", "zstd"])
@pytest.mark.parametrize("spec", ["2x2:S0,S1", "2x3:R,S0", "5:S0"])
def test_metadata_is_read_once_per_job(name, spec, tmp_path):
    """Rank 0 alone reads the DCP metadata (bytes_read_metadata, from the preads: one copy
    over the job), every other rank receives it whole (bytes_received_metadata) and builds the
    same index: the loads stay bit-exact (check_load)."""
    check_load(name, spec, tmp_path / "o")
    _, _, stats, _ = run(FIXTURES / name / "ckpt", spec, tmp_path / "p")
    size = metadata_bytes(FIXTURES / name / "ckpt")
    assert [s[3] for s in stats] == [size] + [0] * (len(stats) - 1), (stats, size)
    assert [s[4] for s in stats] == [0] + [stats[1][4]] * (len(stats) - 1), stats
    assert stats[1][4] >= size  # (the image: the files and their names and sizes)


@pytest.fixture(scope="module")
def other_formats(tmp_path_factory):
    """Checkpoints without DCP metadata -> {name: (path, {tree path: (dtype, shape, raw)})}
    (tests/lib/other_formats.py: HuggingFace safetensors storage, .bin shards and a torch.save
    file written by torch, torch-checkpointing)."""
    pytest.importorskip("torch")
    import other_formats as of
    return of.build(FIXTURES, tmp_path_factory.mktemp("formats"))


OTHER = ["hf_sharded", "hf_full", "bin", "torchsave", "tc_sharded", "tc_single"]


@pytest.mark.parametrize("name", OTHER)
def test_other_formats_metadata_is_read_once_per_job(other_formats, name, tmp_path):
    """No `.metadata`: rank 0 opens the checkpoint and keeps what its metadata preads returned
    (the index json and every safetensors header, each torch.save file's zip directory and
    data.pkl, torch-checkpointing's metadata.pkl); the others index it from those bytes and
    read no metadata file.  Rank 0 reads what one process opening it reads; every rank's
    buffers equal torch's tensors (M = 4, each rank the whole tensor and its Shard(0))."""
    ck, ref = other_formats[name]
    _, ranks, one, _ = run(ck, "1:R", tmp_path / "one")
    assert ranks == [(0, "")] and one[0][3] > 0, (ranks, one)
    for spec in ("4:R", "4:S0"):
        out = tmp_path / spec.replace(":", "")
        rc, ranks, stats, _ = run(ck, spec, out)
        assert rc == 0 and all(s == 0 for s, _ in ranks), ranks
        assert [s[3] for s in stats] == [one[0][3], 0, 0, 0], (name, stats, one)
        assert stats[0][4] == 0 and len({s[4] for s in stats[1:]}) == 1 and stats[1][4] > 0, stats
        check_dumps(out, ref, 4, expected(spec), (name, spec))


def blob_damage(path: Path, at: int, data: bytes):
    raw = bytearray(path.read_bytes())
    raw[at:at + len(data)] = data
    path.write_bytes(bytes(raw))


# a header damaged as rank 0 reads it -> the file its message names
DAMAGE = {
    # a safetensors header that is not JSON
    "hf_full": lambda d: (blob_damage(d / "model-00001-of-00002.safetensors", 8, b"\x01\x02{["),
                          d / "model-00001-of-00002.safetensors"),
    # the zip's end of central directory of a .bin shard
    "bin": lambda d: (blob_damage(d / "pytorch_model-00002-of-00002.bin",
                                  (d / "pytorch_model-00002-of-00002.bin").stat().st_size - 22,
                                  b"XXXX"), d / "pytorch_model-00002-of-00002.bin"),
    # torch-checkpointing's metadata.pkl cut short
    "tc_sharded": lambda d: ((d / "metadata.pkl").write_bytes(
        (d / "metadata.pkl").read_bytes()[:100]), d / "metadata.pkl"),
}


@pytest.mark.parametrize("where", ["everywhere", "rank 0 only"])
@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_a_corrupt_header_fails_every_rank_alike(other_formats, name, where, tmp_path):
    """A damaged header of a format without `.metadata`, as rank 0 reads it: the same status
    and message on every rank (rank 0's, naming the file), in bounded time."""
    ck, _ = other_formats[name]
    bad = tmp_path / "bad"
    shutil.copytree(ck, bad)
    _, named = DAMAGE[name](bad)
    if where == "everywhere":
        rc, ranks, _, secs = run(bad, "2x2:S0,S1", tmp_path / "o", "--timeout-ms", "10000")
    else:
        rc, ranks, _, secs = run(ck, "2x2:S0,S1", tmp_path / "o", "--dir-of", f"0:{bad}",
                                 "--timeout-ms", "10000")
    assert rc == 1
    msg = same_everywhere(ranks, status=ranks[0][0])
    assert ranks[0][0] not in (0, E_TRANSPORT), ranks
    assert msg.startswith("rank 0: ") and named.name in msg, msg
    assert not any("timed out" in m for _, m in ranks), ranks  # agreed, not timed out
    assert not (tmp_path / "o").exists()


def test_a_rank_with_other_headers_is_told(other_formats, tmp_path):
    """Rank 2's copy has a safetensors header of another length: it asks for bytes rank 0 did
    not read, and every rank fails with its message (not a load from mixed metadata)."""
    ck, _ = other_formats["hf_sharded"]
    other = tmp_path / "other"
    shutil.copytree(ck, other)
    f = sorted(other.glob("*.safetensors"))[1]
    raw = f.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    head = raw[8:8 + n].rstrip(b" ") + b" " * 16  # the same JSON, 16 bytes longer
    f.write_bytes((len(head)).to_bytes(8, "little") + head + raw[8 + n:])
    rc, ranks, _, _ = run(ck, "2x2:S0,S1", tmp_path / "o", "--dir-of", f"2:{other}")
    msg = same_everywhere(ranks, status=8)  # CKPT_E_INVAL
    assert msg.startswith("rank 2: ") and "different checkpoint metadata" in msg, msg


@pytest.mark.parametrize("fault,want", [
    ("0:bcast:1:lone", "rank 0: transport broadcast (metadata size) failed: injected fault"),
    ("3:bcast:2:lone", "rank 3: transport broadcast (metadata) failed: injected fault"),
    ("1:bcast:2:op", "rank 0: transport broadcast (metadata) failed: injected fault"),
])
@pytest.mark.parametrize("name", ["hf_full", "tc_sharded"])
def test_a_failing_metadata_broadcast_of_other_formats(other_formats, name, fault, want,
                                                       tmp_path):
    ck, _ = other_formats[name]
    rc, ranks, _, secs = run(ck, "2x2:S0,S1", tmp_path / "o", "--fault", fault,
                             "--timeout-ms", "10000")
    assert rc == 1
    msg = same_everywhere(ranks)
    assert want in msg, msg
    assert not any("timed out" in m for _, m in ranks), ranks  # agreed, not timed out


@pytest.mark.parametrize("name", ["fsdp2_ws4", "torch113", "megatron_flat", "hsdp"])
@pytest.mark.parametrize("spec", ["2x2:S0,S1", "2x3:R,S0", "5:S0"])
def test_each_chunk_header_is_read_once_per_job(name, spec, tmp_path):
    """The job's preads of shard files (bytes_read, from the syscalls' returns) add up to what
    one rank loading everything reads: the union once, and each chunk's zip records once
    (a chunk several ranks need is resolved by one of them, the others adopt it)."""
    fx = FIXTURES / name / "ckpt"
    _, _, one, _ = run(fx, "1:R", tmp_path / "one")
    _, ranks, many, _ = run(fx, spec, tmp_path / "many")
    assert all(s == 0 for s, _ in ranks), ranks
    assert sum(s[5] for s in many) == one[0][5], (one, many)
    assert sum(s[6] for s in many) > 0  # the others' results were adopted


@pytest.mark.parametrize("where", ["everywhere", "rank 0 only"])
@pytest.mark.parametrize("damage", ["truncated", "not a pickle", "garbage inside"])
def test_a_corrupt_metadata_fails_every_rank_alike(where, damage, tmp_path):
    """A bad `.metadata` as rank 0 reads it: the same status and message on every rank
    (rank 0's, naming the file), in bounded time; no other rank reads the file."""
    bad = tmp_path / "bad"
    shutil.copytree(FX, bad)
    meta = bad / ".metadata"
    raw = bytearray(meta.read_bytes())
    if damage == "truncated":
        raw = raw[: len(raw) // 2]
    elif damage == "not a pickle":
        raw[0:2] = b"PK"
    else:
        raw[len(raw) // 3: len(raw) // 3 + 64] = bytes(range(200, 256)) + bytes(8)
    meta.write_bytes(bytes(raw))
    if where == "everywhere":
        rc, ranks, _, secs = run(bad, "2x2:S0,S1", tmp_path / "o", "--timeout-ms", "10000")
    else:
        rc, ranks, _, secs = run(FX, "2x2:S0,S1", tmp_path / "o", "--dir-of", f"0:{bad}",
                                 "--timeout-ms", "10000")
    assert rc == 1
    msg = same_everywhere(ranks, status=ranks[0][0])
    assert ranks[0][0] not in (0, E_TRANSPORT), ranks
    assert msg.startswith(f"rank 0: {meta}: "), msg
    if damage == "not a pickle":
        assert "not a pickle of protocol 2-5" in msg, msg
    assert not any("timed out" in m for _, m in ranks), ranks  # agreed, not timed out
    assert not (tmp_path / "o").exists()


def test_an_unreadable_metadata_on_rank_0(tmp_path):
    """`.metadata` is a FIFO for rank 0 (never opened blocking): its error on every rank."""
    bad = tmp_path / "bad"
    shutil.copytree(FX, bad)
    (bad / ".metadata").unlink()
    os.mkfifo(bad / ".metadata")
    rc, ranks, _, secs = run(FX, "2x2:S0,S1", tmp_path / "o", "--dir-of", f"0:{bad}")
    msg = same_everywhere(ranks, status=ranks[0][0])
    assert ranks[0][0] != 0 and msg.startswith(f"rank 0: {bad}/.metadata: "), msg
    assert not any("timed out" in m for _, m in ranks), ranks  # (a blocking open: run's hang guard)


def test_a_rank_with_another_checkpoint_is_told(tmp_path):
    """Rank 2's copy has a `.metadata` of another size than rank 0 read (a stat, not a read):
    every rank fails with its message."""
    other = tmp_path / "other"
    shutil.copytree(FX, other)
    with open(other / ".metadata", "ab") as f:
        f.write(b"\0")
    rc, ranks, _, _ = run(FX, "2x2:S0,S1", tmp_path / "o", "--dir-of", f"2:{other}")
    msg = same_everywhere(ranks, status=8)  # CKPT_E_INVAL
    assert msg.startswith(f"rank 2: {other}/.metadata: ") and "different checkpoint" in msg, msg


# ---------------------------------------------------------------- replicated targets

def test_replicated_targets_are_read_by_a_rank_that_needs_them(tmp_path):
    """HSDP (R,S0: every byte needed by 2 ranks): each share of the union is read by a rank
    that needs most of it, which sends it once to the other replica, not a bystander sending
    two copies (fsdp2_ws4: 1.38x / 1.70x of the union sent before, 1.18x / 1.15x now; the
    rest is shares that straddle two tensors).  M:R: every rank sends its share to the M - 1
    others, (M - 1) x the union in all, the bound.  Loads bit-exact (check_load)."""
    fx = FIXTURES / "fsdp2_ws4"
    for spec in ("2x2:R,S0", "2x3:R,S0"):
        check_load("fsdp2_ws4", spec, tmp_path / spec, "--direct-min", "1")
        _, _, stats, _ = run(fx / "ckpt", spec, tmp_path / f"{spec}-2", "--direct-min", "1")
        sent, union = sum(s[7] for s in stats), stats[0][1]
        assert sent <= 1.25 * union, (spec, sent, union)
    _, _, stats, _ = run(fx / "ckpt", "4:R", tmp_path / "r", "--direct-min", "1")
    assert sum(s[7] for s in stats) == 3 * stats[0][1], stats
