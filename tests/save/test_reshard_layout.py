"""`ckpt reshard --layout SPEC` / `--layout-map F`: a checkpoint written for a DTensor mesh layout,
one process and under mpirun, with real torch as the referee.

The source is a checkpoint torch's `dcp.save` wrote (uneven and empty shards, 0-d, 1-D tensors
that a Shard(1) replicates, a zero-element tensor, bfloat16, a non-tensor value).  After a
reshard to each of the layouts the issue names (2x2:S0,S1, 2x2:S0s2,S0, 2x3:R,S0, 3x2:S1,R,
2:S0s2, 5:S0) and to a per-key map mixing them:
  * the stored chunks of every tensor, per rank file, are exactly what that rank's DTensor
    local shard is made of — computed here with torch's own splitting code
    (tests/lib/dtensor_ref.py): the maximal runs of global indices along each dim, their
    product one chunk each (a _StridedShard shard of several pieces is several chunks); a
    replica only in the file of the lowest rank holding it; empty shards nowhere (of a
    zero-element tensor: rank 0's box and the boxes not empty along a sharded dim);
  * the one-process and the MPI reshard write the same chunks;
  * torch's `dcp.load` into plain tensors gives every tensor bit for bit;
  * a gloo job of the layout's ranks `dcp.load`s it into DTensors of that mesh and those
    placements and every rank holds exactly distribute_tensor(full, mesh, placements,
    src_data_rank=None).to_local() (reshard_layout_worker.py).  Torch's DCP reads one box per
    DTensor (compute_local_shape_and_global_offset), so a DTensor whose shard is several boxes
    (2:S0s2 on 8 rows: rows 2, 3, 6, 7) it cannot fill right from any checkpoint; those keys
    are checked through the chunk lists and the plain load, and the test checks that exactly
    they are the ones left out.
Environment: CKPT_BIN.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.distributed.checkpoint as dcp  # noqa: E402
from torch.distributed.checkpoint import FileSystemReader  # noqa: E402
from torch.distributed.checkpoint.metadata import MetadataIndex, TensorStorageMetadata  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "lib"))
sys.path.insert(0, str(HERE))
import dtensor_ref  # noqa: E402
from reshard_layout_worker import box_shards  # noqa: E402

CKPT = os.environ.get("CKPT_BIN", "")
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]
pytestmark = pytest.mark.skipif(not CKPT, reason="CKPT_BIN not set")
LEAK_ASAN = os.environ.get("CKPT_LEAK_ASAN_OPTIONS")

MAP = {"*": "2x2:S0,S1", "w": "2x2:S0s2,S0", "v": "2x2:R,S0", "bf": "2x2:S1,R",
       "odd": "4:S1s2"}


def has_mpi():
    p = subprocess.run([CKPT, "--help"], capture_output=True, text=True)
    return "\n  load " in p.stdout


def tensors():
    g = torch.Generator().manual_seed(20)
    return {
        "w": torch.randn(8, 6, generator=g),
        "odd": torch.randn(7, 5, generator=g),
        "v": torch.arange(10, dtype=torch.int64),
        "tiny": torch.randn(1, 3, generator=g),  # empty shards under 5:S0, 2x2:S0,S1
        "bf": torch.randn(5, 6, 2, generator=g).to(torch.bfloat16),
        "s": torch.tensor(3.5, dtype=torch.float64),
        "e": torch.zeros(0, 4),
        "i8": torch.arange(-30, 30, dtype=torch.int8).reshape(3, 20),
    }


@pytest.fixture(scope="module")
def src(tmp_path_factory):
    d = tmp_path_factory.mktemp("src")
    full = tensors()
    dcp.save(dict(full, step=7), checkpoint_id=str(d / "ckpt"), no_dist=True)
    torch.save(full, d / "full.pt")
    return d


def layouts(lay):
    return dict(lay) if isinstance(lay, dict) else {"*": lay}


def run_reshard(src, dst, lay, mpi, tmp, extra=(), leak=False):
    opts = ["--layout-map", str(tmp / "map.json")] if isinstance(lay, dict) else ["--layout", lay]
    if isinstance(lay, dict):
        (tmp / "map.json").write_text(json.dumps(lay))
    m = dtensor_ref.nranks(layouts(lay)["*"])
    cmd = ([*MPIRUN, "-np", str(m), CKPT, "reshard", "--budget", "256"] if mpi
           else [CKPT, "reshard"] + (["--ranks", str(m)] if isinstance(lay, dict) else []))
    cmd += ["--no-fsync", *opts, *extra, str(src / "ckpt"), str(dst)]
    env = dict(os.environ, ASAN_OPTIONS=LEAK_ASAN) if leak and LEAK_ASAN else None
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)


def runs(seq):
    """Maximal runs of consecutive values of an increasing list: [(start, count)]."""
    out = []
    for v in seq:
        if out and out[-1][0] + out[-1][1] == v:
            out[-1][1] += 1
        else:
            out.append([v, 1])
    return [tuple(r) for r in out]


def expected_chunks(t, spec):
    """{(offsets, sizes, file)} of tensor t under spec, from torch's splitting code."""
    mesh, places = dtensor_ref.parse_spec(spec)
    nd, shape = t.dim(), list(t.shape)
    sharded = {d for kind, d, _ in places if kind != "R" and d < nd}
    out = set()
    for r in range(dtensor_ref.nranks(spec)):
        coord = dtensor_ref.coord_of(mesh, r)
        if any(c and (kind == "R" or d >= nd) for c, (kind, d, _) in zip(coord, places)):
            continue  # a replica a lower rank stores
        if t.numel() == 0:
            # no elements: rank 0's box, and the boxes not empty along a sharded dim
            local, off = dtensor_ref.expected_offset(shape, spec, r)
            if r == 0 or all(local[d] for d in sharded):
                out.add((tuple(off), tuple(local), f"__{r}_0.distcp"))
            continue
        per_dim = []
        for d in range(nd):
            view = [1] * nd
            view[d] = shape[d]
            idx = torch.arange(shape[d]).reshape(view).expand(shape).contiguous()
            local = dtensor_ref.expected_local(idx, spec, r)
            if local.numel() == 0:
                break
            line = local[tuple(slice(None) if k == d else 0 for k in range(nd))]
            per_dim.append(runs(line.tolist()))
        else:
            boxes = [((), ())]
            for rs in per_dim:
                boxes = [(o + (s,), z + (n,)) for o, z in boxes for s, n in rs]
            out |= {(o, z, f"__{r}_0.distcp") for o, z in boxes}
    return out


def stored_chunks(dst):
    md = FileSystemReader(str(dst)).read_metadata()
    res = {}
    for k, v in md.state_dict_metadata.items():
        if isinstance(v, TensorStorageMetadata):
            res[k] = {(tuple(c.offsets), tuple(c.sizes),
                       md.storage_data[MetadataIndex(k, c.offsets)].relative_path)
                      for c in v.chunks}
    return res


def bits(t):
    return t.contiguous().reshape(-1).view(torch.uint8)


def check_plain_load(dst, full):
    sd = {k: torch.full_like(t, 7) if t.dtype != torch.bool else torch.ones_like(t)
          for k, t in full.items()}
    sd["step"] = 0
    dcp.load(sd, checkpoint_id=str(dst), no_dist=True)
    for k, t in full.items():
        assert torch.equal(bits(sd[k]), bits(t)), k
    assert sd["step"] == 7


def check(dst, lay, full):
    got = stored_chunks(dst)
    assert set(got) == set(full)
    for k, t in full.items():
        assert got[k] == expected_chunks(t, layouts(lay).get(k, layouts(lay)["*"])), k
    check_plain_load(dst, full)
    return got


def referee(src, dst, lay, tmp):
    """The gloo job: every rank's DTensor after torch's dcp.load."""
    arg = str(tmp / "lay.json") if isinstance(lay, dict) else lay
    if isinstance(lay, dict):
        (tmp / "lay.json").write_text(json.dumps(lay))
    out = tmp / "referee.json"
    p = subprocess.run([sys.executable, str(HERE / "reshard_layout_worker.py"),
                        str(src / "full.pt"), str(dst), arg, str(out)],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(out.read_text())


CASES = dtensor_ref.SPECS + ["map"]


@pytest.mark.parametrize("case", CASES)
def test_reshard_layout_equals_dtensor(src, tmp_path, case):
    lay = MAP if case == "map" else case
    full = tensors()
    one = tmp_path / "one"
    r = run_reshard(src, one, lay, False, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    chunks = check(one, lay, full)
    if has_mpi():
        mpi = tmp_path / "mpi"
        r = run_reshard(src, mpi, lay, True, tmp_path, leak=case == "2x2:S0s2,S0")
        assert r.returncode == 0, r.stdout + r.stderr
        assert check(mpi, lay, full) == chunks
    res = referee(src, one, lay, tmp_path)
    lays = layouts(lay)
    boxes = sorted(k for k, t in full.items() if box_shards(t, lays.get(k, lays["*"])))
    assert len(res) == dtensor_ref.nranks(lays["*"])
    for rank, v in res.items():
        assert v["checked"] == boxes and not v["bad"], (rank, v)


def test_strided_keys_left_to_the_chunk_check():
    """The keys the DTensor referee leaves out are the non-box _StridedShard ones, no more."""
    full = tensors()
    assert [k for k, t in full.items() if not box_shards(t, "2:S0s2")] == \
        ["w", "odd", "v", "bf", "i8"]
    assert all(box_shards(t, "2x2:S0s2,S0") for t in full.values())
    assert all(box_shards(t, s) for s in ("2x2:S0,S1", "2x3:R,S0", "3x2:S1,R", "5:S0")
               for t in full.values())


def test_strided_shard_is_several_chunks(src, tmp_path):
    """2:S0s2 on [8, 6]: rank 1 holds rows 2-3 and 6-7, stored as two chunks in its file."""
    r = run_reshard(src, tmp_path / "d", "2:S0s2", False, tmp_path)
    assert r.returncode == 0, r.stderr
    assert stored_chunks(tmp_path / "d")["w"] == {
        ((0, 0), (2, 6), "__0_0.distcp"), ((4, 0), (2, 6), "__0_0.distcp"),
        ((2, 0), (2, 6), "__1_0.distcp"), ((6, 0), (2, 6), "__1_0.distcp")}


@pytest.mark.parametrize("args,msg", [
    (["--ranks", "3", "--layout", "2x2:S0,S1"], "has 4 ranks"),
    (["--layout", "2x2:S0,Q"], "--layout '2x2:S0,Q'"),
    (["--layout", "dim99"], "--layout 'dim99'"),
])
def test_bad_layouts_are_usage_errors(src, tmp_path, args, msg):
    r = subprocess.run([CKPT, "reshard", "--no-fsync", *args, str(src / "ckpt"),
                        str(tmp_path / "d")], capture_output=True, text=True)
    assert r.returncode == 2 and msg in r.stderr, r.stderr
    assert not (tmp_path / "d").exists()


def test_map_of_other_ranks_is_a_usage_error(src, tmp_path):
    (tmp_path / "m.json").write_text(json.dumps({"*": "2x2:S0,S1", "w": "3:S0"}))
    r = subprocess.run([CKPT, "reshard", "--no-fsync", "--ranks", "4", "--layout-map",
                        str(tmp_path / "m.json"), str(src / "ckpt"), str(tmp_path / "d")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "'w'" in r.stderr, r.stderr
    assert not (tmp_path / "d").exists()


def test_mpi_layout_of_other_ranks_is_a_usage_error(src, tmp_path):
    if not has_mpi():
        pytest.skip("ckpt built without MPI")
    r = subprocess.run([*MPIRUN, "-np", "3", CKPT, "reshard", "--no-fsync", "--layout",
                        "2x2:S0,S1", str(src / "ckpt"), str(tmp_path / "d")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "give -np 4" in r.stderr, r.stderr
    assert not (tmp_path / "d").exists()
