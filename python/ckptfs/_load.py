"""ckptfs.load: the collective loader (libckpt_load, include/ckpt_load.h) driven over a
torch.distributed process group.

Every rank names what it needs — the local shard of each DTensor (its device mesh and
placements: Replicate, Shard(d), _StridedShard(d, split_factor)) or the whole of each plain
tensor — and one collective call reads every needed stored byte once across the group and
moves the pieces to the ranks that need them.  The ranks talk through a ckpt_transport whose
callbacks (ctypes) are torch.distributed collectives on the group: all_gather of padded uint8
blocks (allgatherv), all_to_all_single (alltoallv), broadcast, and all_reduce(MIN) of int64
(the status agreement).  Errors found in Python (a key the checkpoint lacks, a shape that
differs) are agreed on with all_gather_object before the loader runs, so every rank raises the
same exception, never hangs."""

import ctypes
import os
from ctypes import byref, c_int64, c_uint32, c_void_p

import torch

from . import _lib
from ._lib import lib
from ._reader import Checkpoint, _budget
from .errors import CkptError, InvalidArgumentError, NotFoundError, UnsupportedError, from_status

__all__ = ["load", "LoadStats"]

_MODES = {"collective": 0, "independent": 1}
_MEM_HOST = 1
_PLACE_REPLICATE, _PLACE_SHARD, _PLACE_STRIDED = 0, 1, 2
_E_PY = 1  # the transports' one error code: the message says what failed


class LoadStats:
    """This rank's counters of the load (ckpt_load_stats): `bytes_read` (bytes the preads of
    shard files returned here), `bytes_read_plan` (of those, the plan's: summed over the ranks
    it is `union_bytes`, each needed stored byte once), `union_bytes` (the job's needed stored
    bytes), `bytes_requested`, `bytes_sent`, `bytes_received`, `bytes_local`,
    `bytes_read_metadata` (summed over the ranks: one copy of DCP metadata, which rank 0 reads
    and broadcasts), `bytes_received_metadata`, `chunks_adopted`, `preads`, `rounds`,
    `io_threads`, `seconds_*`; `as_dict()`."""

    def __init__(self, s):
        for name, _ in _lib.LoadStats._fields_:
            setattr(self, name, getattr(s, name))

    def as_dict(self):
        return {name: getattr(self, name) for name, _ in _lib.LoadStats._fields_}

    def __repr__(self):
        return (f"LoadStats(bytes_read={self.bytes_read}, union_bytes={self.union_bytes}, "
                f"bytes_sent={self.bytes_sent}, bytes_received={self.bytes_received}, "
                f"seconds_total={self.seconds_total:.3f})")


def _view(addr, n):
    """A uint8 tensor over n bytes of C memory at addr (no copy)."""
    if not n:
        return torch.empty(0, dtype=torch.uint8)
    return torch.frombuffer((ctypes.c_uint8 * n).from_address(addr), dtype=torch.uint8)


def _packed(displs, counts):
    """Whether blocks lie back to back in rank order from offset 0."""
    off = 0
    for d, c in zip(displs, counts):
        if c and d != off:
            return False
        off += c
    return True


class _Transport:
    """The ckpt_transport callbacks over one torch.distributed process group (or, with
    group=None and no process group, this process alone).  Every callback catches everything:
    an exception never crosses into C; it becomes status _E_PY and its text (strerror)."""

    def __init__(self, group):
        self.dist = None
        self.group = group
        if group is None:
            self.rank, self.size = 0, 1
            self.device = torch.device("cpu")
        else:
            import torch.distributed as dist
            self.dist = dist
            self.rank, self.size = dist.get_rank(group), dist.get_world_size(group)
            if self.rank < 0:
                raise InvalidArgumentError(
                    "ckptfs.load: this process is not a member of process_group")
            backend = str(dist.get_backend(group)).lower()
            # NCCL moves device tensors only: host blocks travel through device copies
            self.device = (torch.device("cuda", torch.cuda.current_device())
                           if "nccl" in backend and "gloo" not in backend
                           else torch.device("cpu"))
        self.calls = 0
        self.message = ""
        self._text = ctypes.create_string_buffer(1024)
        self._cbs = [_lib.T_ALLGATHERV_FN(self._cb_allgatherv),
                     _lib.T_ALLTOALLV_FN(self._cb_alltoallv), _lib.T_BCAST_FN(self._cb_bcast),
                     _lib.T_MIN_FN(self._cb_min), _lib.T_STRERROR_FN(self._cb_strerror)]
        t = _lib.Transport()
        t.version = _lib.CKPT_TRANSPORT_VERSION
        t.rank, t.size = self.rank, self.size
        t.ctx = None
        t.allgatherv, t.alltoallv, t.bcast, t.allreduce_min_u64, t.strerror = self._cbs
        t.device = None  # (destroy: NULL; this object outlives the handle)
        self.struct = t

    # ---- guards
    def _run(self, fn, *args):
        self.calls += 1
        try:
            fn(*args)
            return 0
        except BaseException as e:  # noqa: B036 (nothing may unwind through C)
            self.message = f"{type(e).__name__}: {e}".strip()
            return _E_PY

    def _cb_strerror(self, _ctx, code):
        text = self.message if code == _E_PY else f"error {code}"
        self._text.value = text.encode("utf-8", "replace")[:1023]
        return ctypes.addressof(self._text)

    def _cb_allgatherv(self, _ctx, send, send_bytes, recv, recv_bytes, recv_displs):
        return self._run(self._allgatherv, send, send_bytes, recv, recv_bytes, recv_displs)

    def _cb_alltoallv(self, _ctx, send, sb, sd, recv, rb, rd):
        return self._run(self._alltoallv, send, sb, sd, recv, rb, rd)

    def _cb_bcast(self, _ctx, buf, nbytes, root):
        return self._run(self._bcast, buf, nbytes, root)

    def _cb_min(self, _ctx, values, n):
        return self._run(self._min, values, n)

    # ---- the collectives
    def _allgatherv(self, send, send_bytes, recv, recv_bytes, recv_displs):
        n = self.size
        counts = [recv_bytes[j] for j in range(n)]
        displs = [recv_displs[j] for j in range(n)]
        if send_bytes != counts[self.rank]:
            raise ValueError(f"allgatherv: {send_bytes} bytes to send, {counts[self.rank]} "
                             "expected")
        m = max(counts)
        if not m:
            return
        if self.dist is None:
            ctypes.memmove(recv + displs[0], send, send_bytes)
            return
        # every rank knows every block's size: a padded all_gather of equal blocks
        mine = torch.zeros(m, dtype=torch.uint8, device=self.device)
        if send_bytes:
            mine[:send_bytes].copy_(_view(send, send_bytes))
        out = torch.empty(n * m, dtype=torch.uint8, device=self.device)
        self.dist.all_gather(list(out.split(m)), mine, group=self.group)
        out = out.cpu()
        for j in range(n):
            if counts[j]:
                _view(recv + displs[j], counts[j]).copy_(out[j * m:j * m + counts[j]])

    def _alltoallv(self, send, sb, sd, recv, rb, rd):
        n = self.size
        sc, sdl = [sb[j] for j in range(n)], [sd[j] for j in range(n)]
        rc, rdl = [rb[j] for j in range(n)], [rd[j] for j in range(n)]
        if self.dist is None:
            if sc[0] != rc[0]:
                raise ValueError(f"alltoallv: {sc[0]} bytes to self, {rc[0]} expected")
            if sc[0]:
                ctypes.memmove(recv + rdl[0], send + sdl[0], sc[0])
            return
        ts, tr = sum(sc), sum(rc)
        cpu = self.device.type == "cpu"
        if cpu:
            # gloo: a send and a receive per peer, straight between the C buffers (gloo's
            # all_to_all_single moved half to a third as many bytes per second here: 0.43-0.53
            # s against 0.11-0.30 s for 64 MiB at 2 and 4 ranks, docs/benchmarks.md)
            reqs = []
            for j in range(n):
                if j != self.rank and rc[j]:
                    reqs.append(self.dist.irecv(_view(recv + rdl[j], rc[j]),
                                                src=self.dist.get_global_rank(self.group, j),
                                                group=self.group))
            for j in range(n):
                if j != self.rank and sc[j]:
                    reqs.append(self.dist.isend(_view(send + sdl[j], sc[j]),
                                                dst=self.dist.get_global_rank(self.group, j),
                                                group=self.group))
            me = self.rank
            if sc[me] != rc[me]:
                raise ValueError(f"alltoallv: {sc[me]} bytes to self, {rc[me]} expected")
            if sc[me]:
                ctypes.memmove(recv + rdl[me], send + sdl[me], sc[me])
            for q in reqs:
                q.wait()
            return
        if _packed(sdl, sc):
            inp = _view(send, ts) if ts else torch.empty(0, dtype=torch.uint8)
        else:
            inp = torch.empty(ts, dtype=torch.uint8)
            off = 0
            for j in range(n):
                if sc[j]:
                    inp[off:off + sc[j]].copy_(_view(send + sdl[j], sc[j]))
                off += sc[j]
        if not cpu:
            inp = inp.to(self.device)
        direct = cpu and tr and _packed(rdl, rc)
        out = (_view(recv, tr) if direct
               else torch.empty(tr, dtype=torch.uint8, device=self.device))
        self.dist.all_to_all_single(out, inp, output_split_sizes=rc, input_split_sizes=sc,
                                    group=self.group)
        if not direct:
            out = out.cpu()
            off = 0
            for j in range(n):
                if rc[j]:
                    _view(recv + rdl[j], rc[j]).copy_(out[off:off + rc[j]])
                off += rc[j]

    def _bcast(self, buf, nbytes, root):
        if not nbytes or self.dist is None:
            return
        t = _view(buf, nbytes)
        if self.device.type != "cpu":
            t = t.to(self.device)
        src = self.dist.get_global_rank(self.group, root)
        self.dist.broadcast(t, src=src, group=self.group)
        if self.device.type != "cpu":
            _view(buf, nbytes).copy_(t.cpu())

    def _min(self, values, n):
        if not n or self.dist is None:
            return
        # uint64 order as int64 order: shift by 2^63 (all_reduce has no uint64 MIN)
        t = torch.tensor([values[i] - (1 << 63) for i in range(n)], dtype=torch.int64,
                         device=self.device)
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MIN, group=self.group)
        for i, v in enumerate(t.cpu().tolist()):
            values[i] = v + (1 << 63)


def _layout(mesh_shape, placements, ndim):
    from torch.distributed.tensor import Replicate, Shard
    try:
        from torch.distributed.tensor.placement_types import _StridedShard
    except ImportError:  # a torch without it
        _StridedShard = ()
    if not 1 <= len(mesh_shape) <= _lib.CKPT_LAYOUT_MAX_MESH_NDIM:
        raise UnsupportedError(f"a device mesh of {len(mesh_shape)} dims (at most "
                               f"{_lib.CKPT_LAYOUT_MAX_MESH_NDIM})")
    lay = _lib.Layout()
    lay.mesh_ndim = len(mesh_shape)
    for i, (m, p) in enumerate(zip(mesh_shape, placements)):
        lay.mesh[i] = m
        pl = lay.placements[i]
        pl.split_factor = 1
        if _StridedShard and isinstance(p, _StridedShard):
            pl.kind, pl.dim, pl.split_factor = _PLACE_STRIDED, p.dim, p.split_factor
        elif isinstance(p, Shard):
            pl.kind, pl.dim = _PLACE_SHARD, p.dim
        elif isinstance(p, Replicate):
            pl.kind, pl.dim = _PLACE_REPLICATE, 0
        else:
            raise UnsupportedError(f"placement {p} (a DTensor destination must be Replicate, "
                                   "Shard or _StridedShard)")
        if pl.kind != _PLACE_REPLICATE and pl.dim < 0:
            pl.dim += ndim
    return lay


def _spec(lay):
    buf = ctypes.create_string_buffer(128)
    lib.ckpt_layout_format(byref(lay), buf, len(buf))
    return buf.value.decode()


def _local_shape(lay, shape, coord):
    err = _lib.Error()
    sh = c_void_p()
    st = lib.ckpt_layout_shard_new(byref(lay), len(shape), (c_int64 * max(len(shape), 1))(*shape),
                                   coord, byref(sh), byref(err))
    if st:
        raise from_status(st, err.message.decode("utf-8", "replace"))
    try:
        p = lib.ckpt_layout_shard_local_shape(sh)
        return tuple(p[i] for i in range(len(shape)))
    finally:
        lib.ckpt_layout_shard_free(sh)


class _Plan:
    """This rank's requests: buffers to fill, the copies to make after the execute, the values
    to decode."""

    def __init__(self, handle, ck):
        self.h = handle
        self.ck = ck
        self.keep = []     # buffers the C side fills (alive until the execute returns)
        self.copies = []   # (destination, staging tensor of the stored dtype)
        self.values = []   # (flat key, entry)

    def _buffer(self, dst, e, shape):
        """Where the bytes go: dst itself when it is a contiguous CPU tensor of the stored
        dtype, else a staging tensor copied into dst after the load."""
        if dst.device.type == "cpu" and dst.dtype == e.dtype and dst.is_contiguous():
            return dst
        pin = dst.device.type == "cuda"
        buf = torch.empty(shape, dtype=e.dtype, pin_memory=pin)
        self.copies.append((dst, buf))
        return buf

    def tensor(self, key, e, t):
        from torch.distributed.tensor import DTensor
        err = _lib.Error()
        if tuple(t.shape) != tuple(e.shape):
            raise InvalidArgumentError(
                f"{key}: the state_dict's tensor is {list(t.shape)}, the checkpoint's "
                f"{list(e.shape)}")
        if isinstance(t, DTensor):
            local = t._local_tensor
            coord = t.device_mesh.get_coordinate()
            if coord is None:  # this rank is not in the tensor's mesh: it holds nothing
                return
            lay = _layout(tuple(t.device_mesh.shape), t.placements, len(e.shape))
            cs = (c_uint32 * len(coord))(*coord)
            want = _local_shape(lay, e.shape, cs)
            if tuple(local.shape) != want:
                raise InvalidArgumentError(
                    f"{key}: the DTensor's local shard is {list(local.shape)}, layout "
                    f"{_spec(lay)} gives mesh coordinate {list(coord)} {list(want)}")
            if not local.numel():
                return
            buf = self._buffer(local, e, want)
            self.keep.append(buf)
            st = lib.ckpt_load_request_layout(self.h, key.encode(), byref(lay), cs,
                                              buf.data_ptr(), buf.nbytes, _MEM_HOST, byref(err))
        else:
            if not t.numel():
                return
            buf = self._buffer(t, e, tuple(e.shape))
            self.keep.append(buf)
            st = lib.ckpt_load_request_mem(self.h, key.encode(), None, None, buf.data_ptr(),
                                           buf.nbytes, _MEM_HOST, byref(err))
        if st:
            raise from_status(st, err.message.decode("utf-8", "replace"))


def _agree(tr, exc):
    """Collective: every rank learns whether any failed; all raise the lowest failing rank's
    exception (a CkptError of the same class, its message prefixed with that rank)."""
    if tr.dist is None:
        if exc is not None:
            raise exc
        return
    mine = None
    if exc is not None:
        if isinstance(exc, CkptError):
            mine = (exc.code, str(exc), True)
        else:
            mine = (-1, f"{type(exc).__name__}: {exc}", False)
    got = [None] * tr.size
    tr.dist.all_gather_object(got, mine, group=tr.group)
    for r, g in enumerate(got):
        if g is not None:
            code, msg, is_ckpt = g
            text = msg if tr.size == 1 else f"rank {r}: {msg}"
            e = from_status(code, text) if is_ckpt else CkptError(text)
            raise e from (exc if r == tr.rank else None)


def _open(tr, path, opts):
    """A load handle over transport `tr` (collective: the same status on every rank)."""
    err = _lib.Error()
    h = c_void_p()
    st = lib.ckpt_load_open_transport(byref(tr.struct), os.fsencode(path),
                                      byref(opts) if opts is not None else None, byref(h),
                                      byref(err))
    if st:
        raise from_status(st, err.message.decode("utf-8", "replace"))
    return h


def _execute(h, opts):
    """Runs the load's requests (ckpt_load_execute, collective) and returns this rank's
    LoadStats."""
    err = _lib.Error()
    st = lib.ckpt_load_execute(h, byref(opts), byref(err))
    if st:
        raise from_status(st, err.message.decode("utf-8", "replace"))
    s = _lib.LoadStats()
    lib.ckpt_load_get_stats(h, byref(s), ctypes.sizeof(s))
    return LoadStats(s)


def _group(process_group):
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if not dist.is_available() or not dist.is_initialized():
        if process_group is not None:
            raise InvalidArgumentError("ckptfs.load: process_group given but torch.distributed "
                                       "is not initialized")
        return None
    return process_group if process_group is not None else dist.group.WORLD


def load(state_dict, checkpoint_id, *, process_group=None, mode="collective",
         staging_bytes=0, io_threads=0, max_value_memory=None):
    """Loads `checkpoint_id` (a directory libckpt reads) into `state_dict` in place, like
    `torch.distributed.checkpoint.load`; collective over `process_group` (default: the
    default group; without an initialized torch.distributed, this process alone).

    Each DTensor receives its local shard under its own mesh and placements, each plain tensor
    the whole stored tensor, each non-tensor leaf the value libckpt's data-only decoder builds
    (nothing is unpickled).  Nested dicts and lists are flattened as DCP does, so keys are
    the checkpoint's flat keys (`model.layers.0.attention.wq.weight`).  mode="collective"
    reads each needed stored byte once across the group; "independent" has every rank read
    its own.  max_value_memory: the memory budget of each non-tensor value's decode, as
    Checkpoint's (None: 1 GiB; 0: the reader's limits only); a value needing more raises
    LimitError naming its key and the budget.  Returns this rank's LoadStats.  Any failure
    raises the same CkptError subclass on every rank (the lowest failing rank's)."""
    if mode not in _MODES:
        raise InvalidArgumentError(f"mode {mode!r}: 'collective' or 'independent'")
    _budget(max_value_memory, "max_value_memory")  # checked before any collective call
    if not _lib.has_loader:
        raise UnsupportedError(f"{_lib.path} has no collective loader (ckpt_load_*): use the "
                               "package's own libckpt_load.so.0")
    from torch.distributed.checkpoint._nested_dict import flatten_state_dict
    from torch.distributed.checkpoint._traverse import set_element

    path = os.fspath(checkpoint_id)
    tr = _Transport(_group(process_group))
    flat, mapping = flatten_state_dict(state_dict)
    h = _open(tr, path, None)
    try:
        ck = Checkpoint._borrow(lib.ckpt_load_reader(h), path, max_value_memory)
        plan = _Plan(h, ck)
        exc = None
        try:
            for key, v in flat.items():
                e = ck.find(key)
                if e is None:
                    raise NotFoundError(f"{path}: no entry {key!r} (a key of the state_dict)")
                if isinstance(v, torch.Tensor):
                    if not e.is_tensor:
                        raise InvalidArgumentError(f"{key}: a tensor in the state_dict, a "
                                                   "non-tensor value in the checkpoint")
                    plan.tensor(key, e, v)
                else:
                    plan.values.append((key, e))
        except Exception as x:  # agreed below: every rank raises it
            exc = x
        _agree(tr, exc)

        opts = _lib.LoadOptions()
        opts.mode = _MODES[mode]
        opts.staging_bytes = staging_bytes
        opts.io_threads = io_threads
        opts.transport = 1  # the handle's (this) transport through host memory
        stats = _execute(h, opts)

        exc = None
        try:
            with torch.no_grad():
                for dst, buf in plan.copies:
                    dst.copy_(buf)
            for key, e in plan.values:
                set_element(state_dict, mapping[key], ck.read(e))
        except Exception as x:
            exc = x
        _agree(tr, exc)
        ck.close()
        return stats
    finally:
        lib.ckpt_load_free(h)
