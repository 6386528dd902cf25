"""layout_load.py — load a checkpoint's tensors as DTensors sharded Shard(0) over a new world
size, each rank reading only its own shard from a ckptfs mount (docs/mount.md, `.layout`)."""
import json, os
import numpy as np, torch
from torch.distributed.tensor import DTensor, Replicate, Shard

DTYPES = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16,
          "bfloat16": torch.bfloat16, "int64": torch.int64, "int32": torch.int32}

def load_sharded(mount, top, mesh, dim=0):
    world, rank = mesh.size(), mesh.get_local_rank()
    root = os.path.join(mount, ".layout", f"dim{dim}-of-{world}", str(rank), top)
    state_dict = {}
    for name in sorted(os.listdir(root)):            # flat names: model/<fqn>
        path = os.path.join(root, name)
        dtype = DTYPES[os.getxattr(path, "user.ckpt.dtype").decode()]
        local_shape = json.loads(os.getxattr(path, "user.ckpt.shape"))
        shape = json.loads(os.getxattr(path, "user.ckpt.global_shape"))
        raw = torch.from_numpy(np.fromfile(path, dtype=np.uint8))  # this rank's bytes only
        local = (raw.view(dtype) if raw.numel() else torch.empty(0, dtype=dtype)).reshape(local_shape)
        placement = Shard(dim) if len(shape) > dim else Replicate()
        stride = torch.empty(shape, device="meta").stride()
        state_dict[name] = DTensor.from_local(local, mesh, [placement], shape=torch.Size(shape),
                                              stride=stride, run_check=False)
    return state_dict  # e.g. model.load_state_dict(state_dict) on an FSDP2 model over `mesh`
