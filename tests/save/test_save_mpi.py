"""The collective saver (include/ckpt_save_mpi.h) under mpirun.

save_mpi_driver (tests/save/save_mpi_driver.c) writes a checkpoint from 2 or 3 MPI ranks:
Shard(0) and Shard(1) pieces with torch.chunk boundaries, a replicated tensor and a 0-d tensor
every rank adds, values every rank adds and one per rank.  Checked here:
  * real torch `dcp.load` reads it at another world size — without a process group (1) and
    into DTensors over gloo (2 or 3 spawned processes) — bit-exact, values equal;
  * replicated pieces and shared values are stored once, by rank 0 (storage_data);
  * `latest` and keep-N retention through the MPI options;
  * a rank SIGKILLed mid-write leaves no visible step and `latest` unchanged;
  * a failing rank (bad shape seen at rank 0's commit, bad byte count at its own write, an
    add refused locally: bad dtype, empty key) makes every rank return the same error,
    promptly, and leaves nothing behind.
"""
import os
import pickle
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import torch.distributed.checkpoint as dcp  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from gloo_group import gloo_group  # noqa: E402

DRIVER = os.environ.get("SAVE_MPI_DRIVER", "")
CKPT = os.environ.get("CKPT_BIN", "")
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]

pytestmark = pytest.mark.skipif(not DRIVER, reason="SAVE_MPI_DRIVER not set (no MPI build)")


def expected(world):
    big_rows = 256 * world
    ib = torch.arange(big_rows * 1024, dtype=torch.int64)
    t = {
        "model/w": (torch.arange(35, dtype=torch.float32) * 0.5 - 3).reshape(7, 5),
        "model/big": ((ib % 1000).to(torch.float32) * 0.25).reshape(big_rows, 1024),
        "model/b": ((torch.arange(24, dtype=torch.float32) - 12) * 0.25).to(torch.bfloat16)
        .reshape(4, 6),
        "model/norm": (torch.arange(9, dtype=torch.float32) * 0.125).to(torch.float16).reshape(3, 3),
        "optim/state/model.w/step": torch.tensor(12345678901, dtype=torch.int64),
    }
    v = {
        "optim/param_groups/0/lr": 3e-4,
        "optim/param_groups/0/betas": (0.9, 0.999),
        "optim/param_groups/0/name": "adamw \u00fc",
        "misc/cfg": {"layers": 2, "names": ["w", None, True]},
    }
    for k in range(world):
        v[f"misc/rank{k}"] = k
    return t, v


# sanitizer builds pass leak-checking ASAN_OPTIONS here; runs with leak=True use them
LEAK_ASAN = os.environ.get("CKPT_LEAK_ASAN_OPTIONS")


def run(world, parent, step, *extra, timeout=120, leak=False):
    env = dict(os.environ, ASAN_OPTIONS=LEAK_ASAN) if leak and LEAK_ASAN else None
    return subprocess.run(MPIRUN + ["-np", str(world), DRIVER, str(parent), step, "--no-fsync",
                                    *extra],
                          capture_output=True, text=True, timeout=timeout, env=env)


def lines(p):
    return sorted(line for line in p.stdout.splitlines() if line.startswith("rank "))


def placeholder(world):
    t, v = expected(world)
    sd = {}
    for path, want in list(t.items()) + list(v.items()):
        node = sd
        parts = path.split("/")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = torch.zeros_like(want) if isinstance(want, torch.Tensor) else None
    sd["optim"]["param_groups"] = [sd["optim"]["param_groups"]["0"]]
    return sd


def lookup(sd, path):
    node = sd
    for p in path.split("/"):
        node = node[int(p)] if isinstance(node, list) else node[p]
    return node


def bits(a):
    return a.contiguous().reshape(-1).view(torch.uint8)


@pytest.fixture(scope="module", params=[2, 3])
def saved(request, tmp_path_factory):
    world = request.param
    parent = tmp_path_factory.mktemp(f"np{world}")
    p = run(world, parent, "step-1", "--latest")
    assert p.returncode == 0, p.stdout + p.stderr
    assert lines(p) == [f"rank {k}: ok" for k in range(world)]
    return world, parent / "step-1"


def test_ckpt_verify(saved):
    _, ckpt = saved
    p = subprocess.run([CKPT, "verify", str(ckpt)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


def test_torch_load_without_process_group(saved):
    world, ckpt = saved
    sd = placeholder(world)
    dcp.load(sd, checkpoint_id=str(ckpt), no_dist=True)
    t, v = expected(world)
    for path, want in t.items():
        got = lookup(sd, path)
        assert got.dtype == want.dtype and got.shape == want.shape, path
        assert torch.equal(bits(got), bits(want)), path
    for path, want in v.items():
        got = lookup(sd, path)
        assert got == want and type(got) is type(want), (path, got)


def test_replicas_stored_once_by_rank0(saved):
    world, ckpt = saved
    md = pickle.load(open(ckpt / ".metadata", "rb"))
    per_key = {}
    for idx, info in md.storage_data.items():
        per_key.setdefault(idx.fqn, []).append(info.relative_path)
    for key in ["model.norm", "optim.state.model.w.step", "optim.param_groups.0.lr",
                "optim.param_groups.0.betas", "misc.cfg"]:
        assert per_key[key] == ["__0_0.distcp"], key
        if key in md.state_dict_metadata and hasattr(md.state_dict_metadata[key], "chunks"):
            assert len(md.state_dict_metadata[key].chunks) == 1
    for k in range(world):
        assert per_key[f"misc.rank{k}"] == [f"__{k}_0.distcp"]
    # Shard(0) of 7 rows over the ranks, torch.chunk sizes
    chunks = md.state_dict_metadata["model.w"].chunks
    c = -(-7 // world)
    assert [tuple(ch.sizes) for ch in chunks] == \
        [(min(c, 7 - k * c), 5) for k in range(world) if k * c < 7] + \
        [(0, 5) for k in range(world) if k * c >= 7]


def _dtensor_worker(rank, world, saved_world, ckpt, init_file):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Replicate, Shard
    with gloo_group(init_method=f"file://{init_file}", rank=rank, world_size=world):
        mesh = init_device_mesh("cpu", (world,))
        t, v = expected(saved_world)
        sd = placeholder(saved_world)
        for path, want in t.items():
            parent, name = path.rsplit("/", 1)
            if want.dim() == 0:
                lookup(sd, parent)[name] = DTensor.from_local(torch.zeros_like(want), mesh,
                                                              [Replicate()], run_check=False)
            else:
                local = torch.zeros_like(want).chunk(world, 0)
                local = local[rank] if rank < len(local) else want[0:0]
                lookup(sd, parent)[name] = DTensor.from_local(
                    torch.zeros_like(local), mesh, [Shard(0)], run_check=False,
                    shape=want.shape, stride=want.stride())
        dcp.load(sd, checkpoint_id=ckpt)
        for path, want in t.items():
            got = lookup(sd, path).to_local()
            if want.dim():
                parts = want.chunk(world, 0)
                want = parts[rank] if rank < len(parts) else want[0:0]
            assert torch.equal(bits(got), bits(want)), (rank, path)
        for path, want in v.items():
            assert lookup(sd, path) == want, (rank, path)


def test_torch_load_dtensors_other_world_size(saved, tmp_path):
    import torch.multiprocessing as mp
    world, ckpt = saved
    load_world = 3 if world == 2 else 2
    mp.spawn(_dtensor_worker, args=(load_world, world, str(ckpt), str(tmp_path / "pg")),
             nprocs=load_world, join=True)


def test_flush_each_same_result(tmp_path):
    p = run(3, tmp_path, "step-1", "--flush-each")
    assert p.returncode == 0, p.stdout + p.stderr
    sd = placeholder(3)
    dcp.load(sd, checkpoint_id=str(tmp_path / "step-1"), no_dist=True)
    t, _ = expected(3)
    for path, want in t.items():
        assert torch.equal(bits(lookup(sd, path)), bits(want)), path


def visible(parent):
    return sorted(n for n in os.listdir(parent) if not n.startswith("."))


def test_latest_and_keep(tmp_path):
    for s in (1, 2, 3):
        # the last one named with a trailing slash: latest and keep-N still name "step-3"
        p = run(2, tmp_path, f"step-{s}" + ("/" if s == 3 else ""), "--latest", "--keep", "2",
                leak=s == 3)
        assert p.returncode == 0, p.stdout + p.stderr
    assert visible(tmp_path) == ["latest", "step-2", "step-3"]
    assert (tmp_path / "latest").read_text() == "step-3\n"


def test_killed_rank_leaves_no_step(tmp_path):
    p = run(3, tmp_path, "step-1", "--latest")
    assert p.returncode == 0, p.stdout + p.stderr
    p = run(3, tmp_path, "step-2", "--latest", "--kill-rank", "1")
    assert p.returncode != 0, p.stdout + p.stderr
    assert "rank 1: ok" not in p.stdout
    assert visible(tmp_path) == ["latest", "step-1"]
    assert (tmp_path / "latest").read_text() == "step-1\n"
    hidden = [n for n in os.listdir(tmp_path) if n.startswith(".step-2.tmp-")]
    assert len(hidden) == 1
    files = os.listdir(tmp_path / hidden[0])
    assert ".metadata" not in files and "__1_0.distcp" in files
    # rank 1 died mid-file, after its 1 MiB piece of model/big reached the file
    assert (1 << 20) < os.path.getsize(tmp_path / hidden[0] / "__1_0.distcp") < (1 << 20) + 8192
    # the step can be saved again; the mount's view (ckpt ls) of the parent shows only it
    p = run(3, tmp_path, "step-2", "--latest")
    assert p.returncode == 0, p.stdout + p.stderr
    assert visible(tmp_path) == ["latest", "step-1", "step-2"]
    assert (tmp_path / "latest").read_text() == "step-2\n"


@pytest.mark.parametrize("flag,first,needle", [
    ("--bad-shape-rank", 0, "model.w"),        # found by rank 0's metadata checks at commit
    ("--bad-data-rank", 1, "bytes of data"),   # found by rank 1's own write
])
def test_failing_rank_every_rank_same_error(tmp_path, flag, first, needle):
    p = run(3, tmp_path, "step-1", "--latest", flag, "1" if first == 1 else "2", timeout=60)
    assert p.returncode == 1, p.stdout + p.stderr
    out = lines(p)
    assert len(out) == 3, p.stdout + p.stderr
    msgs = {line.split(": error: ", 1)[1] for line in out}
    assert len(msgs) == 1, out  # the same message on every rank
    msg = msgs.pop()
    assert msg.startswith(f"rank {first}: ") and needle in msg, msg
    assert os.listdir(tmp_path) == []  # no step, no staging, no latest



@pytest.mark.parametrize("flag,needle", [
    ("--bad-add-rank", "invalid dtype 999"),  # ckpt_save_mpi_add_tensor refuses at once
    ("--bad-key-rank", "empty key"),          # ckpt_save_mpi_add_value refuses at once
])
@pytest.mark.parametrize("flush_each", [False, True])
def test_failed_add_every_rank_same_error(tmp_path, flag, needle, flush_each):
    """One rank's add fails locally (the others' adds succeed): the next collective call —
    an explicit flush, or the commit — returns that rank's error on every rank, without a
    hang, and nothing becomes visible."""
    extra = ("--flush-each",) if flush_each else ()
    p = run(3, tmp_path, "step-1", "--latest", flag, "2", *extra, timeout=60)
    assert p.returncode == 1, p.stdout + p.stderr
    out = lines(p)
    assert len(out) == 3, p.stdout + p.stderr
    msgs = {line.split(": error: ", 1)[1] for line in out}
    assert len(msgs) == 1, out  # the same message on every rank
    msg = msgs.pop()
    assert msg.startswith("rank 2: ") and needle in msg, msg
    assert os.listdir(tmp_path) == []  # no step, no staging, no latest


# ---------------------------------------------------------------- the README demo's writer

DEMO = os.environ.get("DEMO_GPT_SAVE", "")


def _splitmix_v(seed, n, base):
    import numpy as np
    with np.errstate(over="ignore"):
        x = (np.uint64(seed) << np.uint64(40)) ^ (np.arange(n, dtype=np.uint64) + np.uint64(base))
        x = x + np.uint64(0x9e3779b97f4a7c15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xbf58476d1ce4e5b9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94d049bb133111eb)
        x = x ^ (x >> np.uint64(31))
    return (x >> np.uint64(40)).astype(np.float32) / np.float32(16777216) - np.float32(0.5)


@pytest.mark.skipif(not DEMO, reason="DEMO_GPT_SAVE not set")
def test_demo_gpt_save_values_torch(tmp_path):
    import numpy as np
    layers, d, vocab = 2, 16, 40
    p = subprocess.run(MPIRUN + ["-np", "3", DEMO, str(tmp_path), "step-10", "--layers",
                                 str(layers), "--dim", str(d), "--vocab", str(vocab), "--no-fsync"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert (tmp_path / "latest").read_text() == "step-10\n"
    params = [("tok_embeddings.weight", (vocab, d))]
    for i in range(layers):
        params += [(f"layers.{i}.attention.{w}.weight", (d, d)) for w in ("wq", "wk", "wv", "wo")]
        params += [(f"layers.{i}.attention_norm.weight", (d,)),
                   (f"layers.{i}.feed_forward.w1.weight", (4 * d, d)),
                   (f"layers.{i}.feed_forward.w2.weight", (d, 4 * d)),
                   (f"layers.{i}.ffn_norm.weight", (d,))]
    params += [("norm.weight", (d,)), ("output.weight", (vocab, d))]
    sd = {"model": {f: torch.zeros(s) for f, s in params},
          "optim": {"state": {f: {"step": torch.tensor(0.0), "exp_avg": torch.zeros(s),
                                  "exp_avg_sq": torch.zeros(s)} for f, s in params},
                    "param_groups": [{"lr": None, "betas": None, "params": None}]}}
    dcp.load(sd, checkpoint_id=str(tmp_path / "step-10"), no_dist=True)
    for i, (f, s) in enumerate(params):
        n = int(np.prod(s))
        want = _splitmix_v(1 + i, n, 0) * np.float32(0.04)
        assert np.array_equal(sd["model"][f].numpy().reshape(-1).view(np.uint32),
                              want.view(np.uint32)), f
        st = sd["optim"]["state"][f]
        m = _splitmix_v(1000 + 2 * i, n, 0) * np.float32(0.001)
        v = _splitmix_v(1001 + 2 * i, n, 0)
        v = v * v * np.float32(1e-4)
        assert np.array_equal(st["exp_avg"].numpy().reshape(-1), m), f
        assert np.array_equal(st["exp_avg_sq"].numpy().reshape(-1), v), f
        assert st["step"].item() == 100.0
    g = sd["optim"]["param_groups"][0]
    assert g["lr"] == 3e-4 and g["betas"] == (0.9, 0.95) and g["params"] == [f for f, _ in params]
