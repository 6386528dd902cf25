"""ckptfs.load under torchrun: 2, 3 and 4 processes (`python -m torch.distributed.run
--standalone`, gloo on the CPU; load_worker.py is each rank) load checkpoints saved by 4 ranks
into DTensors of several meshes and placements (Shard(d), Replicate, _StridedShard; 1-D and
2-D meshes, submeshes, uneven and empty shards) and plain tensors; real torch is the referee:
every local shard equals torch's dcp.load (FileSystemReader) into the same state_dict and
distribute_tensor(reference, src_data_rank=None).to_local(), bit for bit.  The byte counters
show each stored byte read once across the job; an error on one rank fails every rank with the
same ckptfs exception, without a hang (every launch runs under a timeout).  A real FSDP2 model
with AdamW, saved at 2 ranks, resumes at 3 as it does with torch's loader."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import FIXTURES, bits, json_text, ref  # noqa: E402

WORKER = HERE / "load_worker.py"
NAMES = ["fsdp2_ws4", "hsdp"]

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed with gloo is not available")


def torchrun(n, mode, out, *args, timeout=420):
    """Launches the worker on n ranks; returns (process, per-rank results)."""
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", CKPT_FIXTURES=str(FIXTURES))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
           str(n), str(WORKER), mode, str(out)] + [str(a) for a in args]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    res = []
    for r in range(n):
        f = out / f"rank{r}.json"
        assert f.is_file(), f"rank {r} wrote no result:\n{p.stdout[-3000:]}\n{p.stderr[-6000:]}"
        res.append(json.loads(f.read_text()))
    bad = [r for r in res if not r.get("ok")]
    assert not bad and p.returncode == 0, \
        "\n".join(r.get("traceback", "") for r in bad) + p.stderr[-4000:]
    return p, res


@pytest.mark.parametrize("n", [2, 3, 4])
def test_dtensor_layouts_against_torch(n, tmp_path):
    if not all((FIXTURES / name / "ckpt").is_dir() for name in NAMES):
        pytest.skip("fixtures missing")
    _, res = torchrun(n, "layouts", tmp_path, *NAMES)
    for r in res:
        # every tensor of both fixtures, some of them _StridedShard
        assert r["checked"] == sum(e.is_tensor for name in NAMES for e in ref(name).entries)
        assert r["strided"] > 0
        assert len(r["placements"]) >= 4, r["placements"]
    if n == 4:  # 2-D meshes and a submesh
        ps = res[0]["placements"]
        assert any(p.startswith("(2, 2):(_StridedShard") for p in ps), ps
        assert any(p.startswith("(2, 2):(Replicate(), Shard") for p in ps), ps
        assert any(p.startswith("(2,):") for p in ps), ps
    for name in NAMES:
        st = [r["stats"][name] for r in res]
        # the plan's reads, summed over the ranks, are the job's needed bytes: each once
        assert sum(s["bytes_read_plan"] for s in st) == st[0]["union_bytes"] > 0


@pytest.mark.parametrize("n", [2, 3])
def test_each_byte_read_once(n, tmp_path):
    _, res = torchrun(n, "replicated", tmp_path)
    coll = [r["collective"] for r in res]
    ind = [r["independent"] for r in res]
    union = coll[0]["union_bytes"]
    assert union > 4 << 20
    assert sum(s["bytes_read_plan"] for s in coll) == union
    # every rank needs every byte: read once across the job (plus each rank's container
    # headers), against once per rank independently
    total = sum(s["bytes_read"] for s in coll)
    assert union <= total <= 1.15 * union, (total, union)
    assert sum(s["bytes_read"] for s in ind) >= (n - 0.1) * union
    assert all(s["bytes_received"] > 0 for s in coll)


def test_fsdp2_model_and_adamw_resumed_at_another_world_size(tmp_path):
    """A real FSDP2 job (fully_shard, AdamW, one step) saved by dcp.save at 2 ranks, resumed
    at 3 from get_state_dict's state_dicts by ckptfs.load and by dcp.load: every local shard
    and value equal, and the parameters equal after one more step."""
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError:
        pytest.skip("no FSDP2 in this torch")
    torchrun(2, "fsdp-save", tmp_path / "save", tmp_path / "ckpt")
    _, res = torchrun(3, "fsdp-load", tmp_path / "load", tmp_path / "ckpt")
    for r in res:
        assert r["tensors"] >= 20  # model parameters, exp_avg, exp_avg_sq, step
    st = [r["stats"] for r in res]
    assert sum(s["bytes_read_plan"] for s in st) == st[0]["union_bytes"] > 0


@pytest.mark.parametrize("kind,n,cls", [("path", 2, "NotFoundError"),
                                        ("key", 3, "NotFoundError"),
                                        ("shard", 2, "NotFoundError"),
                                        ("shape", 3, "InvalidArgumentError")])
def test_an_error_on_one_rank_fails_every_rank(kind, n, cls, tmp_path):
    src = FIXTURES / "fsdp2_ws4" / "ckpt"
    if not src.is_dir():
        pytest.skip("fixture missing")
    d = src
    if kind == "shard":  # a copy without one shard file
        import shutil
        d = tmp_path / "ckpt"
        shutil.copytree(src, d)
        (d / "__2_0.distcp").unlink()
    _, res = torchrun(n, "fault", tmp_path / "out", kind, d, timeout=240)
    raised = {(r["raised"], r["message"]) for r in res}
    assert len(raised) == 1, raised  # the same exception, the same message, on every rank
    (got, msg), = raised
    assert got == cls, msg
    want = {"path": "does-not-exist", "key": "no_such_weight", "shard": "__2_0.distcp",
            "shape": "[2, 2]"}[kind]
    assert want in msg, msg


def test_one_process_without_torch_distributed():
    """No process group: this process alone (a transport of one rank)."""
    import ckptfs
    r = ref("fsdp2_ws4")
    sd = {}
    for e in r.entries:
        sd[e.key] = torch.zeros(e.shape, dtype=getattr(torch, e.dtype)) if e.is_tensor else None
    sd = {"model": {k[6:]: v for k, v in sd.items() if k.startswith("model.")},
          **{k: v for k, v in sd.items() if not k.startswith("model.")}}
    st = ckptfs.load(sd, r.dir)
    assert isinstance(st, ckptfs.LoadStats)
    assert st.bytes_read_plan == st.union_bytes == st.bytes_requested > 0
    n = 0
    for e in r.entries:
        v = sd["model"][e.key[6:]] if e.key.startswith("model.") else sd[e.key]
        if e.is_tensor:
            assert bits(v) == bits(r.tensor(e)), e.key
            n += 1
        else:
            assert json_text(v) == e.json, (e.key, v)
    assert n > 10
    assert sd["extra.step"] == 7


def test_errors_without_a_process_group(tmp_path):
    import ckptfs
    r = ref("fsdp2_ws4")
    with pytest.raises(ckptfs.NotFoundError):
        ckptfs.load({"model.no_such": torch.zeros(1)}, r.dir)
    with pytest.raises(ckptfs.InvalidArgumentError, match="is \\[3\\]"):
        ckptfs.load({"model.mix": torch.zeros(3)}, r.dir)
    with pytest.raises(ckptfs.NotFoundError):
        ckptfs.load({}, tmp_path / "nothing-here")
    with pytest.raises(ckptfs.InvalidArgumentError):
        ckptfs.load({}, r.dir, mode="fast")


def test_values_within_the_memory_budget(tmp_path):
    """Issue #22: ckptfs.load decodes each value within max_value_memory (1 GiB by default):
    a list of 400 k small ints that dcp.save wrote loads by default and fails at 8 MiB with
    LimitError naming the key and the budget; a bad budget fails before anything is read."""
    import ckptfs
    import torch.distributed.checkpoint as dcp
    ints = [i % 100 for i in range(400_000)]
    d = tmp_path / "c"
    dcp.save({"w": torch.arange(4.0), "ints": ints}, checkpoint_id=d, no_dist=True)
    sd = {"w": torch.zeros(4), "ints": None}
    ckptfs.load(sd, d)
    assert sd["ints"] == ints and torch.equal(sd["w"], torch.arange(4.0))
    with pytest.raises(ckptfs.LimitError) as ei:
        ckptfs.load({"w": torch.zeros(4), "ints": None}, d, max_value_memory=8 << 20)
    msg = str(ei.value)
    assert "'ints'" in msg and f"memory budget of {8 << 20} bytes" in msg, msg
    with pytest.raises(ckptfs.InvalidArgumentError):
        ckptfs.load({"w": torch.zeros(4)}, d, max_value_memory=-1)


# ---- ckptfs.dcp.StorageReader under torchrun: dcp.load's reads collective (read once)

@pytest.mark.parametrize("n", [2, 3, 4])
def test_dcp_reader_collective_against_file_system_reader(n, tmp_path):
    """dcp.load with ckptfs's StorageReader (collective reads across the ranks) and with
    FileSystemReader into the same state_dicts (checkpoints saved by 4 ranks; Shard(d),
    Replicate, _StridedShard on 1-D and, at 4 ranks, 2-D meshes and submeshes): every local
    shard equal bit for bit; the plan's reads, summed over the ranks, are the job's needed
    bytes."""
    if not all((FIXTURES / name / "ckpt").is_dir() for name in NAMES):
        pytest.skip("fixtures missing")
    _, res = torchrun(n, "dcp-reader", tmp_path, *NAMES)
    for r in res:
        assert r["checked"] == sum(e.is_tensor for name in NAMES for e in ref(name).entries)
        assert r["strided"] > 0
        assert len(r["placements"]) >= 4, r["placements"]
    if n == 4:
        ps = res[0]["placements"]
        assert any(p.startswith("(2, 2):(_StridedShard") for p in ps), ps
        assert any(p.startswith("(2,):") for p in ps), ps
    for name in NAMES:
        st = [r["stats"][name] for r in res]
        assert sum(s["bytes_read_plan"] for s in st) == st[0]["union_bytes"] > 0
        assert sum(s["bytes_requested"] for s in st) >= st[0]["union_bytes"]


def _strace_ok():
    import shutil
    return shutil.which("strace") and subprocess.run(
        ["strace", "-f", "-e", "trace=none", "true"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _strace_ok(), reason="needs strace (and ptrace allowed)")
def test_dcp_reader_reads_each_byte_once_by_strace(tmp_path):
    """A checkpoint saved by 2 ranks (dcp.save) loaded by dcp.load at 3 into Replicate
    DTensors, every rank under strace: with ckptfs's reader the job's reads of the shard files
    are the needed bytes once, plus the items' container headers (and what the loader
    counted); with FileSystemReader every rank reads all of them."""
    placement = "R"
    sys.path.insert(0, str(HERE.parent / "lib"))
    import strace_io
    d = tmp_path / "ckpt"
    torchrun(2, "dcp-save", tmp_path / "save", d)
    got = {}
    for which in ("ckptfs", "torch"):
        out = tmp_path / which
        out.mkdir()
        trace = out / "trace"
        env = dict(os.environ, OMP_NUM_THREADS="1", CKPT_FIXTURES=str(FIXTURES))
        cmd = strace_io.STRACE + ["--seccomp-bpf", "-o", str(trace), sys.executable, "-m",
                                  "torch.distributed.run", "--standalone", "--nproc-per-node",
                                  "3", str(WORKER), "dcp-bytes", str(out), str(d), which,
                                  placement]
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        res = [json.loads((out / f"rank{r}.json").read_text()) for r in range(3)]
        assert p.returncode == 0 and all(r["ok"] for r in res), \
            "\n".join(r.get("traceback", "") for r in res) + p.stderr[-4000:]
        got[which] = (strace_io.tally(str(trace), str(d)), [r["stats"] for r in res])
    (t_ours, st), (t_torch, _) = got["ckptfs"], got["torch"]
    union = st[0]["union_bytes"]
    assert union > 4 << 20
    assert sum(s["bytes_read_plan"] for s in st) == union
    # the syscalls agree with the loader's counter: the needed bytes, once
    assert t_ours.data_bytes == sum(s["bytes_read"] for s in st)
    assert union <= t_ours.data_bytes <= 1.05 * union, (t_ours.data_bytes, union)
    assert t_torch.data_bytes >= 2.9 * union, (t_torch.data_bytes, union)


def test_dcp_reader_error_on_every_rank(tmp_path):
    """A shard file missing: dcp.load with ckptfs's reader raises on every rank (torch's
    CheckpointException, naming the file), without a hang."""
    import shutil
    src = FIXTURES / "fsdp2_ws4" / "ckpt"
    if not src.is_dir():
        pytest.skip("fixture missing")
    d = tmp_path / "ckpt"
    shutil.copytree(src, d)
    (d / "__2_0.distcp").unlink()
    _, res = torchrun(3, "dcp-fault", tmp_path / "out", d, timeout=240)
    raised = {r["raised"] for r in res}
    assert raised == {"CheckpointException"}, raised
    for r in res:
        assert "__2_0.distcp" in r["message"], r["message"]
