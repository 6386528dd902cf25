"""layout_example_driver.py MOUNT [--damaged] — run under torchrun (gloo, CPU): loads model/
through docs/examples/layout_load.py on every rank and checks each DTensor's full tensor against
the plain file of the mount (the whole tensor, assembled by ckptfs from the original shards).
With --damaged (a mount with `-o verify` of a checkpoint whose data was changed after sealing)
the ranks whose shard holds the damage must get OSError(EIO) from the example, the others load,
and at least one rank fails."""
import errno
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "docs", "examples"))
from layout_load import load_sharded, read_exact  # noqa: E402

dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (dist.get_world_size(),))
mount = sys.argv[1]
if "--damaged" in sys.argv[2:]:
    try:
        sd = load_sharded(mount, "model", mesh)
        failed = 0
    except OSError as e:
        assert e.errno == errno.EIO, e
        failed = 1
    total = torch.tensor([failed])
    dist.all_reduce(total)
    print(f"rank {dist.get_rank()}: {'EIO' if failed else 'loaded'}")
    assert total.item() >= 1, "no rank saw the damage"
    dist.barrier()  # every rank past the all_reduce before any tears gloo down
    dist.destroy_process_group()
    sys.exit(0)
sd = load_sharded(mount, "model", mesh)
assert sd, "nothing loaded"
for name, dt in sd.items():
    full = dt.full_tensor()
    path = os.path.join(mount, "model", name)
    want = read_exact(path, os.stat(path).st_size)
    got = full.contiguous().reshape(-1).view(torch.uint8).numpy()
    assert got.tobytes() == bytes(want), name
print(f"rank {dist.get_rank()}: {len(sd)} tensors OK")
dist.barrier()
dist.destroy_process_group()
