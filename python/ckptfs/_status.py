"""What every module of the package shares below the reader: a libckpt status turned into the
package's exception (libckpt's message, or ckpt_strerror's when it has none), and torch.dtype
of a ckpt_dtype code."""

import torch

from . import _lib
from ._lib import lib
from .errors import from_status


def _raise(st, err):
    raise from_status(st, err.message.decode("utf-8", "replace") or
                      lib.ckpt_strerror(st).decode())


def check(st, err):
    if st != 0:
        _raise(st, err)


DTYPES = {}  # ckpt_dtype value -> torch.dtype (None when this torch lacks it)
for _code in range(1, _lib.CKPT_DTYPE_COUNT):
    DTYPES[_code] = getattr(torch, lib.ckpt_dtype_name(_code).decode(), None)


def torch_dtype(code):
    """The torch.dtype of a ckpt_dtype code; TypeError when this torch has no such dtype."""
    dt = DTYPES.get(code)
    if dt is None:
        name = lib.ckpt_dtype_name(code).decode()
        raise TypeError(f"torch {torch.__version__} has no dtype torch.{name}")
    return dt
