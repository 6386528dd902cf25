"""layout_example_driver.py MOUNT — run under torchrun (gloo, CPU): loads model/ through
docs/examples/layout_load.py on every rank and checks each DTensor's full tensor against the
plain file of the mount (the whole tensor, assembled by ckptfs from the original shards)."""
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "docs", "examples"))
from layout_load import load_sharded  # noqa: E402

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
mount = sys.argv[1]
sd = load_sharded(mount, "model", mesh)
assert sd, "nothing loaded"
for name, dt in sd.items():
    full = dt.full_tensor()
    want = np.fromfile(os.path.join(mount, "model", name), dtype=np.uint8)
    got = full.contiguous().reshape(-1).view(torch.uint8).numpy()
    assert got.tobytes() == want.tobytes(), name
print(f"rank {dist.get_rank()}: {len(sd)} tensors OK")
dist.destroy_process_group()
