#!/usr/bin/env python3
"""Generates the test vectors of tests/unit/test_value.c (stdlib only; numpy optional).

For every vector NAME it writes
  NAME.pkl      the pickle, written by CPython (protocol 2 like torch.save, some protocol 4)
  NAME.json     expected ckpt_value_to_json output
  NAME.txt      expected ckpt_value_to_text output
  NAME.pk.json  expected pk_to_json output (the raw pickle tree)
and lists them in vectors.txt as "NAME VALUE_STATUS PK_STATUS", a status being
  ok     the rendering must equal the expected file byte for byte
  limit  converting (VALUE_STATUS) / rendering (PK_STATUS) must fail with CKPT_E_LIMIT
  convert  (VALUE_STATUS only) converting must succeed; the renderings are not checked
  skip   not checked (e.g. renderings that would be exponentially large)

The expected texts are computed here from the Python values with the rules documented in
src/value/convert.c, render_json.c, render_text.c and pk_json.c; the pk.json files come
from unpickling with a pure-Python Unpickler that keeps globals, calls and persistent ids
symbolic.  tensor_item.zip is a torch.save-style archive holding two tensors.  Run it from
anywhere: it writes next to itself.
"""
import collections
import copyreg
import datetime
import enum
import io
import json
import math
import os
import pickle
import random
import re
import struct
import sys
import types
import zipfile

OUT = os.path.dirname(os.path.abspath(__file__))

# ----------------------------------------------------------------- stand-in modules


def _module(name):
    m = types.ModuleType(name)
    sys.modules[name] = m
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, m)
    return m


torch = _module("torch")


class Size(tuple):
    def __reduce__(self):
        return (Size, (tuple(self),))


Size.__module__ = "torch"
torch.Size = Size


class dtype:
    def __init__(self, name):
        self.name = name

    def __reduce__(self):
        return self.name


dtype.__module__ = "torch"
torch.float32 = dtype("float32")
torch.bfloat16 = dtype("bfloat16")

app = _module("myapp")
state = _module("myapp.state")
dcp = _module("torch.distributed")
dcp = _module("torch.distributed.checkpoint")
dcpm = _module("torch.distributed.checkpoint.metadata")


def _in(mod, cls):
    cls.__module__ = mod.__name__
    setattr(mod, cls.__name__, cls)
    return cls


@lambda c: _in(state, c)
class Config:
    def __init__(self, **kw):
        self.__dict__.update(kw)


@lambda c: _in(state, c)
class Point:
    __slots__ = ("x", "y")

    def __init__(self, x, y):
        self.x, self.y = x, y


@lambda c: _in(state, c)
class Device:
    def __init__(self, kind, index):
        self.kind, self.index = kind, index

    def __reduce__(self):
        return (Device, (self.kind, self.index))


@lambda c: _in(state, c)
class Registry(dict):
    pass


@lambda c: _in(state, c)
class Log(list):
    pass


@lambda c: _in(state, c)
class Keyed:
    def __new__(cls, a, *, b):
        o = object.__new__(cls)
        o._args = (a, b)
        return o

    def __getnewargs_ex__(self):
        return (self._args[0],), {"b": self._args[1]}

    def __getstate__(self):
        return None


@lambda c: _in(state, c)
class Color(enum.Enum):
    RED = 1
    GREEN = 2


@lambda c: _in(state, c)
class Format(enum.Enum):
    """Pickled by name, as newer Pythons pickle enum members (getattr(cls, 'NAME'))."""
    CONTIGUOUS = 0
    CHANNELS_LAST = 1

    def __reduce_ex__(self, proto):
        return getattr, (self.__class__, self._name_)


for _name in ("Metadata", "TensorStorageMetadata", "TensorProperties", "ChunkStorageMetadata",
              "BytesStorageMetadata", "MetadataIndex"):
    _in(dcpm, type(_name, (), {"__init__": lambda self, **kw: self.__dict__.update(kw)}))


def _props_getstate(self):
    return (self.dtype, self.layout, self.requires_grad, self.memory_format, self.pin_memory)


dcpm.TensorProperties.__getstate__ = _props_getstate
_in(dcp, type("_StorageInfo", (), {"__init__": lambda self, **kw: self.__dict__.update(kw)}))

# ----------------------------------------------------------------- expected ckpt_value renderings

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def qualname(obj):
    q = getattr(obj, "__qualname__", None) or obj.__name__
    return "%s.%s" % (pickle.whichmodule(obj, q), q)


class Ref:
    """A bare reference: class, function, torch dtype, enum member."""

    def __init__(self, name):
        self.name = name


class Obj:
    def __init__(self, name, args, kwargs=None, state=None, listitems=None, dictitems=None,
                 spell=None):
        self.name, self.args, self.kwargs, self.state = name, args, kwargs, state
        self.listitems, self.dictitems = listitems, dictitems
        self.spell = spell  # builtins Python's repr spells its own way: complex, range, ...


def numpy_scalar(v):
    """A numpy scalar of a simple dtype as a Python value, else None."""
    try:
        import numpy as np
    except ImportError:
        return None
    if not isinstance(v, np.generic):
        return None
    if v.dtype.kind == "b":
        return bool(v)
    if v.dtype.kind in "iu" and v.dtype.itemsize in (1, 2, 4, 8):
        return int(v)
    if v.dtype.kind == "f" and v.dtype.itemsize in (2, 4, 8):
        return float(v)
    return None


def normalize(v, proto):
    """Python value -> the value tree ck_object_from_pickle is expected to build."""
    if type(v) in (type(None), bool, int, float, str, bytes):
        return v
    ns = numpy_scalar(v)
    if ns is not None:
        return ns
    if isinstance(v, (type, types.FunctionType, types.BuiltinFunctionType)):
        return Ref(qualname(v))
    if isinstance(v, dtype):
        return Ref("torch." + v.name)
    if type(v) is bytearray and proto < 5:  # pickle's save_bytearray
        return Obj("builtins.bytearray", (bytes(v),) if v else (), spell="bytearray")
    if type(v) is complex:  # complex.__reduce__: builtins.complex(real, imag)
        return Obj("builtins.complex", (v.real, v.imag), spell="complex")
    if type(v) is range:  # range.__reduce__; protocol 2 names it __builtin__.xrange
        return Obj("builtins.range", (v.start, v.stop, v.step), spell="range")
    if type(v) in (datetime.date, datetime.datetime, datetime.time) and \
            getattr(v, "tzinfo", None) is None and not getattr(v, "fold", 0):
        # __reduce__: the class applied to the packed-bytes state; repr(v) is the text
        o = Obj("datetime." + type(v).__name__, (v.__reduce__()[1][0],), spell="repr")
        o.text = repr(v)
        return o
    if type(v) is datetime.timedelta:
        o = Obj("datetime.timedelta", (v.days, v.seconds, v.microseconds), spell="repr")
        o.text = repr(v)
        return o
    if type(v) is slice:
        return Obj("builtins.slice", tuple(normalize(x, proto) for x in (v.start, v.stop, v.step)),
                   spell="slice")
    if isinstance(v, Size):
        return tuple(normalize(x, proto) for x in v)
    if type(v) in (collections.OrderedDict, collections.defaultdict):
        return {"__pairs__": [(normalize(k, proto), normalize(x, proto)) for k, x in v.items()]}
    if type(v) is tuple:
        return tuple(normalize(x, proto) for x in v)
    if type(v) is list:
        return [normalize(x, proto) for x in v]
    if type(v) in (set, frozenset):
        return {"__set__": [normalize(x, proto) for x in v], "frozen": type(v) is frozenset}
    if type(v) is dict:
        return {"__pairs__": [(normalize(k, proto), normalize(x, proto)) for k, x in v.items()]}
    # anything else: what pickle's save_reduce writes
    rv = copyreg.dispatch_table.get(type(v))
    rv = rv(v) if rv else v.__reduce_ex__(proto)
    if isinstance(rv, str):
        return Ref("%s.%s" % (pickle.whichmodule(v, rv), rv))
    rv = tuple(rv) + (None,) * (5 - len(rv))
    func, args, st, li, di = rv[:5]
    kwargs = None
    if func is getattr and st is None and isinstance(args[0], type):
        return Ref("%s.%s" % (qualname(args[0]), args[1]))
    if getattr(func, "__name__", "") == "__newobj__":
        func, args = args[0], args[1:]
    elif getattr(func, "__name__", "") == "__newobj_ex__":
        func, args, kwargs = args
    li = list(li) if li is not None else []
    di = list(di) if di is not None else []
    return Obj(qualname(func), tuple(normalize(a, proto) for a in args),
               None if kwargs is None else normalize(dict(kwargs), proto),
               None if st is None else normalize(st, proto),
               [normalize(x, proto) for x in li] or None,
               {"__pairs__": [(normalize(k, proto), normalize(x, proto)) for k, x in di]}
               if di else None)


def to_json(n):
    """Normalized tree -> object json.dumps renders as ckpt_value_to_json does."""
    if isinstance(n, bytes):
        return {"__bytes__": n.hex()}
    if isinstance(n, (tuple, list)):
        return [to_json(x) for x in n]
    if isinstance(n, Ref):
        return {"__object__": n.name}
    if isinstance(n, Obj):
        o = {"__object__": n.name, "args": to_json(n.args)}
        for k in ("kwargs", "state", "listitems", "dictitems"):
            if getattr(n, k) is not None:
                o[k] = to_json(getattr(n, k))
        return o
    if isinstance(n, dict) and "__set__" in n:
        return [to_json(x) for x in n["__set__"]]
    if isinstance(n, dict):
        pairs = n["__pairs__"]
        if all(type(k) is str for k, _ in pairs):
            return {k: to_json(x) for k, x in pairs}
        return {"__dict__": [[to_json(k), to_json(x)] for k, x in pairs]}
    return n


def to_text(n):
    """Normalized tree -> ckpt_value_to_text output."""
    if isinstance(n, tuple):
        return "(" + ", ".join(map(to_text, n)) + ("," if len(n) == 1 else "") + ")"
    if isinstance(n, list):
        return "[" + ", ".join(map(to_text, n)) + "]"
    if isinstance(n, Ref):
        return n.name
    if isinstance(n, Obj) and n.spell == "complex":
        return repr(complex(*n.args))
    if isinstance(n, Obj) and n.spell == "range":
        return repr(range(*n.args))
    if isinstance(n, Obj) and n.spell == "bytearray":
        return repr(bytearray(*n.args))  # escapes ' even inside "..."
    if isinstance(n, Obj) and n.spell == "repr":
        return n.text
    if isinstance(n, Obj) and n.spell == "slice":
        return "slice(%s)" % ", ".join(map(to_text, n.args))
    if isinstance(n, Obj):
        parts = [to_text(a) for a in n.args]
        for key, part in (("kwargs", n.kwargs), ("state", n.state)):
            if part is None:
                continue
            if isinstance(part, dict) and "__pairs__" in part and all(
                    type(k) is str and IDENT.match(k) for k, _ in part["__pairs__"]):
                parts += ["%s=%s" % (k, to_text(x)) for k, x in part["__pairs__"]]
            else:
                parts.append("%s=%s" % (key, to_text(part)))
        for part in (n.listitems, n.dictitems):
            if part is not None:
                parts.append("items=" + to_text(part))
        return "%s(%s)" % (n.name, ", ".join(parts))
    if isinstance(n, dict) and "__set__" in n:
        body = "{" + ", ".join(map(to_text, n["__set__"])) + "}" if n["__set__"] else ""
        if n["frozen"]:
            return "frozenset(%s)" % body
        return body or "set()"
    if isinstance(n, dict):
        return "{" + ", ".join("%s: %s" % (to_text(k), to_text(x)) for k, x in n["__pairs__"]) + "}"
    return repr(n)


def dumps(o):
    return json.dumps(o, separators=(",", ":"), ensure_ascii=False, allow_nan=True)

# ----------------------------------------------------------------- expected pk_to_json


class RGlobal:
    def __init__(self, module, name):
        self.module, self.name = module, name

    def __new__(klass, *args, **kwargs):
        if isinstance(klass, RGlobal):  # NEWOBJ / NEWOBJ_EX: cls.__new__(cls, *args)
            return RObj(klass, args, kwargs if kwargs or _newobj_ex[0] else None)
        return object.__new__(klass)

    def __call__(self, *args):  # REDUCE
        return RObj(self, args, None)


_newobj_ex = [False]


class RObj:
    def __init__(self, cls, args, kwargs):
        self.cls, self.args, self.kwargs = cls, args, kwargs
        self.state = self.listitems = self.dictitems = None

    def __call__(self, *args):  # REDUCE on a non-global callable
        return RObj(self, args, None)

    def __setstate__(self, st):
        self.state = st

    def append(self, x):
        self.listitems = (self.listitems or []) + [x]

    def extend(self, xs):
        for x in xs:
            self.append(x)

    def __setitem__(self, k, x):
        self.dictitems = (self.dictitems or []) + [(k, x)]


class RPersid:
    def __init__(self, pid):
        self.pid = pid


class RawUnpickler(pickle._Unpickler):
    def find_class(self, module, name):
        return RGlobal(module, name)

    def persistent_load(self, pid):
        return RPersid(pid)

    def load_newobj_ex(self):
        _newobj_ex[0] = True
        try:
            super().load_newobj_ex()
        finally:
            _newobj_ex[0] = False


RawUnpickler.dispatch = dict(pickle._Unpickler.dispatch)
RawUnpickler.dispatch[pickle.NEWOBJ_EX[0]] = RawUnpickler.load_newobj_ex


def pk_json(v):
    if isinstance(v, bytes):
        return {"__bytes__": v.hex()}
    if isinstance(v, (tuple, list, set, frozenset)):
        return [pk_json(x) for x in v]
    if isinstance(v, dict):
        if all(type(k) is str for k in v):
            return {k: pk_json(x) for k, x in v.items()}
        return {"__dict__": [[pk_json(k), pk_json(x)] for k, x in v.items()]}
    if isinstance(v, RGlobal):
        return {"__global__": "%s.%s" % (v.module, v.name)}
    if isinstance(v, RPersid):
        return {"__persid__": pk_json(v.pid)}
    if isinstance(v, RObj):
        c = v.cls
        if (isinstance(c, RGlobal) and (c.module, c.name) == ("torch", "Size") and
                len(v.args) == 1 and isinstance(v.args[0], (tuple, list)) and v.kwargs is None
                and v.state is None and v.listitems is None and v.dictitems is None):
            return pk_json(v.args[0])
        o = {"__object__": "%s.%s" % (c.module, c.name) if isinstance(c, RGlobal) else pk_json(c),
             "args": pk_json(v.args)}
        if v.kwargs is not None:
            o["kwargs"] = pk_json(v.kwargs)
        if v.state is not None:
            o["state"] = pk_json(v.state)
        if v.listitems is not None:
            o["listitems"] = pk_json(v.listitems)
        if v.dictitems is not None:
            o["dictitems"] = pk_json(dict(v.dictitems))
        return o
    return v

# ----------------------------------------------------------------- vectors


def vectors():
    nan, inf = float("nan"), float("inf")
    floats = [0.001, 1e-05, 1e16, 1e15, 123456789.123, 5e-324, 1.7976931348623157e308, -0.0, 0.0,
              nan, inf, -inf, 0.1, 1.0, 100.0, 0.0001, 2.5e-07, 1 / 3, -1.5e+300,
              9007199254740993.0, 1234567890123456.0, 7.174648137343064e-43]
    yield "floats", floats, 2
    strings = ["", "plain", "it's", 'say "hi"', "both ' and \"", "back\\slash", "new\nline",
               "tab\there", "cr\rx", "\x00\x01\x1b\x1f\x7f", "\b\f", "é ñ ü", "日本語", "😀 emoji",
               "nbsp\xa0x", "soft\xadhyphen", "zw\u200bsp", "\u2028\u2029", "\x85", "ÿ",
               "\ufeffbom", "\ue000private", "\U0010fffd", "\ufffe"]
    yield "strings", strings, 2
    yield "strings_p4", strings, 4
    optim = {"lr": 0.001, "betas": (0.9, 0.999), "eps": 1e-08, "weight_decay": 0.0,
             "amsgrad": False, "maximize": True, "foreach": None, "params": ["model.w", "model.b"],
             "step": 10}
    yield "optim", optim, 2
    yield "optim_p4", optim, 4
    nested = {"a": [1, (2,), (), {3, 4}, set(), frozenset({5}), [[]]],
              "b": {"c": {"d": ({"e": None},)}}, "t": (1, 2, 3), "neg": -7}
    yield "nested", nested, 2
    yield "nested_p4", nested, 4
    ints = [0, 1, -1, 255, 256, 2 ** 31, -2 ** 31 - 1, 2 ** 63 - 1, -2 ** 63, 2 ** 63,
            -2 ** 63 - 1, 2 ** 64, 2 ** 100, -2 ** 70, 10 ** 30, -10 ** 40, 2 ** 1000]
    yield "ints", ints, 2
    yield "ints_p4", ints, 4
    byts = [b"", b"abc", bytes(range(256)), b"it's", b'"q"', b"'\"", bytearray(b"xy"),
            bytearray()]
    yield "bytes", byts, 2
    yield "bytes_p4", byts, 4
    od = collections.OrderedDict([("x", 1), ("y", [2, 3])])
    dd = collections.defaultdict(list, {"k": [1]})
    yield "ordered", {"od": od, "dd": dd, "empty": collections.OrderedDict()}, 2
    yield "ordered_p4", {"od": od, "dd": dd}, 4
    reg = state.Registry(a=1)
    reg.tag = "r"
    log = state.Log([1, 2])
    objs = {"cfg": state.Config(lr=0.1, name="x", tags=["a"], **{"not an ident": 1}),
            "cfg2": state.Config(lr=0.2),
            "pt": state.Point(1, 2), "dev": state.Device("cuda", 0), "color": state.Color.GREEN,
            "fmt": state.Format.CHANNELS_LAST,
            "cls": state.Config, "fn": len, "dtype": torch.float32, "size": torch.Size([4, 4]),
            "reg": reg, "log": log, "cplx": complex(1, -2), "keys": {1: "a", (2, 3): "b", None: 0}}
    yield "objects", objs, 2
    objs_p4 = dict(objs, kw=state.Keyed(1, b=2))
    yield "objects_p4", objs_p4, 4
    try:
        import numpy as np
    except ImportError:
        np = None
    if np is not None:
        nps = [np.float64(0.5), np.int64(3), np.float32(1.5), np.float32(0.1), np.bool_(True),
               np.bool_(False), np.uint64(2 ** 64 - 1), np.int8(-5), np.uint16(65535),
               np.float16(0.1), np.int32(-2 ** 31), np.complex128(1 + 2j)]
        yield "numpy", nps, 2
        yield "numpy_p4", nps, 4
    yield "floats_random", random_floats(), 4
    # values whose text must be Python's own repr (checked against repr(pickle.loads(...)) in
    # main): the builtins Python spells without a module, nested in containers
    reprs = {"complex": [complex(1, 2), complex(0, 2), complex(-0.0, 1), complex(1, -0.0),
                         complex(1.5, nan), complex(inf, -inf), 0j, complex(1e20, 1e-5),
                         complex(100, -1), complex(-nan, 0.1)],
             "frozenset": [frozenset(), frozenset({1, 2}), frozenset({(1, "a")}),
                           {frozenset({3})}, (frozenset(),)],
             "range": [range(10), range(0, 10, 2), range(5, -5, -1), range(0), range(2 ** 70),
                       range(-2 ** 65, 3, 7)],
             "slice": [slice(1, 2, None), slice(None, None, -1), slice("a", (1,), 2.5)],
             "bytearray": [bytearray(b"xy'"), bytearray()],
             "floats": [nan, inf, -inf, -0.0, 1e16, 0.1],
             "bytes": [b"", b"\x00'\"", set(), {1: (2,)}],
             "datetime": [datetime.datetime(2026, 11, 27, 17, 5, 9, 250), datetime.datetime(1, 1, 1),
                          datetime.datetime(2026, 1, 2, 3, 0, 7), datetime.date(9999, 12, 31),
                          datetime.time(0, 0), datetime.time(23, 59, 1), datetime.time(1, 2, 0, 5),
                          datetime.timedelta(0), datetime.timedelta(days=-1, seconds=5),
                          datetime.timedelta(microseconds=7)]}
    yield "repr", reprs, 2
    yield "repr_p4", reprs, 4
    shared = [1, "s"]
    yield "shared", {"a": shared, "b": shared, "c": [shared, shared]}, 2
    deep = []
    for _ in range(200):
        deep = [deep]
    yield "deep200", deep, 4
    deeper = []
    for _ in range(300):
        deeper = [deeper]
    yield "deep300", deeper, 4, "limit", "ok"
    # 200 levels, then the same 200 again below 100 more: only the second use is too deep
    reused = deep
    for _ in range(100):
        reused = [reused]
    yield "deep_shared", [deep, reused], 4, "limit", "ok"
    cyc = []
    cyc.append(cyc)
    yield "cycle_list", cyc, 2, "limit", "limit"
    cd = {}
    cd["self"] = cd
    yield "cycle_dict", {"outer": [cd]}, 2, "limit", "limit"
    dag = [1]
    for _ in range(200):
        dag = [dag, dag]
    yield "dag", dag, 4, "convert", "limit"  # pk_to_json: past its render budget
    # a DCP-like .metadata (protocol 4): dataclasses, TensorProperties' tuple state, enums by
    # name, torch.Size, and a storage_data dict keyed by objects
    props = dcpm.TensorProperties()
    props.__dict__.update(dtype=torch.float32, layout="strided", requires_grad=False,
                          memory_format=state.Color.RED, pin_memory=False)
    chunk = dcpm.ChunkStorageMetadata(offsets=torch.Size([0, 0]), sizes=torch.Size([4, 4]))
    tsm = dcpm.TensorStorageMetadata(properties=props, size=torch.Size([4, 4]), chunks=[chunk])
    md = dcpm.Metadata(
        state_dict_metadata={"model.w": tsm, "optim.lr": dcpm.BytesStorageMetadata()},
        planner_data={"model.w": ("model", "w"), "optim.lr": ("optim", "lr")},
        storage_data={dcpm.MetadataIndex(fqn="model.w", offset=torch.Size([0, 0]), index=0):
                      dcp._StorageInfo(relative_path="__0_0.distcp", offset=0, length=2 ** 33)})
    yield "metadata", md, 4


def random_floats():
    rng = random.Random(20260501)
    out = [2.0 ** k for k in range(-1074, 1024, 7)]
    while len(out) < 3000:
        d = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
        if math.isfinite(d):
            out.append(d)
    out += [round(rng.uniform(-1000, 1000), rng.randint(0, 8)) for _ in range(500)]
    return out


def numpy_big_endian():
    """np.float64(1.5) with its dtype and bytes switched to big-endian by hand."""
    import numpy as np
    data = pickle.dumps(np.float64(1.5), protocol=4)
    le = struct.pack("<d", 1.5)
    assert data.count(b"\x8c\x01<") == 1 and data.count(le) == 1
    return data.replace(b"\x8c\x01<", b"\x8c\x01>").replace(le, le[::-1])


def tensor_item():
    """A torch.save-style zip (archive/data.pkl + archive/data/0) of {'lr', 'w', 'wt'}: w is a
    2x3 float32 tensor, wt its transpose (strides (1, 3)) over the same storage."""
    utils = _module("torch._utils")

    def _rebuild_tensor_v2(*args):
        raise AssertionError("never called")

    _rebuild_tensor_v2.__module__ = "torch._utils"
    _rebuild_tensor_v2.__qualname__ = "_rebuild_tensor_v2"
    utils._rebuild_tensor_v2 = _rebuild_tensor_v2
    storage_cls = _in(torch, type("FloatStorage", (), {}))

    class Storage:
        pass

    class Tensor:
        def __init__(self, size, stride):
            self.size, self.stride = size, stride

        def __reduce_ex__(self, proto):
            return (_rebuild_tensor_v2, (Storage(), 0, self.size, self.stride, False,
                                         collections.OrderedDict()))

    class TorchPickler(pickle.Pickler):
        def persistent_id(self, obj):
            return ("storage", storage_cls, "0", "cpu", 6) if isinstance(obj, Storage) else None

    buf = io.BytesIO()
    TorchPickler(buf, protocol=2).dump({"lr": 0.1, "w": Tensor((2, 3), (3, 1)),
                                        "wt": Tensor((3, 2), (1, 3))})
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for name, data in (("data.pkl", buf.getvalue()), ("byteorder", b"little"),
                           ("data/0", struct.pack("<6f", 1, 2, 3, 4, 5, 6)), ("version", b"3\n")):
            z.writestr(zipfile.ZipInfo("archive/" + name, date_time=(2026, 1, 1, 0, 0, 0)), data)
    with open(os.path.join(OUT, "tensor_item.zip"), "wb") as f:
        f.write(out.getvalue())


class PersidPickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, str) and obj.startswith("storage:"):
            return ("storage", torch.float32, obj[8:], "cpu", 6)
        return None


def main():
    names = []
    for vec in vectors():
        name, value, proto = vec[:3]
        vstatus, pstatus = (vec[3], vec[4]) if len(vec) > 3 else ("ok", "ok")
        data = pickle.dumps(value, protocol=proto)
        write(name, data, value, proto, vstatus, pstatus)
        names.append("%s %s %s" % (name, vstatus, pstatus))
        if name.startswith("repr"):  # the referee: Python's own repr of what it unpickles
            want = repr(pickle.loads(data))
            got = to_text(normalize(value, proto))
            assert got == want, (name, got, want)
    buf = io.BytesIO()
    PersidPickler(buf, protocol=2).dump({"t": "storage:0", "u": ["storage:1"]})
    pid_value = Obj("persistent_load",
                    (("storage", Ref("torch.float32"), "0", "cpu", 6),))
    pid_value2 = Obj("persistent_load",
                     (("storage", Ref("torch.float32"), "1", "cpu", 6),))
    write("persid", buf.getvalue(), None, 2, "ok", "ok",
          expected={"__pairs__": [("t", pid_value), ("u", [pid_value2])]})
    names.append("persid ok ok")
    try:
        write("numpy_be", numpy_big_endian(), None, 4, "ok", "ok", expected=1.5)
        names.append("numpy_be ok ok")
    except ImportError:
        pass
    tensor_item()
    with open(os.path.join(OUT, "vectors.txt"), "w") as f:
        f.write("\n".join(names) + "\n")


def write(name, data, value, proto, vstatus, pstatus, expected=None):
    with open(os.path.join(OUT, name + ".pkl"), "wb") as f:
        f.write(data)
    if vstatus == "ok":
        n = expected if expected is not None else normalize(value, proto)
        with open(os.path.join(OUT, name + ".json"), "w", encoding="utf-8") as f:
            f.write(dumps(to_json(n)))
        with open(os.path.join(OUT, name + ".txt"), "w", encoding="utf-8") as f:
            f.write(to_text(n))
    if pstatus == "ok":
        raw = RawUnpickler(io.BytesIO(data)).load()
        with open(os.path.join(OUT, name + ".pk.json"), "w", encoding="utf-8") as f:
            f.write(dumps(pk_json(raw)))


if __name__ == "__main__":
    main()
