"""layout_example_driver.py MOUNT [SPEC] — run under torchrun (gloo, CPU): loads model/ through
docs/examples/layout_load.py on every rank — Shard(0) over the world, or the mesh and
placements of SPEC (`2x2:S0s2,S0`) — and checks each DTensor's full tensor against the plain
file of the mount (the whole tensor, assembled by ckptfs from the original shards)."""
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "docs", "examples"))
from layout_load import load_sharded  # noqa: E402
from torch.distributed.tensor import Replicate, Shard  # noqa: E402
from torch.distributed.tensor.placement_types import _StridedShard  # noqa: E402


def placement(p):
    if p == "R":
        return Replicate()
    d, _, k = p[1:].partition("s")
    return _StridedShard(int(d), split_factor=int(k)) if k else Shard(int(d))


dist.init_process_group("gloo")
mount = sys.argv[1]
if len(sys.argv) > 2:
    sizes, places = sys.argv[2].split(":")
    mesh = init_device_mesh("cpu", tuple(int(x) for x in sizes.split("x")))
    sd = load_sharded(mount, "model", mesh, [placement(p) for p in places.split(",")])
else:
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    sd = load_sharded(mount, "model", mesh)
assert sd, "nothing loaded"
for name, dt in sd.items():
    full = dt.full_tensor()
    want = np.fromfile(os.path.join(mount, "model", name), dtype=np.uint8)
    got = full.contiguous().reshape(-1).view(torch.uint8).numpy()
    assert got.tobytes() == want.tobytes(), name
print(f"rank {dist.get_rank()}: {len(sd)} tensors OK")
dist.destroy_process_group()
