#!/usr/bin/env python3
"""Writes the pickle test vectors of tests/unit/test_pickle.c into this folder.

Valid vectors are real CPython pickles (protocols 0-5) of values whose expected decoding
test_pickle.c spells out; the torch/DCP ones use stand-in classes declared under the real
module names (no torch needed).  Hostile vectors (bad_*.pkl) are hand-assembled opcode
streams.  Stdlib only; deterministic output.

    python3 gen.py                     # (re)write the vectors next to this file
    python3 gen.py --bench N OUT.pkl   # a DCP-shaped .metadata with N chunks, for timing
"""
import collections
import dataclasses
import enum
import io
import os
import pickle
import struct
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))


# ---------------------------------------------------------------- stand-in torch classes


def module(name):
    m = sys.modules.get(name)
    if m is None:
        m = types.ModuleType(name)
        sys.modules[name] = m
    return m


def place(cls_or_fn, modname, name=None):
    name = name or cls_or_fn.__name__
    cls_or_fn.__module__ = modname
    cls_or_fn.__qualname__ = name
    setattr(module(modname), name, cls_or_fn)
    return cls_or_fn


class Size(tuple):
    def __reduce__(self):
        return (Size, (tuple(self),))


place(Size, "torch")


class dtype:
    __module__ = "torch"

    def __init__(self, name):
        self.name = name

    def __reduce__(self):
        return self.name


for _n in ("float32", "bfloat16", "int64"):
    setattr(module("torch"), _n, dtype(_n))


def _get_layout(name):
    return name


place(_get_layout, "torch.serialization")


class layout:
    def __reduce__(self):
        return (_get_layout, ("torch.strided",))


MD = "torch.distributed.checkpoint.metadata"


class _MEM_FORMAT_ENCODING(enum.Enum):
    TORCH_CONTIGUOUS_FORMAT = 0
    TORCH_CHANNELS_LAST = 1
    TORCH_PRESERVE_FORMAT = 2


place(_MEM_FORMAT_ENCODING, MD)


@dataclasses.dataclass
class ChunkStorageMetadata:
    offsets: Size
    sizes: Size


@dataclasses.dataclass
class TensorProperties:
    dtype: object
    layout: object = None
    requires_grad: bool = False
    memory_format: object = _MEM_FORMAT_ENCODING.TORCH_CONTIGUOUS_FORMAT
    pin_memory: bool = False

    def __getstate__(self):
        return (self.dtype, self.layout, self.requires_grad, self.memory_format,
                self.pin_memory)

    def __setstate__(self, state):
        (self.dtype, self.layout, self.requires_grad, self.memory_format,
         self.pin_memory) = state


@dataclasses.dataclass
class TensorStorageMetadata:
    properties: TensorProperties
    size: Size
    chunks: list


@dataclasses.dataclass
class BytesStorageMetadata:
    pass


@dataclasses.dataclass(frozen=True)
class MetadataIndex:
    fqn: str
    offset: object = None
    index: object = dataclasses.field(hash=False, compare=False, default=None)

    def __init__(self, fqn, offset=None, index=None):
        object.__setattr__(self, "fqn", fqn)
        object.__setattr__(self, "index", index)
        if offset is not None:
            object.__setattr__(self, "offset", Size(offset))


@dataclasses.dataclass
class Metadata:
    state_dict_metadata: dict
    planner_data: object = None
    storage_data: object = None
    version: object = None


@dataclasses.dataclass
class _StorageInfo:
    relative_path: str
    offset: int
    length: int


for _c in (ChunkStorageMetadata, TensorProperties, TensorStorageMetadata,
           BytesStorageMetadata, MetadataIndex, Metadata):
    place(_c, MD)
place(_StorageInfo, "torch.distributed.checkpoint.filesystem")


def make_metadata(nchunks_big=2):
    """A DCP .metadata: tensor 'model.w' (4x3 float32, `nchunks_big` row chunks), tensor
    'model.b' (bf16, one chunk at a file offset above 2**32) and an object entry."""
    props = lambda dt: TensorProperties(getattr(module("torch"), dt), layout())
    rows = 2 * nchunks_big
    chunks = [ChunkStorageMetadata(Size((2 * i, 0)), Size((2, 3))) for i in range(nchunks_big)]
    sdm = {
        "model.w": TensorStorageMetadata(props("float32"), Size((rows, 3)), chunks),
        "model.b": TensorStorageMetadata(
            props("bfloat16"), Size((3,)), [ChunkStorageMetadata(Size((0,)), Size((3,)))]),
        "optim.lr": BytesStorageMetadata(),
    }
    storage = {}
    for i, c in enumerate(chunks):
        storage[MetadataIndex("model.w", tuple(c.offsets), i)] = _StorageInfo(
            "__%d_0.distcp" % (i % 8), 1000 * i, 789)
    storage[MetadataIndex("model.b", (0,), 0)] = _StorageInfo("__0_0.distcp", 5000000000, 70)
    storage[MetadataIndex("optim.lr")] = _StorageInfo("__0_0.distcp", 123, 456)
    planner = {"model.w": ("model", "w"), "model.b": ("model", "b"),
               "optim.lr": ("optim", "param_groups", 0, "lr")}
    return Metadata(sdm, planner, storage, "1.0.0")


# ---------------------------------------------------------------- other test classes


class Point:
    def __init__(self, x, y):
        self.x = x
        self.y = y


class KW:
    def __new__(cls, a, *, k=0):
        self = object.__new__(cls)
        self.a = a
        self.k = k
        return self

    def __getnewargs_ex__(self):
        return ((self.a,), {"k": self.k})


class Storage:
    pass


class FloatStorage:
    pass


place(FloatStorage, "torch")


class PidPickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            if self.proto == 0:
                return "storage0"
            return ("storage", FloatStorage, "0", "cpu", 6)
        return None


class PidUnpickler(pickle.Unpickler):
    def persistent_load(self, pid):
        return ("PID", pid)


def pid_dumps(obj, proto):
    f = io.BytesIO()
    p = PidPickler(f, protocol=proto)
    p.proto = proto
    p.dump(obj)
    return f.getvalue()


# ---------------------------------------------------------------- vectors

NESTED = {"a": [1, 2, (3, 4.5, None)], "b": {"x": True, "y": False}, "c": "h\u00e9llo",
          "e": (), "f": []}
INTS = [0, 1, -1, 255, 256, 65535, 65536, -2**31, 2**31 - 1, 2**31, 2**63 - 1, -2**63,
        2**63, -2**63 - 1, 2**100, -2**100]
FLOATS = [0.0, -0.0, 1.5, -2.25, 1e300, float("inf"), float("-inf"), float("nan"), 1e-310]
STRINGS = ["", "ascii", "h\u00e9llo w\u00f6rld", "\u65e5\u672c\u8a9e", "\U0001F600",
           "a\\b\nc", "nul\x00byte"]
BYTES = [b"", b"\x00\xffabc", b"x" * 300]


def valid_vectors():
    v = {}
    for p in range(6):
        v["nested_p%d" % p] = pickle.dumps(NESTED, protocol=p)
    for p in (0, 2, 4):
        v["ints_p%d" % p] = pickle.dumps(INTS, protocol=p)
    for p in (0, 4):
        v["floats_p%d" % p] = pickle.dumps(FLOATS, protocol=p)
    for p in (0, 1, 4):
        v["strings_p%d" % p] = pickle.dumps(STRINGS, protocol=p)
    for p in (2, 3):
        v["bytes_p%d" % p] = pickle.dumps(BYTES, protocol=p)
    v["bytearray_p5"] = pickle.dumps(bytearray(b"ba"), protocol=5)
    v["codecs_bytes_p2"] = pickle.dumps(b"\x00\x80\xffA", protocol=2)
    for p in (2, 4):
        v["sets_p%d" % p] = pickle.dumps([{1, 2, 3}, frozenset({"a"})], protocol=p)
        x = [1, 2]
        v["memo_shared_p%d" % p] = pickle.dumps([x, x, {"k": x}], protocol=p)
        v["ordered_dict_p%d" % p] = pickle.dumps(
            collections.OrderedDict([("b", 1), ("a", 2)]), protocol=p)
    for p in (0, 2, 4):
        a = []
        a.append(a)
        v["selfref_p%d" % p] = pickle.dumps(a, protocol=p)
        v["instance_p%d" % p] = pickle.dumps(Point(1, "two"), protocol=p)
    v["newobj_ex_p4"] = pickle.dumps(KW(7, k=8), protocol=4)
    v["frame_p5"] = pickle.dumps({"k": list(range(10)), "s": "x" * 100}, protocol=5)
    for p in (0, 2):
        v["persid_p%d" % p] = pid_dumps({"t": Storage()}, p)
    for p in (3, 4):
        v["metadata_p%d" % p] = pickle.dumps(make_metadata(), protocol=p)

    # Hand-assembled streams of opcodes Python 3 no longer writes (checked against
    # pickle.loads below).
    v["inst_obj_p0"] = b"((I1\nS'a'\ni__main__\nPoint\n(c__main__\nPoint\nI2\nS'b'\nol."
    v["py2str_p0"] = (b"(S'abc\\x80\\n'\nS\"q'\\\\\"\nT\x03\x00\x00\x00\xc3\xa9!"
                      b"U\x02\xe9!l.")
    v["stack_ops_p0"] = b"(N(I7\n1I8\n20t(K\x01(0tI5\np3\n(g3\ng3\nt\x85\x87\x86."
    v["long_ops_p4"] = (b"\x80\x04(\x8d\x03\x00\x00\x00\x00\x00\x00\x00h\xc3\xa9"
                        b"\x8e\x02\x00\x00\x00\x00\x00\x00\x00\x00\xff"
                        b"\x8b\x02\x00\x00\x00\xff\x7f"
                        b"\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\xff"
                        b"\x8a\x00L-12345678901234567890123L\nI00\nI01\nF2.5\nt.")
    v["memo_sparse_p4"] = (b"\x80\x04K\x05r\x00\x00\x10\x00K\x06\x94j\x00\x00\x10\x00"
                           b"h\x01\x86\x86.")
    return v


def hostile_vectors():
    deep = 600
    return {
        "bad_unknown_op": b"\x80\x02\xff",
        "bad_binunicode8_huge": b"\x80\x04\x8d" + (2**60).to_bytes(8, "little") + b"abc.",
        "bad_binbytes8_huge": b"\x80\x04\x8e" + b"\xff" * 8 + b"abc.",
        "bad_binunicode_huge": b"\x80\x02X\xff\xff\xff\xffabc.",
        "bad_long_binget_missing": b"\x80\x02j\x39\x30\x00\x00.",
        "bad_long_binput_max": b"\x80\x02Nr\xff\xff\xff\xff.",
        "bad_stack_global_nonstr": b"\x80\x04K\x01K\x02\x93.",
        "bad_underflow_append": b"\x80\x02K\x01a.",
        "bad_underflow_mark": b"\x80\x02](K\x01a.",
        "bad_pop_empty": b"0.",
        "bad_tuple_nomark": b"K\x01t.",
        "bad_stop_empty": b".",
        "bad_no_stop": b"\x80\x02N",
        "bad_next_buffer": b"\x80\x05\x97.",
        "bad_readonly_buffer": b"\x80\x05C\x01a\x98.",
        "bad_ext1": b"\x80\x02\x82\x01.",
        "bad_setitems_list": b"\x80\x02](K\x01K\x02u.",
        "bad_appends_dict": b"\x80\x02}(K\x01e.",
        "bad_odd_setitems": b"\x80\x02}(K\x01u.",
        "bad_build_list": b"\x80\x02]}X\x01\x00\x00\x00aK\x01sb.",
        "bad_reduce_nontuple": b"\x80\x02c__builtin__\nlist\nK\x01R.",
        "bad_utf8": b"\x80\x04\x8c\x02\xc3\x28.",
        "bad_surrogate": b"\x80\x04\x8c\x03\xed\xa0\x80.",
        "bad_long4_negative": b"\x80\x02\x8b\xff\xff\xff\xff.",
        "bad_proto6": b"\x80\x06N.",
        "bad_get_missing": b"g5\n.",
        "bad_global_nul": b"cos\x00x\nsystem\n.",
        "bad_deep_lists": b"\x80\x02" + b"]" * deep + b"a" * (deep - 1) + b".",
        "bad_deep_marks": b"(" * deep + b"Nt" + b"t" * (deep - 1) + b".",
    }


# Hostile streams Python itself accepts (our bounds or strictness are tighter).  Note
# bad_global_nul: CPython 3.11 imports "os\0x" as os and returns os.system, so a NUL in a
# module name must never reach a consumer's strcmp.
PYTHON_ACCEPTS = {"bad_long_binput_max", "bad_surrogate", "bad_deep_lists", "bad_deep_marks",
                  "bad_readonly_buffer", "bad_global_nul"}


def check(vectors):
    for name, data in sorted(vectors.items()):
        bad = name.startswith("bad_")
        try:
            if name.startswith("persid"):
                PidUnpickler(io.BytesIO(data)).load()
            else:
                pickle.loads(data, encoding="latin1")
            ok = True
        except Exception:
            ok = False
        if bad and ok and name not in PYTHON_ACCEPTS:
            raise SystemExit("%s: Python accepts it" % name)
        if not bad and not ok:
            raise SystemExit("%s: Python rejects it" % name)


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--bench":
        n = int(sys.argv[2])
        with open(sys.argv[3], "wb") as f:
            pickle.dump(make_metadata(n), f, protocol=4)
        return
    vectors = valid_vectors()
    vectors.update(hostile_vectors())
    check(vectors)
    for name, data in sorted(vectors.items()):
        with open(os.path.join(HERE, name + ".pkl"), "wb") as f:
            f.write(data)
    print("wrote %d vectors to %s" % (len(vectors), HERE))


if __name__ == "__main__":
    main()
