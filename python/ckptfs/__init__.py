"""ckptfs: read PyTorch distributed checkpoints through libckpt (C), without unpickling.

    import ckptfs
    with ckptfs.open("ckpt/step-100") as ck:
        for e in ck: print(e.path, e.dtype, e.shape)
        w = ck.read_tensor("model/layers.0.attention.wq.weight", (slice(0, 4),))
        lr = ck.read_value("optim/param_groups/0/lr")

`ckptfs.dcp.StorageReader(path)` plugs the same reader into torch.distributed.checkpoint.load.
`ckptfs.load(state_dict, path)` loads a state_dict in place under torchrun, collectively: each
needed stored byte is read once across the process group (DTensors get their local shards).
"""

from ._lib import __version__
from ._lib import path as library_path
from ._load import LoadStats, load
from ._reader import Checkpoint, Entry, open, torch_dtype
from .errors import (AccessError, ChecksumError, CkptError, CkptIOError, FormatError,
                     InvalidArgumentError, LimitError, NotFoundError, OutOfMemoryError,
                     RangeError, UnsupportedError)
from .values import Object, Reference

__all__ = ["__version__", "library_path", "load", "LoadStats", "Checkpoint", "Entry", "open",
           "torch_dtype", "Object", "Reference", "CkptError", "CkptIOError", "OutOfMemoryError",
           "FormatError", "UnsupportedError", "LimitError", "NotFoundError", "RangeError",
           "InvalidArgumentError", "ChecksumError", "AccessError"]
