"""dtensor_referee.py FIXTURE SPEC DUMPDIR — checks `ckpt load --layout SPEC --dump DUMPDIR`
against real DTensor: a gloo job of the mesh's size builds init_device_mesh("cpu", mesh), and
every rank compares distribute_tensor(t, mesh, placements, src_data_rank=None).to_local() of
each fixture tensor (read as bytes: a uint8 tensor with the element's bytes as a last dim,
which no placement names) with DUMPDIR/rank<k>/<path>.  Prints "ok N" (tensors checked)."""
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "lib"))
import dtensor_ref  # noqa: E402
from gloo_group import gloo_group  # noqa: E402

ITEM = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int8": 1, "int16": 2,
        "int32": 4, "int64": 8, "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8, "bool": 1,
        "complex64": 8, "complex128": 16}


def reference(fx: Path):
    blob = (fx / "reference.bin").read_bytes()
    for line in (fx / "reference.tsv").read_text().splitlines():
        f = line.split("\t")
        if f[0] != "T" or "%" in f[6] or f[2] not in ITEM:
            continue
        shape = tuple(int(x) for x in f[3].split(",")) if f[3] else ()
        yield f[6], f[2], shape, blob[int(f[4]):int(f[4]) + int(f[5])]


def worker(rank, world, fx, spec, dump, init, outdir):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import distribute_tensor

    with gloo_group(init_method=init, rank=rank, world_size=world):
        mesh, _ = dtensor_ref.parse_spec(spec)
        dm = init_device_mesh("cpu", tuple(mesh))
        n, bad = 0, []
        for path, dtype, shape, raw in reference(Path(fx)):
            full = torch.from_numpy(
                np.frombuffer(raw, dtype=np.uint8).copy().reshape(*shape, ITEM[dtype]))
            places = dtensor_ref.torch_placements(spec, len(shape))
            local = distribute_tensor(full, dm, places, src_data_rank=None).to_local()
            got = (Path(dump) / f"rank{rank}" / path).read_bytes()
            if got != local.contiguous().numpy().tobytes():
                bad.append(path)
            n += 1
        (Path(outdir) / f"{rank}").write_text(f"{n} {' '.join(bad)}")


def main():
    fx, spec, dump = sys.argv[1:4]
    mesh, _ = dtensor_ref.parse_spec(spec)
    world = 1
    for m in mesh:
        world *= m
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(world, fx, spec, dump, "file://" + os.path.join(tmp, "init"), tmp),
                 nprocs=world, join=True)
        total = 0
        for r in range(world):
            n, *bad = (Path(tmp) / f"{r}").read_text().split()
            if bad:
                print(f"rank {r}: differ from DTensor: {bad}")
                sys.exit(1)
            total += int(n)
    print(f"ok {total}")


if __name__ == "__main__":
    main()
