"""One rank of a torchrun job for test_load.py (started by `python -m torch.distributed.run
--standalone --nproc-per-node N load_worker.py MODE OUTDIR ARGS...`; gloo on the CPU).

  layouts OUTDIR FIXTURE...   every tensor of each fixture into a DTensor (placements cycled
                              over the keys: Shard(d), Replicate, _StridedShard on 1-D and 2-D
                              meshes and submeshes) or a plain tensor, in a nested state_dict,
                              with ckptfs.load; compared bit for bit with torch's dcp.load
                              (FileSystemReader) into the same state_dict and with
                              distribute_tensor(reference, src_data_rank=None).to_local()
  replicated OUTDIR           a checkpoint the job saves (dcp.save), loaded with every tensor
                              Replicate: collective and independent byte counters
  fsdp-save OUTDIR DIR        FSDP2 model + AdamW, one step, saved with dcp.save into DIR
  fsdp-load OUTDIR DIR        resumed at this world size by ckptfs.load and by dcp.load
                              (get_state_dict / set_state_dict): equal shards, values, and
                              parameters after one more step
  dcp-reader OUTDIR FIXTURE... the layouts' state_dicts loaded by dcp.load with ckptfs's
                              StorageReader (collective reads) and with FileSystemReader: every
                              local shard equal bit for bit (and to the reference where DCP's
                              planner places it: not 1-D _StridedShard)
  dcp-save OUTDIR DIR         saved() into DIR
  dcp-bytes OUTDIR DIR READER PLACEMENT
                              DIR (dcp-save's) loaded by dcp.load with READER (ckptfs, torch)
                              into R or S0 DTensors: each checked against the saved values
  dcp-fault OUTDIR DIR        dcp.load with ckptfs's reader of DIR, which lacks a shard file:
                              every rank records what it raised
  fault OUTDIR KIND DIR       KIND: path (rank 1 loads a directory that does not exist),
                              key (rank 0's state_dict has a key the checkpoint lacks), shard
                              (DIR lacks a shard file), shape (rank N-1's destination is of the
                              wrong shape); every rank records what it raised

Each rank writes OUTDIR/rank<r>.json."""

import datetime
import json
import os
import sys
import traceback
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import bits, ref  # noqa: E402


def nest(flat):
    """{"model.a.b": x} -> {"model": {"a.b": x}} (flattened back to the same keys, as DCP
    flattens get_state_dict's {"model": ..., "optim": ...})."""
    out = {}
    for k, v in flat.items():
        top, _, rest = k.partition(".")
        if rest:
            out.setdefault(top, {})[rest] = v
        else:
            out[k] = v
    return out


def flat_get(sd, key):
    top, _, rest = key.partition(".")
    return sd[top][rest] if rest and isinstance(sd.get(top), dict) else sd[key]


def configs(world):
    """(mesh name, mesh shape, placements) cycled over the keys."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.placement_types import _StridedShard
    if world == 4:
        return [("2d", [Shard(0), Shard(1)]), ("2d", [_StridedShard(0, split_factor=2), Shard(0)]),
                ("2d", [Replicate(), Shard(0)]), ("2d", [Shard(1), Replicate()]),
                ("dp", [Shard(0)]), ("2d", [Shard(0), Shard(0)]), ("plain", None),
                ("1d", [_StridedShard(0, split_factor=2)]), ("tp", [Shard(1)])]
    return [("1d", [Shard(0)]), ("1d", [Shard(1)]), ("1d", [Replicate()]), ("plain", None),
            ("1d", [_StridedShard(0, split_factor=2)]), ("1d", [Shard(0)])]


def meshes(world):
    from torch.distributed.device_mesh import init_device_mesh
    m = {"1d": init_device_mesh("cpu", (world,))}
    if world == 4:
        m["2d"] = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        m["dp"], m["tp"] = m["2d"]["dp"], m["2d"]["tp"]
    return m


def valid(placements, ndim):
    return all(getattr(p, "dim", 0) < ndim for p in placements)


def build(r, world, ms, fill):
    """The flat state_dict: tensor -> DTensor or plain tensor (filled with `fill`), value ->
    None; and the layout of each key."""
    from torch.distributed.tensor import distribute_tensor
    cfg = configs(world)
    flat, how = {}, {}
    for i, e in enumerate(r.entries):
        if not e.is_tensor:
            flat[e.key] = None
            continue
        dt = getattr(torch, e.dtype)
        full = torch.full(e.shape, fill, dtype=dt) if e.shape else torch.full((), fill, dtype=dt)
        c = None
        for j in range(len(cfg)):
            name, pl = cfg[(i + j) % len(cfg)]
            if name == "plain" or (e.shape and valid(pl, len(e.shape))):
                c = (name, pl)
                break
        if c is None or c[0] == "plain":
            flat[e.key], how[e.key] = full, None
        else:
            flat[e.key] = distribute_tensor(full, ms[c[0]], c[1], src_data_rank=None)
            how[e.key] = c
    return flat, how


def strided(pl):
    return pl is not None and any(type(p).__name__ == "_StridedShard" for p in pl[1])


def check_layouts(rank, world, names, out):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.tensor import DTensor, distribute_tensor

    import ckptfs
    ms = meshes(world)
    res = {"checked": 0, "strided": 0, "placements": set(), "stats": {}}
    for name in names:
        r = ref(name)
        flat, how = build(r, world, ms, 7)
        ours = nest(flat)
        st = ckptfs.load(ours, r.dir)
        res["stats"][name] = st.as_dict()
        # torch's loader into the same state_dict (but _StridedShard keys: DCP reads one box
        # per DTensor, which a strided shard is not; those are checked against distribute_tensor)
        tflat, _ = build(r, world, ms, 7)
        theirs = nest({k: v for k, v in tflat.items() if not strided(how.get(k))})
        dcp.load(theirs, storage_reader=FileSystemReader(str(r.dir)))
        for e in r.entries:
            a = flat_get(ours, e.key)
            if not e.is_tensor:
                b = flat_get(theirs, e.key)
                assert a == b, (name, e.key, a, b)
                continue
            full = r.tensor(e)
            if isinstance(a, DTensor):
                la = a.to_local()
                want = distribute_tensor(full, a.device_mesh, a.placements,
                                         src_data_rank=None).to_local()
                assert la.shape == want.shape, (name, e.key, la.shape, want.shape)
                assert bits(la) == bits(want), (rank, name, e.key, how[e.key])
                res["placements"].add(f"{tuple(a.device_mesh.shape)}:{a.placements}")
                if strided(how[e.key]):
                    res["strided"] += 1
                else:
                    b = flat_get(theirs, e.key)
                    assert bits(la) == bits(b.to_local()), (rank, name, e.key, how[e.key])
            else:
                assert bits(a) == bits(full) == bits(flat_get(theirs, e.key)), (name, e.key)
            res["checked"] += 1
    res["placements"] = sorted(res["placements"])
    return res


def check_dcp_reader(rank, world, names):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.tensor import DTensor, distribute_tensor

    from ckptfs.dcp import StorageReader
    ms = meshes(world)
    res = {"checked": 0, "strided": 0, "placements": set(), "stats": {}}
    for name in names:
        r = ref(name)
        flat, how = build(r, world, ms, 7)
        ours = nest(flat)
        reader = StorageReader(r.dir)
        dcp.load(ours, storage_reader=reader)
        assert reader.stats is not None, "the reads were not collective"
        res["stats"][name] = reader.stats.as_dict()
        theirs = nest(build(r, world, ms, 7)[0])
        dcp.load(theirs, storage_reader=FileSystemReader(str(r.dir)))
        for e in r.entries:
            a, b = flat_get(ours, e.key), flat_get(theirs, e.key)
            if not e.is_tensor:
                assert a == b, (name, e.key, a, b)
                continue
            if isinstance(a, DTensor):
                la = a.to_local()
                assert bits(la) == bits(b.to_local()), (rank, name, e.key, how[e.key])
                res["placements"].add(f"{tuple(a.device_mesh.shape)}:{a.placements}")
                if strided(how[e.key]):
                    res["strided"] += 1
                if not (strided(how[e.key]) and a.device_mesh.ndim == 1):
                    want = distribute_tensor(r.tensor(e), a.device_mesh, a.placements,
                                             src_data_rank=None).to_local()
                    assert bits(la) == bits(want), (rank, name, e.key, how[e.key])
            else:
                assert bits(a) == bits(b) == bits(r.tensor(e)), (name, e.key)
            res["checked"] += 1
    res["placements"] = sorted(res["placements"])
    return res


def check_dcp_bytes(world, d, which, placement):
    """One dcp.load of saved()'s checkpoint (run under strace by the test)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    from ckptfs.dcp import StorageReader
    ms = meshes(world)
    g = torch.Generator().manual_seed(1234)
    full = saved_tensors(g)
    pl = {"R": Replicate(), "S0": Shard(0)}[placement]
    sd = {k: distribute_tensor(torch.zeros_like(v), ms["1d"], [pl], src_data_rank=None)
          for k, v in full.items()}
    reader = StorageReader(d) if which == "ckptfs" else FileSystemReader(d)
    dcp.load(sd, storage_reader=reader)
    for k, v in full.items():
        want = distribute_tensor(v, ms["1d"], [pl], src_data_rank=None).to_local()
        assert bits(sd[k].to_local()) == bits(want), (which, k)
    return {"stats": reader.stats.as_dict() if which == "ckptfs" else None}


def dcp_fault(world, d):
    import torch.distributed.checkpoint as dcp

    from ckptfs.dcp import StorageReader
    r = ref("fsdp2_ws4")
    flat, _ = build(r, world, meshes(world), 0)
    try:
        dcp.load(nest(flat), storage_reader=StorageReader(d))
    except BaseException as e:  # (torch's CheckpointException is a BaseException)
        return {"raised": type(e).__name__, "message": str(e)}
    return {"raised": None}


def saved_tensors(g):
    full = {f"w{i}": torch.randn(4000 + 37 * i, 96, generator=g) for i in range(3)}
    full["b"] = torch.randn(4096, generator=g).to(torch.bfloat16)
    return full


def saved(world, out, d=None):
    """A checkpoint this job saves with dcp.save (Shard(0) DTensors, big enough that the
    per-item container headers are small beside the data): its directory and full tensors."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.tensor import Shard, distribute_tensor
    ms = meshes(world)
    full = saved_tensors(torch.Generator().manual_seed(1234))
    sd = {k: distribute_tensor(v, ms["1d"], [Shard(0)], src_data_rank=None)
          for k, v in full.items()}
    d = d or out / "saved"
    dcp.save(sd, checkpoint_id=str(d))
    dist.barrier()
    return d, full


def check_replicated(world, out):
    """Every tensor Replicate (each rank needs every byte): the collective load reads each
    stored byte once across the job, the independent one once per rank."""
    from torch.distributed.tensor import Replicate, distribute_tensor

    import ckptfs
    ms = meshes(world)
    d, full = saved(world, out)
    res = {}
    for mode in ("collective", "independent"):
        sd = {k: distribute_tensor(torch.zeros_like(v), ms["1d"], [Replicate()],
                                   src_data_rank=None) for k, v in full.items()}
        st = ckptfs.load(sd, d, mode=mode)
        for k, v in full.items():
            assert bits(sd[k].to_local()) == bits(v), (mode, k)
        res[mode] = st.as_dict()
    return res


def fsdp_model(world, seed):
    """A small model under FSDP2 (fully_shard per layer and at the root) over all ranks, and
    its AdamW."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(24, 37), torch.nn.ReLU(),
                                torch.nn.Linear(37, 11), torch.nn.LayerNorm(11))
    mesh = init_device_mesh("cpu", (world,))
    for m in (model[0], model[2]):
        fully_shard(m, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)


def fsdp_step(model, opt, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(8, 24, generator=g)
    model(x).square().mean().backward()
    opt.step()
    opt.zero_grad()


def check_fsdp_save(world, d):
    """Trains a step under FSDP2 at this world size and saves model + AdamW with dcp.save."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    model, opt = fsdp_model(world, 0)
    fsdp_step(model, opt, 1)
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=str(d))
    return {}


def local_bits(v):
    from torch.distributed.tensor import DTensor
    return bits(v.to_local() if isinstance(v, DTensor) else v)


def check_fsdp_load(rank, world, d):
    """Resumes at this world size: ckptfs.load and torch's dcp.load into the state_dicts of
    two fresh FSDP2 models (get_state_dict, then set_state_dict); every local shard and value
    equal; after one more step, the same parameters."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    import ckptfs
    out = {}
    runs = []
    for how in ("ckptfs", "torch"):
        model, opt = fsdp_model(world, 99)
        msd, osd = get_state_dict(model, opt)
        sd = {"model": msd, "optim": osd}
        if how == "ckptfs":
            out["stats"] = ckptfs.load(sd, d).as_dict()
        else:
            dcp.load(sd, storage_reader=FileSystemReader(str(d)))
        set_state_dict(model, opt, model_state_dict=msd, optim_state_dict=osd)
        runs.append((model, opt, flatten_state_dict(sd)[0]))
    (_, _, a), (_, _, b) = runs
    assert list(a) == list(b)
    n = 0
    for k in a:
        if isinstance(a[k], torch.Tensor):
            assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape, k
            assert local_bits(a[k]) == local_bits(b[k]), (rank, k)
            n += 1
        else:
            assert a[k] == b[k], (k, a[k], b[k])
    for model, opt, _ in runs:
        fsdp_step(model, opt, 2)
    pa = [local_bits(p) for p in runs[0][0].parameters()]
    pb = [local_bits(p) for p in runs[1][0].parameters()]
    assert pa == pb, rank
    out["tensors"] = n
    return out


def fault(rank, world, kind, d):
    import ckptfs
    r = ref("fsdp2_ws4")
    ms = meshes(world)
    flat, _ = build(r, world, ms, 0)
    path = d
    if kind == "path" and rank == 1:
        path = d + "-does-not-exist"
    if kind == "key" and rank == 0:
        flat["model.no_such_weight"] = torch.zeros(3)
    if kind == "shape" and rank == world - 1:
        flat["model.tok_embeddings.weight"] = torch.zeros(2, 2)
    try:
        ckptfs.load(nest(flat), path)
    except ckptfs.CkptError as e:
        return {"raised": type(e).__name__, "status": e.status, "message": str(e)}
    return {"raised": None}


def main():
    mode, out = sys.argv[1], Path(sys.argv[2])
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    res = {"rank": rank, "world": world}
    try:
        if mode == "layouts":
            res.update(check_layouts(rank, world, sys.argv[3:], out))
        elif mode == "replicated":
            res.update(check_replicated(world, out))
        elif mode == "fsdp-save":
            res.update(check_fsdp_save(world, Path(sys.argv[3])))
        elif mode == "fsdp-load":
            res.update(check_fsdp_load(rank, world, Path(sys.argv[3])))
        elif mode == "dcp-reader":
            res.update(check_dcp_reader(rank, world, sys.argv[3:]))
        elif mode == "dcp-save":
            saved(world, out, Path(sys.argv[3]))
        elif mode == "dcp-bytes":
            res.update(check_dcp_bytes(world, sys.argv[3], sys.argv[4], sys.argv[5]))
        elif mode == "dcp-fault":
            res.update(dcp_fault(world, sys.argv[3]))
        elif mode == "fault":
            res.update(fault(rank, world, sys.argv[3], sys.argv[4]))
        res["ok"] = True
    except BaseException:
        res["ok"] = False
        res["traceback"] = traceback.format_exc()
    (out / f"rank{rank}.json").write_text(json.dumps(res, indent=1, default=str))
    # leave together, and without the process group's teardown: when one rank's sockets close
    # while a peer is still in destroy_process_group, gloo's threads may std::terminate the
    # peer (seen once under load), which would fail a test whose every rank did its job
    try:
        dist.barrier()
    except Exception:
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if res["ok"] else 1)


if __name__ == "__main__":
    main()
