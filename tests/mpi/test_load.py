"""test_load.py — the collective loader under real `mpirun` (M = 1..4 ranks, host buffers):
every rank's dumped shards equal the torch.chunk slice of torch's own reading of each fixture,
for dim0 and dim1 layouts and in both modes; the counters prove each needed stored byte is
read once (the ranks' reads add up to the union of needed ranges, which for plainly stored
checkpoints is every chunk's data size from torch's own description); ranks that get empty
shards still take part; a missing shard file gives every rank the same error, no hang.

Environment: CKPT_BIN (built with MPI), CKPT_FIXTURES / CKPT_FIXTURES_DEFAULT, CKPT_LOAD_OVERLAP
(tests/mpi/load_overlap, a driver of the C API whose ranks ask for the same bytes twice)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from load_ref import ITEM, check_dumps, shard, tensors  # noqa: E402,F401  (used by importers too)
import sweep  # noqa: E402

BIN = os.environ.get("CKPT_BIN")
FIXTURES = Path(os.environ.get("CKPT_FIXTURES") or os.environ.get("CKPT_FIXTURES_DEFAULT")
                or Path(__file__).resolve().parents[1] / "fixtures" / "data")
if not BIN or not shutil.which("mpirun"):
    pytest.skip("needs CKPT_BIN and mpirun", allow_module_level=True)

NAMES = sorted(p.name for p in FIXTURES.iterdir() if (p / "reference.tsv").is_file())
PLAIN = {"fsdp2_ws1", "fsdp2_ws2", "fsdp2_ws3", "fsdp2_ws4", "tp_shard1", "hsdp", "megatron_flat"}


# Sanitizer builds: leak checking through Open MPI needs whole stacks (slow: ~3x per run), so
# meson passes its ASAN_OPTIONS here and leak-checked runs (leak=True) use them
LEAK_ASAN = os.environ.get("CKPT_LEAK_ASAN_OPTIONS")


def mpirun(m, *args, timeout=120, leak=False, opts=()):
    """`mpirun [opts] -np m ckpt load args`."""
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca", "btl_vader_single_copy_mechanism",
           "none", *opts, "-np", str(m), BIN, "load", *map(str, args)]
    env = dict(os.environ, ASAN_OPTIONS=LEAK_ASAN) if leak and LEAK_ASAN else None
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def check(fixture: Path, m: int, dim: int, out: Path, mode="collective", direct="4K", extra=(),
          leak=True):
    r = mpirun(m, fixture / "ckpt", "--layout", f"dim{dim}", "--dump", out, "--json", "--mode",
               mode, "--direct-min", direct, *extra, leak=leak)
    assert r.returncode == 0, r.stdout + r.stderr
    stats = json.loads(r.stdout.strip().splitlines()[-1])
    ref, data = tensors(fixture)
    check_dumps(out, ref, m, lambda raw, dt, shape, k: shard(raw, dt, shape, dim, m, k),
                (fixture.name, f"dim{dim}"))
    return stats, data


@pytest.mark.parametrize("name", ["fsdp2_ws2", "fsdp2_ws3", "tp_shard1", "hsdp", "megatron_flat"])
def test_overlapping_requests_of_one_rank(name):
    """Every rank asks for each tensor whole, twice, then for the first half of its rows and
    for its own Shard(0) slice (load_overlap.c): its pieces overlap, which takes the plan's
    general sweep rather than the merge of ordered per-rank streams.  Every buffer equals the
    reader library's own read, and the job reads each needed stored byte once."""
    drv = os.environ.get("CKPT_LOAD_OVERLAP")
    if not drv:
        pytest.skip("needs CKPT_LOAD_OVERLAP")
    fx = FIXTURES / name
    ref, _ = tensors(fx)
    keys = [p for p, (dtype, shape, _) in ref.items() if shape and "%" not in p and dtype in ITEM]
    assert keys
    for m in (1, 2, 3):
        cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca",
               "btl_vader_single_copy_mechanism", "none", "-np", str(m), drv, str(fx / "ckpt"),
               *keys]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0 and r.stdout.startswith("ok:"), (name, m, r.stdout + r.stderr)


@pytest.mark.parametrize("name", NAMES)
def test_layouts_equal_torch(name, tmp_path):
    fx = FIXTURES / name
    combos = [(m, dim) for m in (1, 2, 3, 4) for dim in (0, 1)]
    # a short sweep: 3 sizes/dims per fixture, in turn, and the leak-checked one on each
    for m, dim in sweep.pick(combos, NAMES.index(name), 3, keep=[(3, 0)]):
        # odd sizes: all through the exchange; even: single-owner bytes read in place
        direct = "never" if m % 2 else "1"
        stats, data = check(fx, m, dim, tmp_path / f"m{m}d{dim}", direct=direct,
                            leak=(m, dim) == (3, 0))
        per = stats["per_rank"]
        read = sum(p["read_plan"] for p in per)
        assert read == stats["union_bytes"], (name, m, dim, stats)  # each byte once
        # what the preads returned covers the plan (and, for zip-stored items, headers)
        assert all(p["read"] >= p["read_plan"] for p in per), (name, m, dim, stats)
        if name in PLAIN:
            assert stats["union_bytes"] == data, (name, stats["union_bytes"], data)
        shutil.rmtree(tmp_path / f"m{m}d{dim}")


def test_independent_mode_reads_every_overlap(tmp_path):
    fx = FIXTURES / "fsdp2_ws4"
    stats, data = check(fx, 3, 1, tmp_path / "ind", mode="independent")
    # what the preads returned: every requested byte at least (slabs and headers besides)
    assert all(p["read"] >= p["requested"] for p in stats["per_rank"]), stats
    assert all(p["read_plan"] == 0 for p in stats["per_rank"]), stats
    stats2, _ = check(fx, 3, 1, tmp_path / "col")
    assert sum(p["read_plan"] for p in stats2["per_rank"]) == data
    assert sum(p["sent"] for p in stats2["per_rank"]) > 0


def test_small_budget_many_rounds(tmp_path):
    fx = FIXTURES / "fsdp2_ws3"
    r = mpirun(2, fx / "ckpt", "--layout", "dim0", "--budget", "4K", "--dump", tmp_path / "o",
               "--json", leak=True)
    assert r.returncode == 0, r.stderr
    stats = json.loads(r.stdout.strip().splitlines()[-1])
    assert stats["per_rank"][0]["rounds"] > 1
    ref, _ = tensors(fx)
    for path, (dtype, shape, raw) in ref.items():
        for k in range(2):
            assert (tmp_path / "o" / f"rank{k}" / path).read_bytes() == shard(raw, dtype, shape,
                                                                               0, 2, k)


def test_ranks_with_nothing_take_part(tmp_path):
    """model/mix has 2 elements: with 4 ranks, ranks 2 and 3 get empty shards."""
    fx = FIXTURES / "fsdp2_ws2"
    r = mpirun(4, fx / "ckpt", "--layout", "dim0", "--keys", "model/mix", "--dump", tmp_path,
               "--json", leak=True)
    assert r.returncode == 0, r.stderr
    stats = json.loads(r.stdout.strip().splitlines()[-1])
    assert [p["requested"] for p in stats["per_rank"]][2:] == [0, 0]
    assert (tmp_path / "rank3" / "model" / "mix").read_bytes() == b""


def test_missing_shard_fails_everywhere(tmp_path):
    ck = tmp_path / "ck"
    shutil.copytree(FIXTURES / "fsdp2_ws4" / "ckpt", ck)
    victim = sorted(ck.glob("*.distcp"))[1]
    victim.unlink()
    r = mpirun(3, ck, "--layout", "dim0", timeout=60, leak=True)
    assert r.returncode != 0
    assert victim.name in r.stderr and "rank" in r.stderr, r.stderr


def test_direct_reads_skip_the_exchange(tmp_path):
    """Bytes one rank alone needs are read by it in place: far less goes between ranks, every
    byte is still read once, and the shards are the same."""
    fx = FIXTURES / "fsdp2_ws4"
    via, _ = check(fx, 2, 0, tmp_path / "via", direct="never")
    direct, data = check(fx, 2, 0, tmp_path / "direct", direct="1")
    sent_via = sum(p["sent"] for p in via["per_rank"])
    sent_direct = sum(p["sent"] for p in direct["per_rank"])
    assert sent_direct < sent_via / 2, (sent_direct, sent_via)
    assert sum(p["read_plan"] for p in direct["per_rank"]) == direct["union_bytes"] == data


@pytest.mark.parametrize("direct", ["never", "1"])
def test_parallel_reads_in_small_pieces(direct, tmp_path):
    """Reads split into 1 KiB pieces over 5 threads (the exchange's staging windows, or the
    in-place runs) give the same shards, and the reads still add up to the union, each byte
    once; the same with one thread."""
    fx = FIXTURES / "fsdp2_ws4"
    for threads in ("5", "1"):
        out = tmp_path / f"t{threads}"
        stats, data = check(fx, 3, 0, out, direct=direct,
                            extra=("--io-threads", threads, "--io-piece", "1K"))
        assert sum(p["read_plan"] for p in stats["per_rank"]) == stats["union_bytes"] == data
        shutil.rmtree(out)


def test_io_threads_default_follows_the_cpus():
    """The default I/O threads: the CPUs a rank may run on, shared among the ranks of its node
    that may run on the same ones, 2 to 16; --io-threads overrides it."""
    cpus = len(os.sched_getaffinity(0))
    ck = FIXTURES / "fsdp2_ws2" / "ckpt"

    def threads(r):
        assert r.returncode == 0, r.stdout + r.stderr
        return [p["io_threads"] for p in json.loads(r.stdout.strip().splitlines()[-1])["per_rank"]]

    def alone(*prefix):  # a rank alone, no mpirun
        return subprocess.run([*prefix, BIN, "load", ck, "--json"], capture_output=True,
                              text=True, timeout=120)

    def clamp(t):
        return max(2, min(16, t))

    unbound = ("--bind-to", "none")
    assert threads(alone()) == [clamp(cpus)]
    assert threads(mpirun(2, ck, "--json", opts=unbound)) == [clamp(cpus // 2)] * 2
    assert threads(mpirun(3, ck, "--json", "--io-threads", "3", opts=unbound)) == [3] * 3
    if cpus >= 2 and shutil.which("taskset"):  # ranks bound to one CPU each: 2 threads
        one = sorted(os.sched_getaffinity(0))[0]
        assert threads(alone("taskset", "-c", str(one))) == [2]


@pytest.fixture(scope="module")
def tall_ckpt(tmp_path_factory):
    """A [1000000, 16] float32 tensor (one stored chunk) and a [999, 10, 6] one, saved by
    torch.distributed.checkpoint (one process)."""
    torch = pytest.importorskip("torch")
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    d = tmp_path_factory.mktemp("tall") / "ckpt"
    sd = {"w": torch.arange(1000000 * 16, dtype=torch.float32).reshape(1000000, 16),
          "c": torch.arange(999 * 10 * 6, dtype=torch.float32).reshape(999, 10, 6)}
    dcp.save(sd, checkpoint_id=str(d), no_dist=True)
    return d


def columns(ckpt, m, mode, *keys):
    drv = os.environ.get("CKPT_LOAD_COLUMNS")
    if not drv:
        pytest.skip("needs CKPT_LOAD_COLUMNS")
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca",
           "btl_vader_single_copy_mechanism", "none", "-np", str(m), drv, str(ckpt), mode, *keys]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("m", [2, 4])
def test_column_plan_does_not_grow_with_rows(tall_ckpt, m, tmp_path):
    """A [1000000, 16] tensor loaded Shard(1) (`ckpt load --layout dim1`): the plan holds one
    strided transfer per rank and one band of needed bytes, not a piece per row (a per-row
    plan had 1000000 x m pieces and hundreds of MB per rank); the shards equal torch.chunk's."""
    r = mpirun(m, tall_ckpt, "--layout", "dim1", "--keys", "w", "--dump", tmp_path, "--json")
    assert r.returncode == 0, r.stderr
    stats = json.loads(r.stdout.strip().splitlines()[-1])
    for p in stats["per_rank"]:
        assert p["plan_transfers"] == m, p  # one per (rank, stored chunk)
        assert p["plan_ranges"] == 1 and p["plan_rows"] == 0, p
        assert p["plan_memory"] < 64 << 10, p
    assert sum(p["read_plan"] for p in stats["per_rank"]) == stats["union_bytes"] == 64000000
    full = np.arange(1000000 * 16, dtype=np.float32).reshape(1000000, 16)
    for k, part in enumerate(np.array_split(np.arange(16), m)):
        got = (tmp_path / f"rank{k}" / "w").read_bytes()
        cols = full[:, 4 * k:4 * k + 4] if m == 4 else full[:, 8 * k:8 * k + 8]
        assert got == np.ascontiguousarray(cols).tobytes(), k
    # the C API: whole column slices (one band) and halves of them (holes between the rows:
    # the rows are listed, to read only what is needed); each buffer equals the reader's
    s = columns(tall_ckpt, m, "full", "w", "c")
    assert s["plan_transfers"] == 2 * m and s["plan_rows"] == 0, s
    assert s["union_bytes"] == 64000000 + 999 * 60 * 4, s
    s = columns(tall_ckpt, m, "holes", "c")
    assert s["plan_transfers"] <= m and s["plan_rows"] > 0 and s["union_bytes"] == s["asked"], s


@pytest.fixture(scope="module")
def strided_ckpt(tmp_path_factory):
    """[8192, 512] and [32768, 512] float32 tensors (one stored chunk each), saved by
    torch.distributed.checkpoint (one process)."""
    torch = pytest.importorskip("torch")
    dcp = pytest.importorskip("torch.distributed.checkpoint")
    d = tmp_path_factory.mktemp("strided") / "ckpt"
    sd = {f"r{n}": torch.arange(n * 512, dtype=torch.float32).reshape(n, 512)
          for n in (8192, 32768)}
    dcp.save(sd, checkpoint_id=str(d), no_dist=True)
    return d


@pytest.mark.parametrize("spec", ["2x2:S1s2,R", "2x2:R,S1s4"])
def test_strided_column_plan_does_not_grow_with_rows(strided_ckpt, spec, tmp_path):
    """A _StridedShard on dim 1 (`2x2:S1s2,R`: each rank holds 2 column runs, a box per row and
    run, 16384 boxes per rank for 8192 rows): the loader requests one strided box per run (the
    destination has the local tensor's strides), so the plan is a few transfers per rank,
    the same for 4x the rows, like `4:S1`'s; each rank's buffer equals torch's DTensor split."""
    dtensor_ref = pytest.importorskip("dtensor_ref")
    torch = pytest.importorskip("torch")
    runs = int(spec.split("s")[-1].split(",")[0])  # column runs per rank
    plans = {}
    for rows in (8192, 32768):
        out = tmp_path / f"r{rows}"
        r = mpirun(4, strided_ckpt, "--layout", spec, "--keys", f"r{rows}", "--dump", out,
                   "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        stats = json.loads(r.stdout.strip().splitlines()[-1])
        per = stats["per_rank"]
        for p in per:  # one transfer per (rank, run box, stored chunk): 4 ranks x runs
            assert p["plan_transfers"] == 4 * runs, p
            assert p["plan_rows"] == 0 and p["plan_memory"] < 64 << 10, p
        assert sum(p["read_plan"] for p in per) == stats["union_bytes"] == rows * 512 * 4
        plans[rows] = [(p["plan_transfers"], p["plan_ranges"], p["plan_memory"]) for p in per]
        full = torch.arange(rows * 512, dtype=torch.float32).reshape(rows, 512)
        for k in range(4):
            want = dtensor_ref.expected_local(full, spec, k).contiguous().numpy().tobytes()
            assert (out / f"rank{k}" / f"r{rows}").read_bytes() == want, (spec, rows, k)
    assert plans[8192] == plans[32768], plans  # nothing grows with the rows


@pytest.mark.parametrize("name", ["fsdp2_ws4", "tp_shard1"])
def test_column_slices_with_holes(name):
    """Column halves across stored chunks of real fixtures: the same bytes as the reader's."""
    fx = FIXTURES / name
    ref, _ = tensors(fx)
    keys = [p for p, (dtype, shape, _) in ref.items()
            if len(shape) >= 2 and "%" not in p and dtype in ITEM]
    assert keys
    for m in (2, 3):
        columns(fx / "ckpt", m, "holes", *keys)
        columns(fx / "ckpt", m, "full", *keys)


def open_all(m, ckpt):
    """`mpirun -np m load_open ckpt` -> [(status, message, metadata bytes read)] per rank."""
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca",
           "btl_vader_single_copy_mechanism", "none", "-np", str(m),
           os.environ["CKPT_LOAD_OPEN"], str(ckpt)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    got = {}
    for line in r.stdout.splitlines():
        f = line.split("\t")
        if f[0] == "rank":
            got[int(f[1])] = (int(f[2]), f[3], int(f[4]))
    assert sorted(got) == list(range(m)), r.stdout + r.stderr
    return [got[k] for k in range(m)]


@pytest.mark.parametrize("name", ["fsdp2_ws4", "rank_local", "megatron"])
def test_metadata_read_by_rank_0_alone(name):
    """Over MPI: rank 0 reads the DCP metadata (one copy: the files' size, from the preads),
    the others receive it and read none."""
    ck = FIXTURES / name / "ckpt"
    one = ck / ".metadata"
    size = sum(f.stat().st_size for f in ([one] if one.is_file() else ck.glob("__*.metadata")))
    got = open_all(3, ck)
    assert [g[0] for g in got] == [0, 0, 0], got
    assert [g[2] for g in got] == [size, 0, 0], (got, size)


@pytest.fixture(scope="module")
def other_formats(tmp_path_factory):
    """Checkpoints without DCP metadata (tests/lib/other_formats.py)."""
    pytest.importorskip("torch")
    import other_formats as of
    return of.build(FIXTURES, tmp_path_factory.mktemp("formats"))


def rank_stats(r):
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])["per_rank"]


@pytest.mark.parametrize("name,opts", [
    ("hf_full", ()), ("hf_sharded", ("--mca", "btl", "self,tcp")), ("bin", ()),
    ("torchsave", ()), ("tc_sharded", ()), ("tc_single", ("--mca", "btl", "self,tcp"))])
def test_other_formats_metadata_read_by_rank_0_alone(other_formats, name, opts, tmp_path):
    """Over MPI, M = 4, formats without `.metadata` (HuggingFace index json and safetensors
    headers, .bin and torch.save zip directories and pickles, torch-checkpointing's
    metadata.pkl): rank 0 reads what one process opening the checkpoint reads, the others
    receive its reads and read no metadata; every rank's Shard(0) equals torch's chunk."""
    ck, ref = other_formats[name]
    one = rank_stats(mpirun(1, ck, "--json"))[0]["read_metadata"]
    assert one > 0
    per = rank_stats(mpirun(4, ck, "--layout", "dim0", "--dump", tmp_path, "--json", opts=opts))
    assert [p["read_metadata"] for p in per] == [one, 0, 0, 0], (name, per)
    got = [p["received_metadata"] for p in per]
    assert got[0] == 0 and got[1] > 0 and len(set(got[1:])) == 1, got
    check_dumps(tmp_path, ref, 4, lambda raw, dt, shape, k: shard(raw, dt, shape, 0, 4, k),
                (name,))


def test_other_formats_corrupt_header_fails_every_rank_alike(other_formats, tmp_path):
    """A safetensors header that is not JSON, as rank 0 reads it: every rank returns rank 0's
    status and message, naming the file, and none hangs (the subprocess timeout)."""
    ck, _ = other_formats["hf_full"]
    bad = tmp_path / "bad"
    shutil.copytree(ck, bad)
    f = bad / "model-00001-of-00002.safetensors"
    raw = bytearray(f.read_bytes())
    raw[8:12] = b"\x01\x02{["
    f.write_bytes(bytes(raw))
    got = open_all(4, bad)
    assert len(set(got)) == 1 and got[0][0] != 0, got
    assert got[0][1].startswith(f"rank 0: {bad}/") and f.name in got[0][1], got


@pytest.mark.parametrize("damage", ["truncated", "not a pickle", "garbage inside"])
def test_corrupt_metadata_fails_every_rank_alike(damage, tmp_path):
    """A bad `.metadata`: the same status and message on every rank (rank 0's, naming the
    file), and no hang (the subprocess timeout)."""
    ck = tmp_path / "ck"
    shutil.copytree(FIXTURES / "fsdp2_ws4" / "ckpt", ck)
    raw = bytearray((ck / ".metadata").read_bytes())
    if damage == "truncated":
        raw = raw[: len(raw) // 2]
    elif damage == "not a pickle":
        raw[0:2] = b"PK"
    else:
        raw[len(raw) // 3: len(raw) // 3 + 64] = bytes(range(200, 256)) + bytes(8)
    (ck / ".metadata").write_bytes(bytes(raw))
    got = open_all(3, ck)
    assert len(set(got)) == 1 and got[0][0] != 0, got
    assert got[0][1].startswith(f"rank 0: {ck}/.metadata: "), got
