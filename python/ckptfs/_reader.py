"""Checkpoint and Entry: the reader (ckpt_reader_*, ckpt_entry_*, ckpt_read_region) over
ctypes.  Reads go straight into the memory of a CPU torch.Tensor; CUDA destinations are filled
slab by slab from a pinned host staging buffer the Checkpoint keeps."""

import ctypes
import os
import threading
from ctypes import byref, c_int64, c_void_p

import torch

from . import _lib
from ._lib import lib
from ._status import DTYPES as _DTYPES, check as _check, torch_dtype
from .errors import (FormatError, InvalidArgumentError, NotFoundError, UnsupportedError,
                     from_status)

__all__ = ["Checkpoint", "Entry", "open", "torch_dtype"]

_KIND_TENSOR, _KIND_OBJECT = 1, 2


def _shape(ptr, ndim):
    return tuple(ptr[:ndim]) if ndim else ()


def _i64(vals):
    arr = (c_int64 * max(len(vals), 1))(*vals)
    return arr


class Entry:
    """One state_dict entry: a tensor (`is_tensor`) or a non-tensor value.

    `key` is the flat key of state_dict_metadata (`optim.state.w.exp_avg`), `path` the escaped
    tree path (`optim/state/w/exp_avg`, docs/naming.md), `path_elems` the planner_data tuple
    (ints stay ints; the flat key alone without planner_data).  Tensors have `dtype`
    (torch.dtype), `shape` (tuple), `numel`, `nbytes`, `chunks` (the stored boxes, as
    (offsets, sizes) tuples)."""

    __slots__ = ("_ckpt", "_ptr", "key", "path", "path_elems", "index", "is_tensor", "_dtype",
                 "shape", "numel", "nbytes", "problem")

    def __init__(self, ckpt, ptr):
        self._ckpt = ckpt
        self._ptr = ptr
        self.key = lib.ckpt_entry_key(ptr).decode("utf-8", "surrogateescape")
        self.path = lib.ckpt_entry_path(ptr).decode("utf-8", "surrogateescape")
        elems = []
        for i in range(lib.ckpt_entry_path_len(ptr)):
            s = lib.ckpt_entry_path_elem(ptr, i).decode("utf-8", "surrogateescape")
            elems.append(int(s) if lib.ckpt_entry_path_elem_is_int(ptr, i) else s)
        self.path_elems = tuple(elems)
        self.index = lib.ckpt_entry_index(ptr)
        self.is_tensor = lib.ckpt_entry_kind_of(ptr) == _KIND_TENSOR
        p = lib.ckpt_entry_problem(ptr)
        self.problem = p.decode("utf-8", "replace") if p else None
        if self.is_tensor:
            self._dtype = lib.ckpt_entry_dtype(ptr)
            self.shape = _shape(lib.ckpt_entry_shape(ptr), lib.ckpt_entry_ndim(ptr))
            self.numel = lib.ckpt_entry_numel(ptr)
            self.nbytes = lib.ckpt_entry_nbytes(ptr)
        else:
            self._dtype, self.shape, self.numel, self.nbytes = 0, None, None, None

    @property
    def dtype(self):
        """torch.dtype of a tensor entry; None for values (and for an unknown stored dtype)."""
        return _DTYPES.get(self._dtype) if self.is_tensor else None

    @property
    def dtype_name(self):
        """torch's name of the stored dtype ('bfloat16'); None for values."""
        return lib.ckpt_dtype_name(self._dtype).decode() if self.is_tensor else None

    @property
    def ndim(self):
        return len(self.shape) if self.is_tensor else None

    @property
    def chunks(self):
        """The stored chunks as (offsets, sizes) tuples, zero-size chunks included."""
        if not self.is_tensor:
            return []
        out = []
        info = _lib.ChunkInfo()
        nd = len(self.shape)
        for i in range(lib.ckpt_entry_num_chunks(self._ptr)):
            if lib.ckpt_entry_chunk(self._ptr, i, byref(info)) != 0:
                continue
            out.append((_shape(info.offsets, nd), _shape(info.sizes, nd)))
        return out

    def __repr__(self):
        if self.is_tensor:
            return f"Entry({self.key!r}, {self.dtype_name}, shape={list(self.shape)})"
        return f"Entry({self.key!r}, value)"


def _region(shape, region):
    """start, count and the result's shape for a region: a tuple of slices (step 1) and ints
    (an int takes one index and drops the dimension), Python's rules for negatives and
    out-of-range slice bounds; missing trailing dimensions are taken whole."""
    nd = len(shape)
    if region is None:
        return [0] * nd, list(shape), tuple(shape)
    if not isinstance(region, tuple):
        region = (region,)
    if len(region) > nd:
        raise InvalidArgumentError(f"region has {len(region)} dimensions, the tensor {nd}")
    start, count, out = [], [], []
    for d in range(nd):
        r = region[d] if d < len(region) else slice(None)
        n = shape[d]
        if isinstance(r, slice):
            if r.step not in (None, 1):
                raise InvalidArgumentError(f"region: dimension {d}: steps are not supported")
            a, b, _ = r.indices(n)
            c = max(0, b - a)
            start.append(a if c else min(a, n))
            count.append(c)
            out.append(c)
        elif hasattr(r, "__index__") and not isinstance(r, bool):
            i = r.__index__()
            if not -n <= i < n:
                raise InvalidArgumentError(
                    f"region: index {i} is out of range for dimension {d} of size {n}")
            start.append(i + n if i < 0 else i)
            count.append(1)
        else:
            raise InvalidArgumentError(f"region: dimension {d}: {r!r} is not a slice or an int")
    return start, count, tuple(out)


def _budget(v, what):
    """A memory budget as given (None: the default), checked: an int >= 0."""
    if v is None:
        return None
    if isinstance(v, bool) or not hasattr(v, "__index__") or v.__index__() < 0:
        raise InvalidArgumentError(f"{what}={v!r}: a number of bytes >= 0 (0: only the "
                                   f"reader's limits)")
    return v.__index__()


class Checkpoint:
    """An open checkpoint: a DCP directory (`.metadata` or rank-local `__<r>.metadata`),
    HuggingFace safetensors storage, or Megatron torch_dist — whatever libckpt reads.

    `ckptfs.open(path)` / `Checkpoint(path)`; a context manager; `close()` frees it (entries
    become unusable).  Safe to read from several threads at once.

    max_value_memory: the memory budget of each value read (read_value's max_memory when
    that is not given); None: VALUE_MEMORY (1 GiB), 0: the reader's limits only."""

    VALUE_MEMORY = 1 << 30  # the default memory budget of one value's decode (read_value)

    def __init__(self, path, *, max_metadata_bytes=0, max_pickle_memory=0, max_depth=0,
                 max_items=0, max_object_bytes=0, max_decoded_cache=0, index_threads=0,
                 max_value_memory=None):
        self._ptr = None
        self.max_value_memory = _budget(max_value_memory, "max_value_memory")
        self._lock = threading.Lock()
        self._stage_lock = threading.Lock()
        self._stage = None
        self.path = os.fspath(path)
        limits = _lib.Limits(max_metadata_bytes, max_pickle_memory, max_depth, max_items,
                             max_object_bytes, max_decoded_cache, index_threads)
        opts = _lib.OpenOptions(ctypes.pointer(limits))
        err = _lib.Error()
        ptr = c_void_p()
        st = lib.ckpt_reader_open(os.fsencode(self.path), byref(opts), byref(ptr), byref(err))
        _check(st, err)
        self._ptr = ptr.value
        self._n = lib.ckpt_reader_num_entries(self._ptr)
        self._cache = [None] * self._n  # Entry objects, made on first use
        self._all = None

    @classmethod
    def _borrow(cls, ptr, path, max_value_memory=None):
        """A Checkpoint over a reader someone else owns (the collective loader's,
        ckpt_load_reader): close() forgets it without freeing it."""
        self = cls.__new__(cls)
        self._ptr = None
        self._lock = threading.Lock()
        self._stage_lock = threading.Lock()
        self._stage = None
        self._borrowed = True
        self.max_value_memory = _budget(max_value_memory, "max_value_memory")
        self.path = os.fspath(path)
        self._ptr = ptr
        self._n = lib.ckpt_reader_num_entries(ptr)
        self._cache = [None] * self._n
        self._all = None
        return self

    # ---- life cycle
    def close(self):
        with self._lock:
            if self._ptr and not getattr(self, "_borrowed", False):
                lib.ckpt_reader_free(self._ptr)
            self._ptr = None
            self._stage = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _handle(self):
        if not self._ptr:
            raise InvalidArgumentError(f"{self.path}: the checkpoint is closed")
        return self._ptr

    # ---- the index
    @property
    def info(self):
        """A dict of ckpt_reader_info: format_hint, num_entries, num_tensors, num_files, ..."""
        i = _lib.ReaderInfo()
        lib.ckpt_reader_get_info(self._handle(), byref(i))
        d = {}
        for name, _ in _lib.ReaderInfo._fields_:
            v = getattr(i, name)
            if isinstance(v, bytes):
                v = v.decode("utf-8", "replace")
            elif name == "dtype_counts":
                v = {lib.ckpt_dtype_name(c).decode(): v[c] for c in range(1, len(v)) if v[c]}
            d[name] = v
        return d

    @property
    def files(self):
        """The data files the index references (names relative to the directory)."""
        h = self._handle()
        return [lib.ckpt_reader_file_name(h, i).decode("utf-8", "surrogateescape")
                for i in range(lib.ckpt_reader_num_files(h))]

    @property
    def entries(self):
        """Every entry, in state_dict_metadata order."""
        if self._all is None:
            self._all = tuple(self._entry_at(i) for i in range(self._n))
        return self._all

    def _entry_at(self, i):
        e = self._cache[i]
        if e is None:
            e = self._cache[i] = Entry(self, lib.ckpt_reader_entry(self._handle(), i))
        return e

    def keys(self):
        return [e.key for e in self.entries]

    def __len__(self):
        return self._n

    def __iter__(self):
        return iter(self.entries)

    def __contains__(self, name):
        return self.find(name) is not None

    def find(self, name=None, *, key=None, path=None):
        """The entry named by flat key or tree path (the key wins if both match), or by `key=`
        / `path=` only; None when absent."""
        h = self._handle()
        if key is not None:
            p = lib.ckpt_reader_find_key(h, key.encode("utf-8", "surrogateescape"))
        elif path is not None:
            p = lib.ckpt_reader_find_path(h, path.encode("utf-8", "surrogateescape"))
        else:
            p = lib.ckpt_reader_find(h, name.encode("utf-8", "surrogateescape"))
        return self._entry_at(lib.ckpt_entry_index(p)) if p else None

    def __getitem__(self, name):
        return self.entry(name)

    def entry(self, name):
        """The Entry for a flat key, a tree path or an Entry; NotFoundError (a KeyError) if
        absent."""
        if isinstance(name, Entry):
            if name._ckpt is not self:
                raise InvalidArgumentError(f"entry {name.key!r} belongs to another checkpoint")
            return name
        e = self.find(name)
        if e is None:
            raise NotFoundError(f"{self.path}: no entry '{name}' (neither a key nor a path)")
        return e

    # ---- tensors
    def read_tensor(self, name, region=None, *, out=None, device=None):
        """The tensor entry `name` (key, path or Entry), whole or a `region` (a tuple of slices
        and ints: `(slice(0, 4), slice(None))`, `(3,)`), as a new tensor on `device` (default
        CPU) or into `out`: a contiguous tensor of the entry's dtype and the region's shape, on
        the CPU (read straight into its memory) or a CUDA device (through a pinned host
        staging buffer of STAGE_BYTES, kept by the Checkpoint, slab by slab of rows).
        Returns the tensor."""
        e = self.entry(name)
        if not e.is_tensor:
            raise InvalidArgumentError(f"'{e.key}' is a value, not a tensor: use read_value")
        if e.problem:  # before allocating: the shape of a defective entry may be absurd
            raise FormatError(f"{self.path}: key '{e.key}': {e.problem}")
        dtype = torch_dtype(e._dtype)
        start, count, shape = _region(e.shape, region)
        if out is None:
            dev = torch.device(device) if device is not None else torch.device("cpu")
            out = torch.empty(shape, dtype=dtype, device=dev)
        else:
            if not isinstance(out, torch.Tensor):
                raise InvalidArgumentError(
                    f"out must be a torch.Tensor, not {type(out).__name__}")
            if out.dtype != dtype:
                raise InvalidArgumentError(
                    f"'{e.key}': out has dtype {out.dtype}, the checkpoint stores {dtype}")
            if tuple(out.shape) != shape:
                raise InvalidArgumentError(f"'{e.key}': out has shape {list(out.shape)}, the "
                                           f"region has {list(shape)}")
            if not out.is_contiguous():
                raise InvalidArgumentError(f"'{e.key}': out is not contiguous (strides "
                                           f"{list(out.stride())}); pass out.contiguous() or "
                                           f"a new tensor")
            if device is not None and torch.device(device) != out.device:
                raise InvalidArgumentError(f"device={device} but out is on {out.device}")
        if out.device.type == "cpu":
            self._read_into(e, start, count, out)
        else:
            self._read_staged(e, start, count, out)
        return out

    STAGE_BYTES = 64 << 20  # the host staging buffer of device reads (pinned under CUDA)

    def _staging(self, nbytes):
        """The staging buffer (uint8, >= nbytes), kept between reads; call with _stage_lock."""
        buf = self._stage
        if buf is None or buf.numel() < nbytes:
            pin = torch.cuda.is_available()
            buf = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin)
            if nbytes <= self.STAGE_BYTES:
                self._stage = buf
        return buf

    def _read_staged(self, e, start, count, out, stage_bytes=None):
        """Fills contiguous `out` on another device: slabs of rows (along the region's first
        dimension) read into the host staging buffer, each copied into its rows of `out`
        (a synchronous copy, so the buffer is free again after it).  A row bigger than the
        buffer is staged in a buffer of its own."""
        stage_bytes = stage_bytes or self.STAGE_BYTES
        itemsize = out.element_size()
        view = out.view(count) if count else out  # dropped (int) dims are of size 1
        if not count or out.numel() == 0:
            with self._stage_lock:
                host = self._staging(max(out.numel() * itemsize, 1))
                h = host[:out.numel() * itemsize].view(out.dtype).view(out.shape)
                self._read_into(e, start, count, h)
                with torch.no_grad():
                    out.copy_(h)
            return
        row_bytes = itemsize
        for c in count[1:]:
            row_bytes *= c
        rows = max(1, stage_bytes // row_bytes)
        with self._stage_lock:
            host = self._staging(min(rows, count[0]) * row_bytes)
            for r in range(0, count[0], rows):
                n = min(rows, count[0] - r)
                sub_start, sub_count = list(start), list(count)
                sub_start[0] += r
                sub_count[0] = n
                h = host[:n * row_bytes].view(out.dtype).view(sub_count)
                self._read_into(e, sub_start, sub_count, h)
                with torch.no_grad():
                    view[r:r + n].copy_(h)

    def _read_into(self, e, start, count, t):
        """Reads the box into the memory of contiguous CPU tensor t."""
        if t.is_conj() or t.is_neg():
            raise InvalidArgumentError("out has a lazy conjugate/negative bit; resolve it first")
        nbytes = t.numel() * t.element_size()
        err = _lib.Error()
        st = lib.ckpt_read_region(self._handle(), e._ptr, _i64(start), _i64(count),
                                  c_void_p(t.data_ptr() or None), nbytes, byref(err))
        _check(st, err)

    # ---- integrity
    def verify(self, threads=0):
        """Re-hashes every stored item against the checkpoint's integrity manifest
        (`.ckptfs-manifest`, written by `ckpt seal`; docs/manifest.md) and checks every item
        the index references is sealed.  Returns the number of records checked; raises
        NotFoundError without a manifest, ChecksumError listing the problems otherwise."""
        h = self._handle()
        err = _lib.Error()
        m = c_void_p()
        d = os.fsencode(self.path)
        _check(lib.ckpt_manifest_load(d, byref(m), byref(err)), err)
        problems = []

        def report(_ctx, _rec, e):
            problems.append(e.contents.message.decode("utf-8", "replace"))

        cb = _lib.MANIFEST_REPORT_FN(report)
        failures = ctypes.c_uint64()
        try:
            st = lib.ckpt_manifest_verify(d, m.value, h, threads, ctypes.cast(cb, c_void_p),
                                          None, None, byref(failures), byref(err))
            n = lib.ckpt_manifest_num_records(m.value)
        finally:
            lib.ckpt_manifest_free(m.value)
        if problems or failures.value:
            shown = "; ".join(problems[:8]) + ("; ..." if len(problems) > 8 else "")
            raise from_status(9, f"{self.path}: {failures.value} integrity problem(s): {shown}")
        _check(st, err)
        return n

    # ---- values
    def read_value(self, name, *, max_memory=None):
        """The non-tensor entry `name` as a Python object, built from libckpt's data-only
        decoding (nothing is unpickled): see ckptfs.values.

        max_memory: the memory the decode may take, in bytes (ckpt_object_options.max_memory:
        the stored bytes decompressed, the pickle, the decoded values and their tree together;
        the Python objects built from them are not counted); a value needing more raises
        LimitError naming the key and the budget.  None: the Checkpoint's max_value_memory
        (default VALUE_MEMORY, 1 GiB); 0: only the reader's limits (max_pickle_memory...)."""
        from .values import load_value
        e = self.entry(name)
        if e.is_tensor:
            raise InvalidArgumentError(f"'{e.key}' is a tensor: use read_tensor")
        budget = _budget(max_memory, "max_memory")
        if budget is None:
            budget = self.max_value_memory
        if budget is None:
            budget = self.VALUE_MEMORY
        elif budget and not _lib.has_object_budget:  # asked for, and not to be had
            raise UnsupportedError(
                f"'{e.key}': a value's memory budget needs ckpt_object_load_with, which "
                f"{_lib.path} lacks (max_memory=0 reads within the reader's limits)")
        return load_value(self, e, budget)

    def read(self, name, region=None, *, max_memory=None, **kw):
        """read_tensor for a tensor entry, read_value for a value (`max_memory` applies to a
        value only)."""
        e = self.entry(name)
        if e.is_tensor:
            return self.read_tensor(e, region, **kw)
        if region is not None or kw:
            raise InvalidArgumentError(f"'{e.key}' is a value: no region, out or device")
        return self.read_value(e, max_memory=max_memory)

    def __repr__(self):
        state = "" if self._ptr else ", closed"
        return f"ckptfs.Checkpoint({self.path!r}, {self._n} entries{state})"


def open(path, **limits):  # noqa: A001 (the module's verb, like io.open)
    """Opens a checkpoint directory: `with ckptfs.open(path) as ck: ...`."""
    return Checkpoint(path, **limits)

