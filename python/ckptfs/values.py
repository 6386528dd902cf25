"""Non-tensor values as Python objects, built from libckpt's data-only decoding of the stored
pickle (ckpt_object_load_with + ckpt_value_*): nothing is unpickled, no code runs.

  None, bool, int (big ones too), float, str, bytes    as themselves
  list, tuple, set, frozenset, dict (OrderedDict and defaultdict become dict)
  tensors inside a value                               torch.Tensor (CPU)
  complex, range, slice, bytearray                     as themselves
  torch dtypes and other named references              torch.dtype / Reference("module.name")
  instances of any other class                         Object(cls, args, state), symbolic

Shared references stay shared (a node referenced twice gives one Python object)."""

import ctypes
import sys
from ctypes import byref, c_size_t, c_void_p

import torch

from . import _lib
from ._lib import lib
from ._status import check as _check, torch_dtype

__all__ = ["Object", "Reference", "load_value"]

(NONE, BOOL, INT, BIGINT, FLOAT, STRING, BYTES, LIST, TUPLE, SET, DICT, TENSOR,
 OBJECT) = range(13)


class Reference(str):
    """A named global the value refers to without calling it (a class, a function, an enum
    member): its dotted name."""

    def __repr__(self):
        return f"Reference({str(self)!r})"


class Object:
    """An instance of a class ckptfs does not rebuild: `cls` (dotted name), `args` (the
    constructor's arguments, a tuple or None) and `state` (what __setstate__ would get, or
    None).  Compared by value."""

    __slots__ = ("cls", "args", "state")

    def __init__(self, cls, args=None, state=None):
        self.cls, self.args, self.state = cls, args, state

    def __eq__(self, other):
        return (isinstance(other, Object) and (self.cls, self.args, self.state) ==
                (other.cls, other.args, other.state))

    def __hash__(self):
        return hash(self.cls)

    def __repr__(self):
        return f"Object({self.cls!r}, args={self.args!r}, state={self.state!r})"


def _str(v):
    n = c_size_t()
    p = lib.ckpt_value_str(v, byref(n))
    return ctypes.string_at(p, n.value) if p else b""


class _Builder:
    def __init__(self, ckpt):
        self.ckpt = ckpt
        self.memo = {}

    def build(self, v):
        if not v:
            return None
        hit = self.memo.get(v, self)
        if hit is not self:
            return hit
        r = self._build(v)
        self.memo[v] = r
        return r

    def _items(self, v):
        return [self.build(lib.ckpt_value_item(v, i)) for i in range(lib.ckpt_value_len(v))]

    def _build(self, v):
        t = lib.ckpt_value_type_of(v)
        if t == NONE:
            return None
        if t == BOOL:
            return bool(lib.ckpt_value_bool(v))
        if t == INT:
            return int(lib.ckpt_value_int(v))
        if t == BIGINT:
            return int(_str(v).decode())
        if t == FLOAT:
            return float(lib.ckpt_value_float(v))
        if t == STRING:
            return _str(v).decode("utf-8", "surrogatepass")
        if t == BYTES:
            return _str(v)
        if t == LIST:
            out = []
            self.memo[v] = out  # (shared before its items are built, as pickle does)
            out.extend(self._items(v))
            return out
        if t == TUPLE:
            return tuple(self._items(v))
        if t == SET:
            items = self._items(v)
            return frozenset(items) if lib.ckpt_value_set_frozen(v) else set(items)
        if t == DICT:
            out = {}
            self.memo[v] = out
            for i in range(lib.ckpt_value_len(v)):
                out[self.build(lib.ckpt_value_dict_key(v, i))] = self.build(
                    lib.ckpt_value_dict_val(v, i))
            return out
        if t == TENSOR:
            return self._tensor(v)
        if t == OBJECT:
            return self._object(v)
        raise TypeError(f"ckptfs: unknown value type {t}")

    def _tensor(self, v):
        nd = lib.ckpt_value_tensor_ndim(v)
        sp = lib.ckpt_value_tensor_shape(v)
        shape = tuple(sp[:nd]) if nd else ()
        out = torch.empty(shape, dtype=torch_dtype(lib.ckpt_value_tensor_dtype(v)))
        err = _lib.Error()
        st = lib.ckpt_value_tensor_read(v, c_void_p(out.data_ptr() or None),
                                        out.numel() * out.element_size(), byref(err))
        _check(st, err)
        return out

    def _object(self, v):
        name = _str(v).decode("utf-8", "replace")
        a, s = lib.ckpt_value_object_args(v), lib.ckpt_value_object_state(v)
        if not a and not s:  # a bare reference
            if name.startswith("torch."):
                dt = getattr(torch, name[6:], None)
                if isinstance(dt, torch.dtype):
                    return dt
            return Reference(name)
        args = self.build(a) if a else None
        state = self.build(s) if s else None
        if state is None and isinstance(args, tuple):
            simple = {"builtins.complex": complex, "builtins.range": range,
                      "builtins.slice": slice, "builtins.bytearray": bytearray}
            ctor = simple.get(name)
            if ctor is not None:
                try:
                    return ctor(*args)
                except (TypeError, ValueError):
                    pass
        return Object(name, args, state)


def load_value(ckpt, entry, max_memory=0):
    """The value of non-tensor entry `entry` of Checkpoint `ckpt`, decoded by libckpt within
    `max_memory` bytes (ckpt_object_options.max_memory: LimitError past it; 0: the reader's
    limits only).  A libckpt without ckpt_object_load_with decodes within the reader's limits;
    the caller decides whether that will do (Checkpoint.read_value)."""
    err = _lib.Error()
    obj = c_void_p()
    if _lib.has_object_budget:
        opts = _lib.ObjectOptions(max_memory)
        st = lib.ckpt_object_load_with(ckpt._handle(), entry._ptr, byref(opts), byref(obj),
                                       byref(err))
    else:
        st = lib.ckpt_object_load(ckpt._handle(), entry._ptr, byref(obj), byref(err))
    _check(st, err)
    # libckpt bounds a value's nesting at 256 levels; building one level takes up to 4
    # Python frames (build, _build, _items, its comprehension)
    old_limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old_limit, _stack_depth() + 4 * 256 + 200))
    try:
        return _Builder(ckpt).build(lib.ckpt_object_root(obj.value))
    finally:
        sys.setrecursionlimit(old_limit)
        lib.ckpt_object_free(obj.value)


def _stack_depth():
    f, n = sys._getframe(), 0
    while f is not None:
        f, n = f.f_back, n + 1
    return n
