"""ctypes declarations of the public libckpt API (include/ckpt.h) that the package uses.

The library is the libckpt_load.so.0 shipped inside this package (built from the same checkout
as the Python code, without MPI): the reader, the value decoder, manifests, and the collective
loader over a caller-supplied transport (include/ckpt_load.h, ckpt_transport.h), which
ckptfs.load drives over torch.distributed.  CKPTFS_LIBCKPT=/path/to/lib loads another one
instead (a development build: libckpt_load.so.0, or libckpt.so.0, which lacks the loader, so
ckptfs.load then raises UnsupportedError; one built before ckpt_object_load_with decodes
values within the reader's limits only, and an explicit max_memory raises UnsupportedError);
it must export ckpt_version() returning this package's version."""

import ctypes
import os
from ctypes import (POINTER, Structure, c_bool, c_char, c_char_p, c_double, c_int, c_int32,
                    c_int64, c_size_t, c_uint, c_uint32, c_uint64, c_void_p)

try:
    from ._version import __version__  # written by the build (setup.py)
except ImportError:  # running from the source tree
    __version__ = "unknown"

CKPT_ERROR_MSG_MAX = 1024
CKPT_DTYPE_COUNT = 21


class Error(Structure):
    _fields_ = [("code", c_int), ("message", c_char * CKPT_ERROR_MSG_MAX)]


# void report(void *ctx, const ckpt_manifest_record *rec, const ckpt_error *err)
MANIFEST_REPORT_FN = ctypes.CFUNCTYPE(None, c_void_p, c_void_p, POINTER(Error))


class Limits(Structure):
    _fields_ = [("max_metadata_bytes", c_uint64), ("max_pickle_memory", c_uint64),
                ("max_depth", c_uint32), ("max_items", c_uint64),
                ("max_object_bytes", c_uint64), ("max_decoded_cache", c_uint64),
                ("index_threads", c_uint32)]


class OpenOptions(Structure):
    _fields_ = [("limits", POINTER(Limits))]


class ObjectOptions(Structure):
    _fields_ = [("max_memory", c_uint64)]


class ReaderInfo(Structure):
    _fields_ = [("root_class", c_char_p), ("version", c_char_p), ("format_hint", c_char_p),
                ("has_planner_data", c_bool), ("has_storage_meta", c_bool),
                ("rank_local_metadata", c_bool), ("has_mcore_data", c_bool),
                ("hf_storage", c_bool), ("num_metadata_files", c_uint32),
                ("metadata_bytes", c_uint64), ("num_entries", c_uint64),
                ("num_tensors", c_uint64), ("num_objects", c_uint64), ("num_chunks", c_uint64),
                ("num_empty_chunks", c_uint64), ("tensor_bytes", c_uint64),
                ("stored_bytes", c_uint64), ("num_files", c_uint32), ("num_ranks", c_uint32),
                ("num_mcore_flattened", c_uint64),
                ("dtype_counts", c_uint64 * CKPT_DTYPE_COUNT)]


class ChunkInfo(Structure):
    _fields_ = [("offsets", POINTER(c_int64)), ("sizes", POINTER(c_int64)), ("numel", c_uint64),
                ("file_id", c_int32), ("file_offset", c_uint64), ("length", c_uint64),
                ("transforms", c_char_p), ("problem", c_char_p)]


class Placement(Structure):
    _fields_ = [("kind", c_int), ("dim", c_int), ("split_factor", c_uint32)]


CKPT_LAYOUT_MAX_MESH_NDIM = 8


class Layout(Structure):
    _fields_ = [("mesh_ndim", c_int), ("mesh", c_uint32 * CKPT_LAYOUT_MAX_MESH_NDIM),
                ("placements", Placement * CKPT_LAYOUT_MAX_MESH_NDIM)]


# ckpt_transport.h's callbacks
T_ALLGATHERV_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t, c_void_p,
                                   POINTER(c_size_t), POINTER(c_size_t))
T_ALLTOALLV_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, POINTER(c_size_t),
                                  POINTER(c_size_t), c_void_p, POINTER(c_size_t),
                                  POINTER(c_size_t))
T_BCAST_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t, c_int)
T_MIN_FN = ctypes.CFUNCTYPE(c_int, c_void_p, POINTER(c_uint64), c_size_t)
T_STRERROR_FN = ctypes.CFUNCTYPE(c_void_p, c_void_p, c_int)  # (a char *: see _load.py)
T_DESTROY_FN = ctypes.CFUNCTYPE(None, c_void_p)
CKPT_TRANSPORT_VERSION = 1


class Transport(Structure):
    _fields_ = [("version", c_uint), ("rank", c_int), ("size", c_int), ("ctx", c_void_p),
                ("allgatherv", T_ALLGATHERV_FN), ("alltoallv", T_ALLTOALLV_FN),
                ("bcast", T_BCAST_FN), ("allreduce_min_u64", T_MIN_FN),
                ("strerror", T_STRERROR_FN), ("destroy", T_DESTROY_FN),
                ("device", c_void_p)]


class LoadOptions(Structure):
    _fields_ = [("mode", c_int), ("staging_bytes", c_uint64), ("direct_min_bytes", c_uint64),
                ("io_threads", c_uint), ("io_piece_bytes", c_uint64), ("transport", c_int)]


class LoadStats(Structure):
    _fields_ = [("bytes_requested", c_uint64), ("bytes_read", c_uint64),
                ("bytes_sent", c_uint64), ("bytes_received", c_uint64),
                ("bytes_local", c_uint64), ("union_bytes", c_uint64), ("rounds", c_uint32),
                ("seconds_plan", c_double), ("seconds_read", c_double),
                ("seconds_exchange", c_double), ("seconds_total", c_double),
                ("bytes_device", c_uint64), ("transport", c_int),
                ("bytes_sent_nccl", c_uint64), ("bytes_received_nccl", c_uint64),
                ("seconds_nccl_init", c_double), ("io_threads", c_uint),
                ("seconds_setup", c_double), ("preads", c_uint64),
                ("bytes_read_plan", c_uint64), ("bytes_read_metadata", c_uint64),
                ("plan_transfers", c_uint64), ("plan_ranges", c_uint64),
                ("plan_rows", c_uint64), ("plan_memory", c_uint64),
                ("bytes_received_metadata", c_uint64), ("chunks_adopted", c_uint64)]


# The collective loader (libckpt_load): optional, so that CKPTFS_LIBCKPT may name a plain
# libckpt.so.0 (the reader alone); `has_loader` says whether they are there.
_LOAD_PROTOS = [
    ("ckpt_load_open_transport", c_int, [POINTER(Transport), c_char_p, POINTER(OpenOptions),
                                         POINTER(c_void_p), POINTER(Error)]),
    ("ckpt_load_free", None, [c_void_p]),
    ("ckpt_load_reader", c_void_p, [c_void_p]),
    ("ckpt_load_request_mem", c_int, [c_void_p, c_char_p, POINTER(c_int64), POINTER(c_int64),
                                      c_void_p, c_size_t, c_int, POINTER(Error)]),
    ("ckpt_load_request_layout", c_int, [c_void_p, c_char_p, POINTER(Layout),
                                         POINTER(c_uint32), c_void_p, c_size_t, c_int,
                                         POINTER(Error)]),
    ("ckpt_load_execute", c_int, [c_void_p, POINTER(LoadOptions), POINTER(Error)]),
    # (the struct's size: the library writes no more than the mirror holds)
    ("ckpt_load_get_stats", c_size_t, [c_void_p, POINTER(LoadStats), c_size_t]),
]

# A value's decode within a memory budget (ckpt_object_load_with): optional, so that
# CKPTFS_LIBCKPT may name a libckpt built before it; `has_object_budget` says whether it is
# there (without it values are decoded within the reader's limits only: ckptfs.values).
_OBJECT_PROTOS = [
    ("ckpt_object_load_with", c_int, [c_void_p, c_void_p, POINTER(ObjectOptions),
                                      POINTER(c_void_p), POINTER(Error)]),
]

# (name, restype, argtypes)
_PROTOS = [
    ("ckpt_version", c_char_p, []),
    ("ckpt_strerror", c_char_p, [c_int]),
    ("ckpt_dtype_name", c_char_p, [c_int]),
    ("ckpt_dtype_itemsize", c_size_t, [c_int]),
    ("ckpt_reader_open", c_int, [c_char_p, POINTER(OpenOptions), POINTER(c_void_p),
                                 POINTER(Error)]),
    ("ckpt_reader_free", None, [c_void_p]),
    ("ckpt_reader_dir", c_char_p, [c_void_p]),
    ("ckpt_reader_get_info", None, [c_void_p, POINTER(ReaderInfo)]),
    ("ckpt_reader_num_entries", c_size_t, [c_void_p]),
    ("ckpt_reader_entry", c_void_p, [c_void_p, c_size_t]),
    ("ckpt_reader_find", c_void_p, [c_void_p, c_char_p]),
    ("ckpt_reader_find_key", c_void_p, [c_void_p, c_char_p]),
    ("ckpt_reader_find_path", c_void_p, [c_void_p, c_char_p]),
    ("ckpt_reader_num_files", c_size_t, [c_void_p]),
    ("ckpt_reader_file_name", c_char_p, [c_void_p, c_uint32]),
    ("ckpt_entry_key", c_char_p, [c_void_p]),
    ("ckpt_entry_path", c_char_p, [c_void_p]),
    ("ckpt_entry_path_len", c_size_t, [c_void_p]),
    ("ckpt_entry_path_elem", c_char_p, [c_void_p, c_size_t]),
    ("ckpt_entry_path_elem_is_int", c_bool, [c_void_p, c_size_t]),
    ("ckpt_entry_kind_of", c_int, [c_void_p]),
    ("ckpt_entry_index", c_size_t, [c_void_p]),
    ("ckpt_entry_dtype", c_int, [c_void_p]),
    ("ckpt_entry_ndim", c_int, [c_void_p]),
    ("ckpt_entry_shape", POINTER(c_int64), [c_void_p]),
    ("ckpt_entry_numel", c_uint64, [c_void_p]),
    ("ckpt_entry_nbytes", c_uint64, [c_void_p]),
    ("ckpt_entry_num_chunks", c_size_t, [c_void_p]),
    ("ckpt_entry_chunk", c_int, [c_void_p, c_size_t, POINTER(ChunkInfo)]),
    ("ckpt_entry_problem", c_char_p, [c_void_p]),
    ("ckpt_read_region", c_int, [c_void_p, c_void_p, POINTER(c_int64), POINTER(c_int64),
                                 c_void_p, c_size_t, POINTER(Error)]),
    ("ckpt_read_tensor", c_int, [c_void_p, c_void_p, c_void_p, c_size_t, POINTER(Error)]),
    ("ckpt_object_load", c_int, [c_void_p, c_void_p, POINTER(c_void_p), POINTER(Error)]),
    ("ckpt_object_root", c_void_p, [c_void_p]),
    ("ckpt_object_free", None, [c_void_p]),
    ("ckpt_value_type_of", c_int, [c_void_p]),
    ("ckpt_value_bool", c_bool, [c_void_p]),
    ("ckpt_value_int", c_int64, [c_void_p]),
    ("ckpt_value_float", c_double, [c_void_p]),
    ("ckpt_value_str", c_void_p, [c_void_p, POINTER(c_size_t)]),
    ("ckpt_value_len", c_size_t, [c_void_p]),
    ("ckpt_value_item", c_void_p, [c_void_p, c_size_t]),
    ("ckpt_value_dict_key", c_void_p, [c_void_p, c_size_t]),
    ("ckpt_value_dict_val", c_void_p, [c_void_p, c_size_t]),
    ("ckpt_value_set_frozen", c_bool, [c_void_p]),
    ("ckpt_value_object_args", c_void_p, [c_void_p]),
    ("ckpt_value_object_state", c_void_p, [c_void_p]),
    ("ckpt_value_tensor_dtype", c_int, [c_void_p]),
    ("ckpt_value_tensor_ndim", c_int, [c_void_p]),
    ("ckpt_value_tensor_shape", POINTER(c_int64), [c_void_p]),
    ("ckpt_value_tensor_read", c_int, [c_void_p, c_void_p, c_size_t, POINTER(Error)]),
    ("ckpt_value_to_text", c_int, [c_void_p, POINTER(c_void_p), POINTER(Error)]),
    ("ckpt_manifest_load", c_int, [c_char_p, POINTER(c_void_p), POINTER(Error)]),
    ("ckpt_manifest_free", None, [c_void_p]),
    ("ckpt_manifest_num_records", c_size_t, [c_void_p]),
    ("ckpt_manifest_verify", c_int, [c_char_p, c_void_p, c_void_p, c_uint32, c_void_p,
                                     c_void_p, c_void_p, POINTER(c_uint64), POINTER(Error)]),
    ("ckpt_entry_check_layout", c_int, [c_void_p, POINTER(Error)]),
    ("ckpt_entry_check_chunk", c_int, [c_void_p, c_void_p, c_size_t, POINTER(Error)]),
    ("ckpt_layout_format", c_size_t, [POINTER(Layout), c_char_p, c_size_t]),
    ("ckpt_layout_shard_new", c_int, [POINTER(Layout), c_int, POINTER(c_int64),
                                      POINTER(c_uint32), POINTER(c_void_p), POINTER(Error)]),
    ("ckpt_layout_shard_free", None, [c_void_p]),
    ("ckpt_layout_shard_local_shape", POINTER(c_int64), [c_void_p]),
]


def _load():
    override = os.environ.get("CKPTFS_LIBCKPT")
    path = override or os.path.join(os.path.dirname(os.path.abspath(__file__)), LIBNAME)
    if not os.path.exists(path):
        raise ImportError(
            f"ckptfs: {path} is missing: install the package with `python3 -m pip install "
            f"./python` from a ckptfs checkout (the build puts {LIBNAME} into the package), "
            f"or set CKPTFS_LIBCKPT to a built {LIBNAME}")
    lib = ctypes.CDLL(path)  # CDLL: calls release the GIL
    for name, res, args in _PROTOS:
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise ImportError(f"ckptfs: {path} lacks {name}: not the libckpt of this package "
                              f"(reinstall with `python3 -m pip install ./python`)") from None
        fn.restype = res
        fn.argtypes = args
    def optional(protos):
        found = True
        for name, res, args in protos:
            fn = getattr(lib, name, None)
            if fn is None:
                found = False
                continue
            fn.restype = res
            fn.argtypes = args
        return found

    loader = optional(_LOAD_PROTOS)
    object_budget = optional(_OBJECT_PROTOS)
    got = lib.ckpt_version().decode()
    if __version__ != "unknown" and got != __version__:
        raise ImportError(f"ckptfs {__version__}: {path} is libckpt {got}; the package needs "
                          f"the library of its own version (reinstall with `python3 -m pip "
                          f"install ./python` from the checkout)")
    return lib, path, loader, object_budget


LIBNAME = "libckpt_load.so.0"
lib, path, has_loader, has_object_budget = _load()
libc = ctypes.CDLL(None)
libc.free.argtypes = [c_void_p]
libc.free.restype = None
