"""layout_example_driver.py MOUNT [SPEC] [--damaged] — run under torchrun (gloo, CPU): loads
model/ through docs/examples/layout_load.py on every rank — Shard(0) over the world, or the
mesh and placements of SPEC (`2x2:S0s2,S0`) — and checks each DTensor's full tensor against the
plain file of the mount (the whole tensor, assembled by ckptfs from the original shards).
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
from torch.distributed.tensor import Replicate, Shard  # noqa: E402
from torch.distributed.tensor.placement_types import _StridedShard  # noqa: E402


def placement(p):
    if p == "R":
        return Replicate()
    d, _, k = p[1:].partition("s")
    return _StridedShard(int(d), split_factor=int(k)) if k else Shard(int(d))


dist.init_process_group("gloo")
mount = sys.argv[1]
args = [a for a in sys.argv[2:] if a != "--damaged"]
if args:
    sizes, places = args[0].split(":")
    mesh = init_device_mesh("cpu", tuple(int(x) for x in sizes.split("x")))
    placements = [placement(p) for p in places.split(",")]
else:
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    placements = [Shard(0)]
if "--damaged" in sys.argv[2:]:
    try:
        sd = load_sharded(mount, "model", mesh, placements)
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
    # no interpreter finalization: gloo's threads can abort there ("terminate called without
    # an active exception", SIGABRT) after every check passed, failing the run
    sys.stdout.flush()
    os._exit(0)
sd = load_sharded(mount, "model", mesh, placements)
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
sys.stdout.flush()
os._exit(0)  # as above: no finalization
