"""Shared helpers of the Python package tests: the fixtures and their references (written by
real torch at generation time; see tests/fixtures/README.md)."""

import functools
import json
import os
from pathlib import Path

import torch

FIXTURES = Path(os.environ.get("CKPT_FIXTURES") or os.environ.get("CKPT_FIXTURES_DEFAULT")
                or Path(__file__).resolve().parents[1] / "fixtures" / "data")
CORRUPT = Path(__file__).resolve().parents[1] / "fixtures" / "corrupt"


def fixture_names():
    if not FIXTURES.is_dir():
        return []
    return sorted(p.name for p in FIXTURES.iterdir()
                  if (p / "reference.tsv").is_file() and (p / "ckpt").is_dir())


class RefEntry:
    def __init__(self, f, detail):
        self.is_tensor = f[0] == "T"
        self.key = f[1]
        self.detail = detail or {}
        if self.is_tensor:
            self.dtype = f[2]
            self.shape = tuple(int(x) for x in f[3].split(",")) if f[3] else ()
            self.offset, self.nbytes = int(f[4]), int(f[5])
        else:
            self.json, self.repr = f[2], f[3]
        self.elems = tuple(self.detail["path"]) if "path" in self.detail else None


class Ref:
    def __init__(self, name):
        d = FIXTURES / name
        self.name = name
        self.dir = d / "ckpt"
        self.bin = (d / "reference.bin").read_bytes()
        rj = d / "reference.json"
        self.meta = json.loads(rj.read_text(encoding="utf-8")) if rj.is_file() else {}
        details = {e["key"]: e for e in self.meta.get("entries", [])}
        self.entries = []
        for line in (d / "reference.tsv").read_text(encoding="utf-8").split("\n"):
            if line:
                f = line.split("\t")
                self.entries.append(RefEntry(f, details.get(f[1])))

    def tensor(self, e):
        """torch's reading of tensor entry e (a full tensor)."""
        dt = getattr(torch, e.dtype)
        raw = bytearray(self.bin[e.offset:e.offset + e.nbytes])
        if e.nbytes == 0:
            return torch.empty(e.shape, dtype=dt)
        return torch.frombuffer(raw, dtype=torch.uint8).view(dt).reshape(e.shape)


@functools.lru_cache(maxsize=None)
def ref(name):
    return Ref(name)


def bits(t):
    """The raw bytes of a tensor (bit patterns: NaN payloads, -0.0)."""
    if not t.numel():
        return b""
    c = torch.empty(t.shape, dtype=t.dtype)  # plain C-order strides
    c.copy_(t.detach().cpu())
    return c.view(-1).view(torch.uint8).numpy().tobytes()


def jsonable(v):
    """The reference's JSON mapping of a value (tests/fixtures/generate.py)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        if all(isinstance(k, str) for k in v):
            return {k: jsonable(x) for k, x in v.items()}
        return {"__dict__": [[jsonable(k), jsonable(x)] for k, x in v.items()]}
    if isinstance(v, (bytes, bytearray)):
        return {"__bytes__": bytes(v).hex()}
    if isinstance(v, torch.Tensor):
        return {"__tensor__": {"dtype": str(v.dtype).replace("torch.", ""),
                               "shape": list(v.shape)}}
    return {"__object__": {"type": f"{type(v).__module__}.{type(v).__qualname__}",
                           "repr": repr(v)}}


def json_text(v):
    return json.dumps(jsonable(v), separators=(",", ":"), ensure_ascii=False, allow_nan=True)


def same(a, b, where=""):
    """None when a and b are equal (tensors bit for bit, same dtype and shape; containers by
    type and items), else where they differ."""
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor):
            return f"{where}: tensor vs {type(b).__name__}"
        if a.dtype != b.dtype or a.shape != b.shape:
            return f"{where}: {a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}"
        return None if bits(a) == bits(b) else f"{where}: data differs"
    if isinstance(a, dict):
        if not isinstance(b, dict) or list(a) != list(b):
            return f"{where}: keys differ"
        for k in a:
            r = same(a[k], b[k], f"{where}/{k}")
            if r:
                return r
        return None
    if isinstance(a, (list, tuple)):
        if type(a) is not type(b) or len(a) != len(b):
            return f"{where}: {type(a).__name__}[{len(a)}] vs {type(b).__name__}"
        for i, (x, y) in enumerate(zip(a, b)):
            r = same(x, y, f"{where}/{i}")
            if r:
                return r
        return None
    return None if (type(a) is type(b) and repr(a) == repr(b)) else f"{where}: {a!r} vs {b!r}"
