"""ckptfs.dcp.StorageReader: torch.distributed.checkpoint reads through libckpt.

    import torch.distributed.checkpoint as dcp
    from ckptfs.dcp import StorageReader
    dcp.load(state_dict, storage_reader=StorageReader("ckpt/step-100"))

read_metadata builds torch's Metadata from libckpt's index (the `.metadata` pickle is never
unpickled): a TensorStorageMetadata (dtype, size, the stored chunks) per tensor, a
BytesStorageMetadata per value, planner_data with the planner_data paths (list indices as
ints).  read_data reads each tensor ReadItem's box of the logical tensor with
ckpt_read_region — straight into the destination's memory when it is a contiguous CPU tensor
of the stored dtype, else through a buffer (pinned for CUDA) and `copy_` (which also converts
dtypes, as FileSystemReader does) — and hands each value item to the planner's load_bytes as
a torch.save of the value libckpt decoded without executing anything.  So every format
libckpt reads loads this way: DCP (zstd too), rank-local metadata, HuggingFace safetensors
storage, Megatron torch_dist (flattened_range states in their original shape), torch 1.13.

Under a process group (dcp.load with several ranks) the reads are collective by default
(mode="collective"): the coordinator's prepare_global_plan marks every rank's plan, and each
rank's read_data hands its tensor ReadItems — boxes of the logical tensors — to the
collective loader (libckpt_load, the engine of ckptfs.load) over the group's transport, which
reads every needed stored byte once across the ranks and moves the pieces to the ranks whose
items need them; the destinations are filled from those bytes (resolve_tensor/commit_tensor
as before).  Errors raise the same exception on every rank.  mode="independent", or a plan
of one rank, reads each rank's own items as above."""

import ctypes
import dataclasses
import io
import os
import uuid
from ctypes import byref

import torch
from torch.distributed.checkpoint.metadata import (BytesStorageMetadata, ChunkStorageMetadata,
                                                   Metadata, StorageMeta, TensorProperties,
                                                   TensorStorageMetadata)
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner
from torch.distributed.checkpoint.storage import StorageReader as _TorchStorageReader
from torch.futures import Future

from . import _lib
from ._lib import lib
from ._reader import Checkpoint, _i64
from .errors import InvalidArgumentError, NotFoundError, UnsupportedError, from_status

_READ_ONCE = "ckptfs-read-once"  # storage_data of a plan read collectively: (it, ranks, rank)

__all__ = ["StorageReader"]


class StorageReader(_TorchStorageReader):
    """A torch.distributed.checkpoint StorageReader over libckpt.

    path: the checkpoint directory (None: dcp.load's checkpoint_id gives it, through reset).
    verify: re-hash every stored item against the integrity manifest (`ckpt seal`) when the
    metadata is read; a checkpoint without one is refused.
    mode: "collective" (default): under a process group of several ranks, every needed stored
    byte read once across the ranks and exchanged over process_group; "independent": every
    rank reads its own ReadItems.
    process_group: the group dcp.load runs on (default: the default group); the collective
    reads need it to be that group.
    limits: keyword arguments of ckptfs.Checkpoint (max_metadata_bytes, ...; max_value_memory:
    each value's decode budget, 1 GiB by default, LimitError past it).

    After a collective read_data, `stats` is this rank's ckptfs.LoadStats (else None)."""

    def __init__(self, path=None, *, verify=False, mode="collective", process_group=None,
                 **limits):
        super().__init__()
        if mode not in ("collective", "independent"):
            raise InvalidArgumentError(f"mode {mode!r}: 'collective' or 'independent'")
        self.path = os.fspath(path) if path is not None else None
        self.verify = verify
        self.mode = mode
        self.process_group = process_group
        self.limits = limits
        self.stats = None
        self._ckpt = None
        self.load_id = uuid.uuid4().hex
        self.is_coordinator = False
        self.rank = None

    # ---- life cycle
    def reset(self, checkpoint_id=None):
        self.close()
        if checkpoint_id:
            self.path = os.fspath(checkpoint_id)
        self.load_id = uuid.uuid4().hex

    def close(self):
        if self._ckpt is not None:
            self._ckpt.close()
            self._ckpt = None

    @property
    def checkpoint_id(self):
        return self.path

    @property
    def checkpoint(self):
        """The open ckptfs.Checkpoint (opened on first use)."""
        if self._ckpt is None:
            if self.path is None:
                raise InvalidArgumentError(
                    "ckptfs StorageReader: no checkpoint path (pass one, or checkpoint_id to "
                    "dcp.load)")
            ck = Checkpoint(self.path, **self.limits)
            if self.verify:
                try:
                    ck.verify()
                except BaseException:
                    ck.close()
                    raise
            self._ckpt = ck  # (only once verified: torch retries read_metadata on failure)
        return self._ckpt

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        """A directory holding `.metadata`, rank-local `__<r>.metadata` files or
        `*.safetensors` files (what ckptfs opens)."""
        try:
            p = os.fspath(checkpoint_id)
            if not os.path.isdir(p):
                return False
            names = os.listdir(p)
        except (TypeError, OSError):
            return False
        return any(n == ".metadata" or (n.startswith("__") and n.endswith(".metadata"))
                   or n.endswith(".safetensors") for n in names)

    # ---- metadata
    def read_metadata(self, *args, **kwargs):
        ck = self.checkpoint
        info = ck.info
        sdm = {}
        planner_data = {} if info["has_planner_data"] else None
        for e in ck:
            if e.is_tensor:
                # (a dtype this torch lacks, or an unknown one: listed as uint8, so that a load
                # naming the entry fails in read_data with the reason, not as a missing key)
                dtype = e.dtype or torch.uint8
                chunks = [ChunkStorageMetadata(offsets=torch.Size(o), sizes=torch.Size(s))
                          for o, s in e.chunks]
                sdm[e.key] = TensorStorageMetadata(properties=TensorProperties(dtype=dtype),
                                                   size=torch.Size(e.shape), chunks=chunks)
            else:
                sdm[e.key] = BytesStorageMetadata()
            if planner_data is not None:
                planner_data[e.key] = e.path_elems
        meta = Metadata(state_dict_metadata=sdm, planner_data=planner_data, storage_data={})
        meta.storage_meta = StorageMeta(checkpoint_id=self.path, load_id=self.load_id)
        if hasattr(meta, "version"):
            meta.version = info.get("version") or None
        return meta

    def set_up_storage_reader(self, metadata, is_coordinator, *args, **kwargs):
        self.is_coordinator = is_coordinator
        self.rank = kwargs.get("rank")
        self.checkpoint  # opens it (a no-op when read_metadata did)

    def prepare_local_plan(self, plan: LoadPlan) -> LoadPlan:
        return plan

    def prepare_global_plan(self, plans):
        """(The coordinator, with every rank's plan.)  Plans of several ranks are marked to be
        read collectively, each with its rank, so that every rank's read_data agrees."""
        if self.mode != "collective" or len(plans) < 2:
            return plans
        return [dataclasses.replace(p, storage_data=(_READ_ONCE, len(plans), i))
                for i, p in enumerate(plans)]

    # ---- data
    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future:
        sd = plan.storage_data
        if isinstance(sd, tuple) and len(sd) == 3 and sd[0] == _READ_ONCE:
            self._read_collective(plan, planner, sd[1], sd[2])
            fut = Future()
            fut.set_result(None)
            return fut
        self.stats = None
        ck = self.checkpoint
        for req in plan.items:
            e = ck.find(key=req.storage_index.fqn)
            if e is None:
                raise NotFoundError(f"{self.path}: no entry '{req.storage_index.fqn}'")
            if req.type == LoadItemType.BYTE_IO:
                buf = io.BytesIO()
                torch.save(ck.read_value(e), buf)
                buf.seek(0)
                planner.load_bytes(req, buf)
                continue
            base = req.storage_index.offset or (0,) * len(e.shape)
            region = tuple(slice(b + o, b + o + n) for b, o, n in
                           zip(base, req.storage_offsets, req.lengths))
            target = planner.resolve_tensor(req).detach()
            if tuple(target.shape) != tuple(req.lengths):
                raise InvalidArgumentError(
                    f"'{e.key}': the planner's destination has shape {list(target.shape)}, "
                    f"the read item {list(req.lengths)}")
            if (target.dtype == e.dtype and target.is_contiguous() and not target.is_conj()
                    and not target.is_neg()):
                ck.read_tensor(e, region, out=target)  # CPU: into its memory; CUDA: pinned
            else:  # a strided view, another dtype: read on its device, then copy_ (which
                # converts) as FileSystemReader does
                target.copy_(ck.read_tensor(e, region, device=target.device))
            planner.commit_tensor(req, target)
        fut = Future()
        fut.set_result(None)
        return fut

    def _read_collective(self, plan, planner, nranks, index):
        """read_data of one of `nranks` ranks (this one the plan's `index`): every rank's
        tensor items are requests of one collective load (ckpt_load_execute) over the process
        group, into the destinations themselves where they are contiguous CPU tensors of the
        stored dtype, else into staging tensors copied in afterwards; values are read here."""
        import torch.distributed as dist

        from ._load import _agree, _execute, _open, _Transport
        if not _lib.has_loader:
            raise UnsupportedError(f"{_lib.path} has no collective loader (ckpt_load_*): use "
                                   "mode='independent' or the package's libckpt_load.so.0")
        if not dist.is_available() or not dist.is_initialized():
            raise InvalidArgumentError("ckptfs StorageReader: a plan of several ranks but no "
                                       "torch.distributed process group")
        group = self.process_group if self.process_group is not None else dist.group.WORLD
        tr = _Transport(group)
        if (tr.size, tr.rank) != (nranks, index):
            raise InvalidArgumentError(
                f"ckptfs StorageReader: dcp.load's plan is rank {index} of {nranks}, the "
                f"reader's process_group rank {tr.rank} of {tr.size}: pass dcp.load's "
                "process_group to the StorageReader too (or mode='independent')")
        self.stats = None
        names = [f for f, _ in _lib.Limits._fields_]
        limits = _lib.Limits(*[self.limits.get(n, 0) for n in names])
        h = _open(tr, self.path, _lib.OpenOptions(ctypes.pointer(limits)))
        try:
            ck = Checkpoint._borrow(lib.ckpt_load_reader(h), self.path,
                                    self.limits.get("max_value_memory"))
            tensors, values, exc = [], [], None
            try:
                for req in plan.items:
                    e = ck.find(key=req.storage_index.fqn)
                    if e is None:
                        raise NotFoundError(f"{self.path}: no entry '{req.storage_index.fqn}'")
                    if req.type == LoadItemType.BYTE_IO:
                        values.append((req, e))
                        continue
                    tensors.append(self._request(h, e, req, planner))
            except Exception as x:  # agreed below: every rank raises it
                exc = x
            _agree(tr, exc)

            lo = _lib.LoadOptions()
            lo.mode = 0  # collective
            lo.transport = 1  # the handle's (this) transport through host memory
            self.stats = _execute(h, lo)

            exc = None
            try:
                with torch.no_grad():
                    for req, target, buf in tensors:
                        if buf is not None:
                            target.copy_(buf)
                        planner.commit_tensor(req, target)
                for req, e in values:
                    buf = io.BytesIO()
                    torch.save(ck.read_value(e), buf)
                    buf.seek(0)
                    planner.load_bytes(req, buf)
            except Exception as x:
                exc = x
            _agree(tr, exc)
            ck.close()
        finally:
            lib.ckpt_load_free(h)

    @staticmethod
    def _request(h, e, req, planner):
        """One tensor ReadItem as a request of the load: (item, destination, staging tensor
        or None)."""
        if e.dtype is None:
            raise UnsupportedError(f"'{e.key}': a stored dtype this torch lacks")
        base = req.storage_index.offset or (0,) * len(e.shape)
        start = [b + o for b, o in zip(base, req.storage_offsets)]
        count = list(req.lengths)
        target = planner.resolve_tensor(req).detach()
        if tuple(target.shape) != tuple(count):
            raise InvalidArgumentError(
                f"'{e.key}': the planner's destination has shape {list(target.shape)}, the "
                f"read item {count}")
        if not target.numel():
            return req, target, None
        if (target.device.type == "cpu" and target.dtype == e.dtype and target.is_contiguous()
                and not target.is_conj() and not target.is_neg()):
            buf, stage = target, None
        else:  # a strided view, another dtype or device: staged, then copy_ (which converts)
            buf = stage = torch.empty(count, dtype=e.dtype,
                                      pin_memory=target.device.type == "cuda")
        err = _lib.Error()
        st = lib.ckpt_load_request_mem(h, e.key.encode(), _i64(start) if count else None,
                                       _i64(count) if count else None, buf.data_ptr(),
                                       buf.nbytes, 1, byref(err))  # host memory
        if st:
            raise from_status(st, err.message.decode("utf-8", "replace"))
        return req, target, stage
