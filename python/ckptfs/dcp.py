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
storage, Megatron torch_dist (flattened_range states in their original shape), torch 1.13."""

import io
import os
import uuid

import torch
from torch.distributed.checkpoint.metadata import (BytesStorageMetadata, ChunkStorageMetadata,
                                                   Metadata, StorageMeta, TensorProperties,
                                                   TensorStorageMetadata)
from torch.distributed.checkpoint.planner import LoadItemType, LoadPlan, LoadPlanner
from torch.distributed.checkpoint.storage import StorageReader as _TorchStorageReader
from torch.futures import Future

from ._reader import Checkpoint
from .errors import InvalidArgumentError, NotFoundError

__all__ = ["StorageReader"]


class StorageReader(_TorchStorageReader):
    """A torch.distributed.checkpoint StorageReader over libckpt.

    path: the checkpoint directory (None: dcp.load's checkpoint_id gives it, through reset).
    verify: re-hash every stored item against the integrity manifest (`ckpt seal`) when the
    metadata is read; a checkpoint without one is refused.
    limits: keyword arguments of ckptfs.Checkpoint (max_metadata_bytes, ...)."""

    def __init__(self, path=None, *, verify=False, **limits):
        super().__init__()
        self.path = os.fspath(path) if path is not None else None
        self.verify = verify
        self.limits = limits
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
        return plans

    # ---- data
    def read_data(self, plan: LoadPlan, planner: LoadPlanner) -> Future:
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
