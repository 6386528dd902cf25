"""layout_load.py — load a checkpoint's tensors as DTensors laid out on a device mesh with
placements of your choice (Shard, Replicate, _StridedShard), each rank reading only its own
local shard from a ckptfs mount (docs/mount.md, `.layout/<spec>/<rank>/`).

Reads are checked: a chunk that fails verification (`-o verify`) or cannot be read makes the
read fail with EIO, and read_exact raises it (np.fromfile would not: it ignores read errors
and returns an array of the file's size holding whatever was never filled in)."""
import json, os
import torch
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.distributed.tensor.placement_types import _StridedShard

DTYPES = {"float64": torch.float64, "float32": torch.float32, "float16": torch.float16,
          "bfloat16": torch.bfloat16, "int64": torch.int64, "int32": torch.int32}

def read_exact(path, nbytes):
    """The file's first nbytes, or OSError (EIO: damaged or unreadable data) / a short-read
    error: never a buffer with holes."""
    buf = bytearray(nbytes)
    view, got = memoryview(buf), 0
    with open(path, "rb", buffering=0) as f:
        while got < nbytes:
            n = f.readinto(view[got:])  # raises OSError(EIO) on a bad chunk
            if not n:
                raise OSError(f"{path}: {got} of {nbytes} bytes (short file)")
            got += n
    return buf

def spec_of(mesh, placements):  # docs/loader.md, "Layouts": 2x2:S0s2,S0
    one = lambda p: ("R" if isinstance(p, Replicate) else f"S{p.dim}s{p.split_factor}"
                     if isinstance(p, _StridedShard) else f"S{p.dim}")
    return "x".join(map(str, mesh.shape)) + ":" + ",".join(map(one, placements))

def load_sharded(mount, top, mesh, placements=(Shard(0),)):
    rank = 0
    for c, n in zip(mesh.get_coordinate(), mesh.shape):  # row-major in the mesh, as .layout
        rank = rank * n + c
    root = os.path.join(mount, ".layout", spec_of(mesh, placements), str(rank), top)
    state_dict = {}
    for name in sorted(os.listdir(root)):            # flat names: model/<fqn>
        path = os.path.join(root, name)
        dtype = DTYPES[os.getxattr(path, "user.ckpt.dtype").decode()]
        local_shape = json.loads(os.getxattr(path, "user.ckpt.shape"))
        shape = json.loads(os.getxattr(path, "user.ckpt.global_shape"))
        local = torch.empty(local_shape, dtype=dtype)  # this rank's bytes only
        if local.numel():
            raw = read_exact(path, local.numel() * local.element_size())
            local = torch.frombuffer(raw, dtype=dtype).reshape(local_shape)
        # a placement on a dim the tensor lacks: replicated (the mount's rule)
        places = [p if isinstance(p, Replicate) or p.dim < len(shape) else Replicate()
                  for p in placements]
        stride = torch.empty(shape, device="meta").stride()
        state_dict[name] = DTensor.from_local(local, mesh, places, shape=torch.Size(shape),
                                              stride=stride, run_check=False)
    return state_dict  # e.g. model.load_state_dict(state_dict) on an FSDP2 model over `mesh`
