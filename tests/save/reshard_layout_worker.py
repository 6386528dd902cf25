"""reshard_layout_worker.py SRC_PT CKPT_DIR SPEC_OR_MAP_JSON OUT_JSON — real torch as the referee
of `ckpt reshard --layout`: a gloo job of the layout's ranks builds init_device_mesh("cpu",
mesh); every rank makes, for each tensor of SRC_PT (a torch.save'd dict of the original
tensors), a DTensor of zeros with that mesh and the tensor's placements, `dcp.load`s CKPT_DIR
into them, and compares each local tensor bit for bit with distribute_tensor(full, mesh,
placements, src_data_rank=None).to_local() — for the keys whose shards torch's DCP can load
into a DTensor (box_shards).  The layouts: one spec for every key, or (an
argument ending in .json) a map {key: spec} with "*" the default, all of one mesh.  Writes
{rank: {"checked": [keys], "bad": [keys that differ]}} to OUT_JSON."""
import json
import os
import sys
import tempfile
from pathlib import Path

import torch
import torch.multiprocessing as mp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "lib"))
import dtensor_ref  # noqa: E402
from gloo_group import gloo_group  # noqa: E402


def spec_of(layouts, key):
    return layouts.get(key, layouts["*"])


def bits(t):
    return t.contiguous().reshape(-1).view(torch.uint8)


def box_shards(t, spec):
    """Whether every rank's local shard of `t` under `spec` is the one box torch's DCP reads
    for a DTensor (compute_local_shape_and_global_offset's local shape at its global offset):
    a _StridedShard shard of several pieces is not, and torch's dcp.load fills such a DTensor
    from the wrong box (see test_reshard_layout.py)."""
    idx = torch.arange(t.numel()).reshape(t.shape)
    for r in range(dtensor_ref.nranks(spec)):
        shape, off = dtensor_ref.expected_offset(list(t.shape), spec, r)
        box = idx[tuple(slice(o, o + n) for o, n in zip(off, shape))]
        if not torch.equal(box.contiguous(), dtensor_ref.expected_local(idx, spec, r)):
            return False
    return True


def worker(rank, world, src, ckpt, layouts, init, outdir):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import distribute_tensor

    with gloo_group(init_method=init, rank=rank, world_size=world):
        mesh, _ = dtensor_ref.parse_spec(layouts["*"])
        dm = init_device_mesh("cpu", tuple(mesh))
        full = torch.load(src)
        full = {k: t for k, t in full.items() if box_shards(t, spec_of(layouts, k))}
        sd, want = {}, {}
        for k, t in full.items():
            places = dtensor_ref.torch_placements(spec_of(layouts, k), t.dim())
            want[k] = distribute_tensor(t, dm, places, src_data_rank=None).to_local()
            sd[k] = distribute_tensor(torch.zeros_like(t), dm, places, src_data_rank=None)
            # a different value where the load must write (a load that skips a box fails)
            local = sd[k]._local_tensor
            assert local.is_contiguous()
            local.reshape(-1).view(torch.uint8).fill_(0x5A)
            assert local.numel() == 0 or bool((bits(local) == 0x5A).all())
        dcp.load(sd, checkpoint_id=ckpt)
        bad = [k for k in full if sd[k].to_local().shape != want[k].shape
               or not torch.equal(bits(sd[k].to_local()), bits(want[k]))]
        (Path(outdir) / f"{rank}").write_text(json.dumps({"checked": sorted(full), "bad": bad}))


def main():
    src, ckpt, lay, out = sys.argv[1:5]
    layouts = json.loads(Path(lay).read_text()) if lay.endswith(".json") else {"*": lay}
    world = dtensor_ref.nranks(layouts["*"])
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(world, src, ckpt, layouts, "file://" + os.path.join(tmp, "init"),
                               tmp), nprocs=world, join=True)
        res = {r: json.loads((Path(tmp) / f"{r}").read_text()) for r in range(world)}
    Path(out).write_text(json.dumps(res))


if __name__ == "__main__":
    main()
