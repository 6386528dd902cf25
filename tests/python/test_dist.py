"""Two processes (gloo, CPU) load a checkpoint saved by 4 ranks into DTensor destinations
(Shard(0) and Shard(1) over a 2-rank mesh) with ckptfs.dcp.StorageReader and with torch's
FileSystemReader: every local shard equal bit for bit, and equal to the reference."""

import os
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import bits, ref  # noqa: E402

WORLD = 2


def dest(ck, mesh):
    from torch.distributed.tensor import Shard, distribute_tensor
    sd = {}
    for i, e in enumerate(ck):
        if not e.is_tensor:
            sd[e.key] = None
        elif e.ndim == 0:
            sd[e.key] = torch.zeros((), dtype=e.dtype)
        else:
            dim = 1 if (e.ndim == 2 and i % 2) else 0  # Shard(1): strided local views
            full = torch.zeros(e.shape, dtype=e.dtype)
            sd[e.key] = distribute_tensor(full, mesh, [Shard(dim)], src_data_rank=None)
    return sd


def worker(rank, store_file, name):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor

    import ckptfs
    from ckptfs.dcp import StorageReader
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank,
                            world_size=WORLD)
    try:
        mesh = init_device_mesh("cpu", (WORLD,))
        r = ref(name)
        with ckptfs.open(r.dir) as ck:
            ours, theirs = dest(ck, mesh), dest(ck, mesh)
        dcp.load(ours, storage_reader=StorageReader(r.dir))
        dcp.load(theirs, storage_reader=FileSystemReader(r.dir))
        n = 0
        for re_ in r.entries:
            a, b = ours[re_.key], theirs[re_.key]
            if not re_.is_tensor:
                assert a == b, (re_.key, a, b)
                continue
            if isinstance(a, DTensor):
                la, lb = a.to_local(), b.to_local()
                assert bits(la) == bits(lb), (rank, re_.key)
                assert bits(a.full_tensor()) == bits(r.tensor(re_)), (rank, re_.key)
                n += 1
            else:
                assert bits(a) == bits(b) == bits(r.tensor(re_)), (rank, re_.key)
        assert n > 10
        # both ranks past their last collective before either tears gloo down: a rank that
        # exits while its peer still tears down can abort the peer ("terminate called
        # without an active exception", seen once in 60 runs)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    # every check passed: leave without the interpreter's finalization, where gloo's worker
    # threads can still abort the process (pytorch PR 179291 describes that SIGABRT)
    os._exit(0)


@pytest.mark.parametrize("name", ["fsdp2_ws4", "hsdp"])
def test_two_ranks_into_dtensors(name, tmp_path):
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(worker, args=(str(tmp_path / "store"), name), nprocs=WORLD, join=True)
