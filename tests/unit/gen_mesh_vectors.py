"""gen_mesh_vectors.py — writes mesh_vectors (test_mesh.c's expectations) with real torch.

For every (mesh, spec, shape) below, one gloo job of prod(mesh) processes builds
init_device_mesh("cpu", mesh) and takes distribute_tensor(arange(numel).reshape(shape), mesh,
placements, src_data_rank=None).to_local() on every rank (placements whose dim is not a dim of
the tensor are Replicate(): our documented rule where torch refuses), with
compute_local_shape_and_global_offset; the element indices each rank holds are checked against
tests/lib/dtensor_ref.py (torch's splitting code without a process group) and written as
lines

    <spec> <shape> <rank> <local shape> <global offset> <held indices as runs a-b>

(shapes comma-separated, `-` for 0-d; indices `-` when none).  Run: python3 gen_mesh_vectors.py
OUT (takes a minute)."""
import os
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import dtensor_ref  # noqa: E402
from gloo_group import gloo_group  # noqa: E402

SHAPES = [(8, 3), (7,), (5,), (3,), (1,), (0,), (0, 4), (4, 0), (10, 6), (13, 5), (2, 3, 4),
          (9, 4, 6), (6, 7), ()]
SPECS = {
    (2,): ["2:S0", "2:S1", "2:S2", "2:R", "2:S0s2", "2:S0s3", "2:S1s2", "2:S2s2", "dim1-of-2"],
    (3,): ["3:S0", "3:S0s2", "3:S1s3", "3:S1"],
    (5,): ["5:S0", "5:S1", "5:S0s2", "5:S2s3"],
    (2, 2): ["2x2:S0,S1", "2x2:S0s2,S0", "2x2:S0,S0", "2x2:S1,S1", "2x2:S1s2,S1", "2x2:R,S0",
             "2x2:S0,R", "2x2:S0s2,S1", "2x2:S1,S0s2", "2x2:S0s3,S0", "2x2:S0s2,S0s2",
             "2x2:S1,S0"],
    (2, 3): ["2x3:R,S0", "2x3:S0,S1", "2x3:S0s3,S0", "2x3:S1,S1", "2x3:S0s2,S1s2", "2x3:S2,S0"],
    (3, 2): ["3x2:S1,R", "3x2:S0,S0", "3x2:S0s2,S0", "3x2:S1s2,S1", "3x2:S1s2,S0"],
    (2, 2, 2): ["2x2x2:S0,S1,S2", "2x2x2:S0s4,S0s2,S0", "2x2x2:R,S0,S0", "2x2x2:S0s2,S0,S1",
                "2x2x2:S1,S0s2,S0"],
}


def worker(rank, world, mesh, init, outdir):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import distribute_tensor
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    with gloo_group(init_method=init, rank=rank, world_size=world):
        dm = init_device_mesh("cpu", mesh)
        lines = []
        for spec in SPECS[mesh]:
            for shape in SHAPES:
                numel = 1
                for s in shape:
                    numel *= s
                full = torch.arange(numel).reshape(shape)
                places = dtensor_ref.torch_placements(spec, len(shape))
                local = distribute_tensor(full, dm, places, src_data_rank=None).to_local()
                ls, off = compute_local_shape_and_global_offset(list(shape), dm, places)
                lines.append((spec, shape, list(local.shape), list(ls), list(off),
                              local.reshape(-1).tolist()))
        torch.save(lines, os.path.join(outdir, f"{rank}.pt"))


def runs(idx):
    out, i = [], 0
    while i < len(idx):
        j = i
        while j + 1 < len(idx) and idx[j + 1] == idx[j] + 1:
            j += 1
        out.append(f"{idx[i]}-{idx[j]}" if j > i else f"{idx[i]}")
        i = j + 1
    return ",".join(out) or "-"


def fmt(shape):
    return ",".join(str(x) for x in shape) or "-"


def main():
    out = []
    for mesh in SPECS:
        world = 1
        for m in mesh:
            world *= m
        with tempfile.TemporaryDirectory() as tmp:
            init = "file://" + os.path.join(tmp, "init")
            mp.spawn(worker, args=(world, mesh, init, tmp), nprocs=world, join=True)
            per_rank = [torch.load(os.path.join(tmp, f"{r}.pt")) for r in range(world)]
        for k in range(len(per_rank[0])):
            for r in range(world):
                spec, shape, lshape, ls, off, idx = per_rank[r][k]
                assert lshape == ls, (spec, shape, r, lshape, ls)
                numel = 1
                for s in shape:
                    numel *= s
                full = torch.arange(numel).reshape(shape)
                ref = dtensor_ref.expected_local(full, spec, r)
                assert list(ref.shape) == lshape and ref.reshape(-1).tolist() == idx, (spec, shape, r)
                assert dtensor_ref.expected_offset(shape, spec, r) == (ls, off), (spec, shape, r)
                out.append(f"{spec} {fmt(shape)} {r} {fmt(lshape)} {fmt(off)} {runs(idx)}\n")
    with open(sys.argv[1], "w") as f:
        f.writelines(out)
    print(f"{len(out)} vectors")


if __name__ == "__main__":
    main()
