"""layout_load.py — load a checkpoint's tensors as DTensors sharded Shard(0) over a new world
size, each rank reading only its own shard from a ckptfs mount (docs/mount.md, `.layout`).

Reads are checked: a chunk that fails verification (`-o verify`) or cannot be read makes the
read fail with EIO, and read_exact raises it (np.fromfile would not: it ignores read errors
and returns an array of the file's size holding whatever was never filled in)."""
import json, os
import torch
from torch.distributed.tensor import DTensor, Replicate, Shard

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

def load_sharded(mount, top, mesh, dim=0):
    world, rank = mesh.size(), mesh.get_local_rank()
    root = os.path.join(mount, ".layout", f"dim{dim}-of-{world}", str(rank), top)
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
        placement = Shard(dim) if len(shape) > dim else Replicate()
        stride = torch.empty(shape, device="meta").stride()
        state_dict[name] = DTensor.from_local(local, mesh, [placement], shape=torch.Size(shape),
                                              stride=stride, run_check=False)
    return state_dict  # e.g. model.load_state_dict(state_dict) on an FSDP2 model over `mesh`
