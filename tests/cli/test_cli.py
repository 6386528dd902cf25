"""test_cli.py — end-to-end tests of the `ckpt` command-line tool against torch's reference.

For every fixture in $CKPT_FIXTURES (tests/fixtures/data/<name>/{ckpt,reference.*}) and every
entry of its reference.tsv: `ckpt cat` must reproduce torch's bytes exactly (by flat key and by
tree path), objects must render to the reference JSON/repr, `--slice` must agree with numpy
slicing, `--text`/`--json` values must read back to the stored values, `ls`/`info` must list
and count what the reference lists, `verify` must pass, and `dump-metadata` must be JSON with
every key.  Damaged copies of fixtures (truncated, deleted, flipped, garbage) must make
`verify` exit 1 with a message naming the file or key, and no run may crash (exit code >= 128,
a signal) or print a sanitizer report.

Environment: CKPT_BIN (the built `ckpt`); CKPT_FIXTURES (an override), else
CKPT_FIXTURES_DEFAULT (set by meson), else ../fixtures/data.
"""

from __future__ import annotations

import functools
import json
import math
import os
import pty
import random
import re
import shutil
import subprocess
import sys
from collections import Counter
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
import sweep  # noqa: E402

BIN = os.environ.get("CKPT_BIN")
FIXTURES = Path(os.environ.get("CKPT_FIXTURES") or os.environ.get("CKPT_FIXTURES_DEFAULT")
                or Path(__file__).resolve().parents[1] / "fixtures" / "data")

if not BIN:
    pytest.skip("CKPT_BIN is not set (run through meson test)", allow_module_level=True)


def fixture_names() -> list[str]:
    if not FIXTURES.is_dir():
        return []
    return sorted(p.name for p in FIXTURES.iterdir()
                  if (p / "reference.tsv").is_file() and (p / "ckpt").is_dir())


NAMES = fixture_names()

# Bad-input checkpoints from tests/fixtures/make_corrupt.py: "base" is intact, and so are the
# "overlap_*" cases (pickles that only the overlapped walk must distrust); every other case is
# damaged in one way; its reference.tsv lists the entries the damage leaves intact.
CORRUPT = Path(__file__).resolve().parents[1] / "fixtures" / "corrupt"
CORRUPT_CASES = sorted(p.name for p in CORRUPT.iterdir()
                       if (p / "ckpt").is_dir()) if CORRUPT.is_dir() else []

SANITIZER_MARKERS = ("AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer",
                     "runtime error:", "MemorySanitizer", "ThreadSanitizer")

ITEMSIZE = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "float8_e4m3fn": 1,
    "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1,
    "int8": 1, "int16": 2, "int32": 4, "int64": 8, "uint8": 1, "uint16": 2, "uint32": 4,
    "uint64": 8, "bool": 1, "complex64": 8, "complex128": 16,
}
INT_DTYPES = {"int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
              "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64}
# narrow float formats: (exponent bits, mantissa bits, bias, kind)
NARROW = {
    "bfloat16": (8, 7, 127, "ieee"),
    "float8_e4m3fn": (4, 3, 7, "fn"),
    "float8_e5m2": (5, 2, 15, "ieee"),
    "float8_e4m3fnuz": (4, 3, 8, "fnuz"),
    "float8_e5m2fnuz": (5, 2, 16, "fnuz"),
}


# ------------------------------------------------------------------------------------------
# running the tool
# ------------------------------------------------------------------------------------------

def run(*args, ok=(0,), timeout=300, **kw) -> subprocess.CompletedProcess:
    """Runs ckpt; asserts it did not crash or trip a sanitizer and (unless ok is None) that
    its exit status is in `ok`."""
    argv = [BIN, *map(str, args)]
    if "stdout" not in kw and "stderr" not in kw:
        kw["capture_output"] = True
    p = subprocess.run(argv, timeout=timeout, **kw)
    err = (p.stderr or b"").decode("utf-8", "replace")
    shown = " ".join(map(str, args))
    assert 0 <= p.returncode < 128, f"`ckpt {shown}` crashed (status {p.returncode}):\n{err}"
    assert not any(m in err for m in SANITIZER_MARKERS), f"`ckpt {shown}`: sanitizer:\n{err}"
    if ok is not None:
        assert p.returncode in ok, (f"`ckpt {shown}`: exit status {p.returncode}, expected "
                                    f"{ok}\nstderr: {err}")
    return p


def out_text(p: subprocess.CompletedProcess) -> str:
    return p.stdout.decode("utf-8")


def err_text(p: subprocess.CompletedProcess) -> str:
    return p.stderr.decode("utf-8", "replace")


# ------------------------------------------------------------------------------------------
# the reference
# ------------------------------------------------------------------------------------------

def escape_elem(elem) -> str:
    """The tree-path escaping of one path element (docs/naming.md)."""
    s = str(elem)
    if s == "":
        return "%"
    if s == ".":
        return "%2E"
    if s == "..":
        return "%2E%2E"
    out = []
    for ch in s:
        o = ord(ch)
        out.append(f"%{o:02X}" if ch in "%/" or o < 0x20 or o == 0x7F else ch)
    return "".join(out)


class Entry:
    def __init__(self, fields: list[str], detail: dict | None):
        self.kind = "tensor" if fields[0] == "T" else "object"
        self.key = fields[1]
        self.detail = detail or {}
        if self.kind == "tensor":
            self.dtype = fields[2]
            self.shape = [int(x) for x in fields[3].split(",")] if fields[3] else []
            self.offset, self.nbytes = int(fields[4]), int(fields[5])
            raw_path = fields[6]
        else:
            self.json, self.repr = fields[2], fields[3]
            raw_path = fields[4]
        elems = self.detail.get("path")
        self.elems = [str(e) for e in elems] if elems is not None else raw_path.split("/")
        self.path = "/".join(escape_elem(e) for e in self.elems)

    @property
    def itemsize(self) -> int:
        return ITEMSIZE[self.dtype]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def __repr__(self) -> str:
        return f"<{self.kind} {self.key}>"


class Ref:
    def __init__(self, name: str, root: Path = FIXTURES):
        d = root / name
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
                self.entries.append(Entry(f, details.get(f[1])))
        self.tensors = [e for e in self.entries if e.kind == "tensor"]
        self.objects = [e for e in self.entries if e.kind == "object"]

    def data(self, e: Entry) -> bytes:
        return self.bin[e.offset:e.offset + e.nbytes]

    def raw_array(self, e: Entry) -> np.ndarray:
        """The tensor as an array of opaque items (any dtype), for slicing."""
        return np.frombuffer(self.data(e), dtype=f"V{e.itemsize}").reshape(e.shape)

    def data_files(self) -> list[str]:
        return sorted(p.name for p in self.dir.iterdir() if p.name.endswith(".distcp"))


@functools.lru_cache(maxsize=None)
def ref(name: str) -> Ref:
    return Ref(name)


def pick_tensors(r: Ref, limit: int = 12) -> list[Entry]:
    """A varied subset: one per (dtype, ndim, sharded) first, then the rest in order."""
    seen, first, rest = set(), [], []
    for e in r.tensors:
        sig = (e.dtype, len(e.shape), len(e.detail.get("chunks", [])) > 1, 0 in e.shape)
        (rest if sig in seen else first).append(e)
        seen.add(sig)
    return (first + rest)[:limit]


# ------------------------------------------------------------------------------------------
# value helpers
# ------------------------------------------------------------------------------------------

def canon(v):
    """JSON value in a form where types matter (True != 1 != 1.0) and NaN == NaN."""
    if isinstance(v, bool):
        return ("bool", v)
    if isinstance(v, int):
        return ("int", v)
    if isinstance(v, float):
        return ("float", "nan" if math.isnan(v) else v)
    if isinstance(v, list):
        return ("list", [canon(x) for x in v])
    if isinstance(v, dict):
        return ("dict", [(k, canon(x)) for k, x in v.items()])
    return (type(v).__name__, v)


def decode_narrow(dtype: str, bits: int) -> float:
    """Exact value of a bfloat16 / float8 bit pattern."""
    if dtype == "float8_e8m0fnu":
        return math.nan if bits == 0xFF else math.ldexp(1.0, bits - 127)
    eb, mb, bias, kind = NARROW[dtype]
    width = 1 + eb + mb
    sign = bits >> (width - 1) & 1
    exp = bits >> mb & ((1 << eb) - 1)
    man = bits & ((1 << mb) - 1)
    if kind == "fnuz" and bits == 1 << (width - 1):
        return math.nan
    if kind == "fn" and exp == (1 << eb) - 1 and man == (1 << mb) - 1:
        return math.nan
    if kind == "ieee" and exp == (1 << eb) - 1:
        return math.nan if man else (-math.inf if sign else math.inf)
    if exp == 0:
        v = math.ldexp(man, 1 - bias - mb)
    else:
        v = math.ldexp((1 << mb) | man, exp - bias - mb)
    return -v if sign else v


def narrow_params(dtype: str) -> tuple[int, int]:
    """(mantissa bits, smallest normal exponent)."""
    if dtype == "float8_e8m0fnu":
        return 0, -127
    eb, mb, bias, _ = NARROW[dtype]
    return mb, 1 - bias


def round_to(dtype: str, x: float) -> float:
    """x rounded to the nearest value of `dtype` (ties to even), ignoring overflow."""
    if dtype == "float64" or not math.isfinite(x) or x == 0:
        return x
    if dtype in ("float32", "complex64"):
        return float(np.float32(x))
    if dtype == "float16":
        return float(np.float16(x))
    mb, emin = narrow_params(dtype)
    e = max(math.frexp(abs(x))[1] - 1, emin)
    ulp = Fraction(2) ** (e - mb)
    return float(round(Fraction(x) / ulp) * ulp)


def elem_values(r: Ref, e: Entry) -> list:
    """The reference tensor's elements, flat, as Python values (floats exact)."""
    raw = r.data(e)
    dt = e.dtype
    if dt in ("float64", "float32", "float16"):
        return [float(x) for x in np.frombuffer(raw, dtype=np.dtype(dt).newbyteorder("<"))]
    if dt == "bfloat16":
        u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
        return [float(x) for x in u.view(np.float32)]
    if dt.startswith("float8"):
        return [decode_narrow(dt, b) for b in raw]
    if dt in INT_DTYPES:
        return [int(x) for x in np.frombuffer(raw, dtype=np.dtype(INT_DTYPES[dt]).newbyteorder("<"))]
    if dt == "bool":
        return [b != 0 for b in raw]
    if dt in ("complex64", "complex128"):
        ft = np.float32 if dt == "complex64" else np.float64
        f = np.frombuffer(raw, dtype=np.dtype(ft).newbyteorder("<"))
        return [complex(float(f[i]), float(f[i + 1])) for i in range(0, len(f), 2)]
    raise AssertionError(f"unknown dtype {dt}")


def float_matches(dtype: str, text_value: float, want: float) -> bool:
    if math.isnan(want):
        return math.isnan(text_value)
    got = round_to(dtype, text_value)
    return got == want and math.copysign(1, got) == math.copysign(1, want)


def value_matches(dtype: str, token, want) -> bool:
    """token: what the tool printed for one element (text token or JSON value)."""
    if dtype == "bool":
        return token in (want, "True" if want else "False")
    if dtype in INT_DTYPES:
        return not isinstance(token, bool) and int(token) == want
    if dtype in ("complex64", "complex128"):
        if isinstance(token, list):
            c = complex(float(token[0]), float(token[1]))
        else:
            c = complex(token)
        return float_matches(dtype, c.real, want.real) and float_matches(dtype, c.imag, want.imag)
    return float_matches(dtype, float(token), want)


TOKEN_RE = re.compile(r"\([^()]*j\)|[^\s,\[\]]+")


def text_tokens(text: str) -> list[str]:
    return [t for t in TOKEN_RE.findall(text)]


def skeleton(text: str) -> str:
    """The layout of a --text rendering with every value replaced by X."""
    return TOKEN_RE.sub(lambda m: m.group(0) if m.group(0) == "..." else "X", text)


def numpy_skeleton(shape: list[int], itemsize: int) -> str:
    dt = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64, 16: np.complex128}[itemsize]
    a = np.zeros(shape, dtype=dt)
    return np.array2string(a, separator=", ", threshold=1000, edgeitems=3,
                           max_line_width=sys.maxsize, formatter={"all": lambda x: "X"})


def py_index(spec: str):
    """Python index tuple of a --slice spec (independent of the tool's parser)."""
    if not spec.strip():
        return ()
    items = []
    for part in spec.split(","):
        part = part.strip()
        if part == "...":
            items.append(Ellipsis)
        elif ":" in part:
            bits = [b.strip() for b in part.split(":")]
            items.append(slice(*[int(b) if b else None for b in bits]))
        else:
            items.append(int(part))
    return tuple(items)


def slice_specs(shape: list[int]) -> list[str]:
    nd = len(shape)
    specs = ["", "..."]
    if nd == 0:
        return specs + ["0", ":"]
    n0 = shape[0]
    specs += [":", "0:1", "0", "-1", "1:-1", "-2:", "3:1", "-100:100", ":-1", "1:", "0:0",
              f"{n0}:", f"{n0 - 1}", f"-{n0}", f"{n0}", f"-{n0 + 1}", " 0 : 2 "]
    if nd >= 2:
        specs += [":,0", "0,-1", "...,-1", "1:3,1:", "-1,:", ":,-2:", "0:2,0:0", ":,1:-1",
                  "-1,-1", f":,{shape[1]}"]
    if nd >= 3:
        specs += ["0,...", "...,0", "1:2,...,1:", "0,0,0", ":,:,-1"]
    if nd >= 1:
        specs += [",".join([":"] * (nd + 1))]  # too many indices
    return specs


# ------------------------------------------------------------------------------------------
# cat: bytes, objects, slices, text
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_cat_tensor_bytes(name):
    r = ref(name)
    fails = []
    for i, e in enumerate(r.tensors):
        want = r.data(e)
        for k in sweep.rotate(dict.fromkeys([e.key, e.path]), i, 1):  # short: one name each
            p = run("cat", r.dir, k, ok=None)
            if p.returncode != 0:
                fails.append(f"{e.key} (as {k!r}): exit {p.returncode}: {err_text(p).strip()}")
            elif p.stdout != want:
                fails.append(f"{e.key} (as {k!r}): {len(p.stdout)} bytes differ from the "
                             f"reference's {len(want)}")
    assert not fails, f"{name}: {len(fails)} failures:\n" + "\n".join(fails[:30])


@pytest.mark.parametrize("name", NAMES)
def test_cat_objects(name):
    r = ref(name)
    fails = []
    for i, e in enumerate(r.objects):
        # a short sweep: each object by one name and one text form, in turn
        for k in sweep.rotate(dict.fromkeys([e.key, e.path]), i, 1):
            p = run("cat", "--json", r.dir, k, ok=None)
            if p.returncode != 0:
                fails.append(f"{e.key} --json: exit {p.returncode}: {err_text(p).strip()}")
                continue
            got = json.loads(out_text(p))
            if canon(got) != canon(json.loads(e.json)):
                fails.append(f"{e.key} --json: got {out_text(p).strip()!r}, want {e.json!r}")
        for flag in sweep.rotate(("--text", None), i, 1):
            p = run("cat", *([flag] if flag else []), r.dir, e.key, ok=None)
            if p.returncode != 0:
                fails.append(f"{e.key} {flag}: exit {p.returncode}: {err_text(p).strip()}")
            elif out_text(p) != e.repr + "\n":
                fails.append(f"{e.key} {flag}: got {out_text(p).strip()!r}, want {e.repr!r}")
    assert not fails, f"{name}: {len(fails)} failures:\n" + "\n".join(fails[:30])


@pytest.mark.parametrize("name", NAMES)
def test_cat_slices(name):
    r = ref(name)
    fails = []
    for i, e in enumerate(pick_tensors(r)):
        arr = r.raw_array(e)
        specs = slice_specs(e.shape)
        # a short sweep: each tensor a third of the specs, in turn
        for spec in sweep.rotate(specs, i, (len(specs) + 2) // 3):
            try:
                want = np.ascontiguousarray(arr[py_index(spec)]).tobytes()
            except IndexError:
                want = None
            p = run("cat", "--slice", spec, r.dir, e.key, ok=None)
            if want is None:
                if p.returncode != 2 or not err_text(p).startswith("ckpt: "):
                    fails.append(f"{e.key}[{spec}]: numpy raises IndexError, ckpt exits "
                                 f"{p.returncode}: {err_text(p).strip()}")
            elif p.returncode != 0:
                fails.append(f"{e.key}[{spec}]: exit {p.returncode}: {err_text(p).strip()}")
            elif p.stdout != want:
                fails.append(f"{e.key}[{spec}]: {len(p.stdout)} bytes differ from numpy's "
                             f"{len(want)}")
    assert not fails, f"{name}: {len(fails)} failures:\n" + "\n".join(fails[:30])


@pytest.mark.parametrize("name", NAMES)
def test_cat_block_sizes(name):
    """Raw output read in small blocks (split along inner dimensions) is the same."""
    r = ref(name)
    fails = []
    for e in pick_tensors(r, 8):
        if e.nbytes > 8192:
            continue
        for bs in (1, e.itemsize * 3, 7, 100, e.nbytes or 1):
            p = run("cat", "--block-size", bs, r.dir, e.key, ok=None)
            if p.returncode != 0 or p.stdout != r.data(e):
                fails.append(f"{e.key} --block-size {bs}: exit {p.returncode}, "
                             f"{len(p.stdout)} bytes")
            if len(e.shape) >= 2 and e.shape[0] > 1:
                spec = "1:,-1:"
                want = np.ascontiguousarray(r.raw_array(e)[py_index(spec)]).tobytes()
                p = run("cat", "--block-size", bs, "--slice", spec, r.dir, e.key, ok=None)
                if p.returncode != 0 or p.stdout != want:
                    fails.append(f"{e.key}[{spec}] --block-size {bs}: exit {p.returncode}")
    assert not fails, f"{name}:\n" + "\n".join(fails[:30])


@pytest.mark.parametrize("name", NAMES)
def test_cat_text_values(name):
    """--text: numpy's layout, and every printed number reads back as the stored value."""
    r = ref(name)
    fails = []
    for e in pick_tensors(r, 16):
        p = run("cat", "--text", r.dir, e.key, ok=None)
        if p.returncode != 0:
            fails.append(f"{e.key}: exit {p.returncode}: {err_text(p).strip()}")
            continue
        text = out_text(p)
        assert text.endswith("\n")
        text = text[:-1]
        if e.numel == 0:
            # empty: nested brackets following the shape, e.g. [[], []] for (2, 0)
            want = "[]"
            for n in reversed(e.shape[:-1]):
                want = "[" + ", ".join([want] * n) + "]"
            if text.replace("\n", "").replace(" ", "") != want.replace(" ", ""):
                fails.append(f"{e.key}: empty tensor printed as {text!r}, want {want!r}")
            continue
        sk = numpy_skeleton(e.shape, e.itemsize)
        if skeleton(text) != sk:
            fails.append(f"{e.key}: layout differs from numpy's:\n{skeleton(text)}\n---\n{sk}")
            continue
        values = elem_values(r, e)
        toks = [t for t in text_tokens(text) if t != "..."]
        if e.numel <= 1000:
            if len(toks) != e.numel:
                fails.append(f"{e.key}: {len(toks)} values printed, {e.numel} stored")
                continue
            bad = [(i, t, values[i]) for i, t in enumerate(toks)
                   if not value_matches(e.dtype, t, values[i])]
        else:
            bad = [] if value_matches(e.dtype, toks[0], values[0]) else [(0, toks[0], values[0])]
            if not value_matches(e.dtype, toks[-1], values[-1]):
                bad.append((-1, toks[-1], values[-1]))
        if bad:
            fails.append(f"{e.key} ({e.dtype}): values do not read back: {bad[:5]}")
    assert not fails, f"{name}:\n" + "\n".join(fails[:20])


@pytest.mark.parametrize("name", NAMES)
def test_cat_json_values(name):
    r = ref(name)
    fails = []
    for e in pick_tensors(r, 16):
        if e.numel > 100000:
            continue
        p = run("cat", "--json", r.dir, e.key, ok=None)
        if p.returncode != 0:
            fails.append(f"{e.key}: exit {p.returncode}: {err_text(p).strip()}")
            continue
        got = np.array(json.loads(out_text(p)), dtype=object)
        if list(got.shape[:len(e.shape)]) != e.shape:
            fails.append(f"{e.key}: JSON nesting {got.shape} != shape {e.shape}")
            continue
        flat = got.reshape(e.numel, -1) if e.dtype.startswith("complex") else got.reshape(-1)
        values = elem_values(r, e)
        bad = [(i, v, values[i]) for i, v in enumerate(flat)
               if not value_matches(e.dtype, list(v) if e.dtype.startswith("complex") else v,
                                    values[i])]
        if bad:
            fails.append(f"{e.key} ({e.dtype}): {bad[:5]}")
    assert not fails, f"{name}:\n" + "\n".join(fails[:20])


@pytest.mark.parametrize("name", NAMES)
def test_cat_text_slices_and_header(name):
    r = ref(name)
    for e in pick_tensors(r, 4):
        if not e.shape or e.shape[0] == 0:
            continue
        p = run("cat", "-v", "--text", "--slice", "-1", r.dir, e.key)
        lines = out_text(p).split("\n")
        shape = ", ".join(map(str, e.shape[1:]))
        assert lines[0] == f"# {e.key}: {e.dtype} [{shape}]"
        values = elem_values(r, e)
        row = math.prod(e.shape[1:])
        toks = [t for t in text_tokens("\n".join(lines[1:])) if t != "..."]
        if row <= 1000:
            assert len(toks) == row
            assert all(value_matches(e.dtype, t, v) for t, v in zip(toks, values[-row:]))


# ------------------------------------------------------------------------------------------
# ls, info
# ------------------------------------------------------------------------------------------

def children(paths: list[str], prefix: str) -> list[str]:
    out = {}
    for p in paths:
        if prefix:
            if not p.startswith(prefix + "/"):
                continue
            p = p[len(prefix) + 1:]
        head, sep, _ = p.partition("/")
        out.setdefault(head + ("/" if sep else ""), None)
    return list(out)


@pytest.mark.parametrize("name", NAMES)
def test_ls(name):
    r = ref(name)
    paths = [e.path for e in r.entries]
    assert out_text(run("ls", "-R", r.dir)).split("\n")[:-1] == paths
    assert out_text(run("ls", r.dir)).split("\n")[:-1] == children(paths, "")
    # every directory (up to 25) lists its children, with or without a trailing '/'
    dirs = list(dict.fromkeys("/".join(p.split("/")[:i]) for p in paths
                              for i in range(1, p.count("/") + 1)))
    for d in dirs[:25]:
        want = children(paths, d)
        assert out_text(run("ls", r.dir, d)).split("\n")[:-1] == want
        assert out_text(run("ls", r.dir, d + "/")).split("\n")[:-1] == want
        long = out_text(run("ls", "-l", r.dir, d)).split("\n")[:-1]
        assert [ln.split("  ")[-1].strip() for ln in long] == want
        below = [p for p in paths if p.startswith(d + "/")]
        assert out_text(run("ls", "-R", r.dir, d)).split("\n")[:-1] == below
    # -l on every entry: kind, dtype, shape, bytes
    lines = out_text(run("ls", "-lR", r.dir)).split("\n")[:-1]
    assert len(lines) == len(r.entries)
    for e, ln in zip(r.entries, lines):
        cols = re.split(r"\s{2,}", ln.strip())
        assert cols[0] == e.kind and ln.endswith("  " + e.path), ln
        if e.kind == "tensor":
            assert cols[1] == e.dtype and cols[2] == "[" + ", ".join(map(str, e.shape)) + "]"
            assert int(cols[3]) == e.nbytes
    # a single entry by key or path
    for e in r.entries[:5] + r.entries[-5:]:
        assert out_text(run("ls", r.dir, e.key)).strip() == e.path
        assert out_text(run("ls", r.dir, e.path)).strip() == e.path
    p = run("ls", r.dir, "no/such/entry", ok=(2,))
    assert err_text(p).startswith("ckpt: ") and "no/such/entry" in err_text(p)
    run("ls", "-lh", "--chunks", r.dir)


@pytest.mark.parametrize("name", NAMES)
def test_ls_json(name):
    r = ref(name)
    got = json.loads(out_text(run("ls", "--json", "--chunks", r.dir)))
    assert [g["key"] for g in got] == [e.key for e in r.entries]
    for g, e in zip(got, r.entries):
        assert g["path"] == e.path and g["path_elems"] == e.elems and g["kind"] == e.kind
        assert "problem" not in g, g
        if e.kind == "tensor":
            assert g["dtype"] == e.dtype and g["shape"] == e.shape and g["bytes"] == e.nbytes
            chunks = e.detail.get("chunks")
            if chunks is None:
                continue
            assert g["chunks"] == len(chunks) == len(g["storage"])
            for c, s in zip(chunks, g["storage"]):
                assert s["offsets"] == c["offsets"] and s["sizes"] == c["sizes"]
                st = c.get("storage")
                if math.prod(c["sizes"]) == 0 and s["file"] is None:
                    continue  # zero-size chunks: "nothing stored" (ckpt.h), torch's item ignored
                if st:
                    assert (s["file"], s["offset"], s["length"]) == \
                        (st["file"], st["offset"], st["length"]), (e.key, s, st)
        else:
            assert g["dtype"] is None and g["shape"] is None
            st = e.detail.get("storage")
            if st:
                s = g["storage"][0]
                assert (s["file"], s["offset"], s["length"]) == \
                    (st["file"], st["offset"], st["length"])
                assert g["bytes"] == st["length"]
    # PATH limits the listing
    first = r.entries[0].path.split("/")[0]
    sub = json.loads(out_text(run("ls", "--json", r.dir, first)))
    assert [g["path"] for g in sub] == [e.path for e in r.entries
                                        if e.path == first or e.path.startswith(first + "/")]


@pytest.mark.parametrize("name", NAMES)
def test_info(name):
    r = ref(name)
    info = json.loads(out_text(run("info", "--json", "--files", r.dir)))
    assert info["entries"] == len(r.entries)
    assert info["tensors"] == len(r.tensors) == r.meta["tensor_count"]
    assert info["objects"] == len(r.objects) == r.meta["object_count"]
    assert info["tensor_bytes"] == sum(e.nbytes for e in r.tensors)
    assert info["dtypes"] == dict(Counter(e.dtype for e in r.tensors))
    md_files = r.meta["checkpoint"]["metadata_files"]
    hf = "safetensors_headers" in r.meta["checkpoint"]  # HuggingFace storage: no pickle
    assert info["metadata_files"] == len(md_files)
    assert info["rank_local_metadata"] == (not hf and md_files != [".metadata"])
    assert info["hf_storage"] == hf
    if hf:  # the headers (8 + N bytes each) and the index json stand in for metadata
        assert info["metadata_bytes"] == r.meta["checkpoint"]["hf_metadata_bytes"]
        assert info["format"].startswith("HuggingFace safetensors storage")
    else:
        assert info["metadata_bytes"] == sum(r.meta["checkpoint"]["files"][f] for f in md_files)
    if r.meta.get("metadata_version") is not None:
        assert info["version"] == r.meta["metadata_version"]
    stored, empty, items, files = 0, 0, set(), set()
    for e in r.entries:
        if e.kind == "tensor":
            for c in e.detail.get("chunks", []):
                if math.prod(c["sizes"]) == 0:
                    empty += 1
                else:
                    stored += 1
                st = c.get("storage")
                if st:
                    items.add((st["file"], st["offset"], st["length"]))
        elif e.detail.get("storage"):
            st = e.detail["storage"]
            items.add((st["file"], st["offset"], st["length"]))
    if all("chunks" in e.detail for e in r.tensors):
        assert (info["chunks"], info["empty_chunks"]) == (stored, empty)
    # Megatron flattened_range states: torch stores them as [grid..., cell], read as the original
    assert info["megatron_flattened"] == sum("stored_shape" in e.detail for e in r.tensors)
    if r.meta["options"].get("written_with", "").startswith("torch 1.13"):
        assert info["format"].startswith("torch 1.13"), info["format"]
    files = {f for f, _, _ in items}
    assert set(info["file_names"]) >= files
    assert info["files"] == len(info["file_names"])
    assert info["ranks"] <= max(1, info["files"])
    text = out_text(run("info", r.dir))
    assert f"entries:         {len(r.entries)} " in text


# ------------------------------------------------------------------------------------------
# verify, dump-metadata
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_verify_ok(name):
    r = ref(name)
    p = run("verify", r.dir)
    last = out_text(p).split("\n")[-2]
    assert re.fullmatch(rf"verified {len(r.entries)} entr(y|ies), \d+ chunks?: 0 problems", last)
    assert out_text(run("verify", "-q", r.dir)) == ""
    js = json.loads(out_text(run("verify", "--json", "--data", r.dir)))
    assert js["ok"] is True and js["problems"] == [] and js["entries"] == len(r.entries)
    verbose = out_text(run("verify", "-v", r.dir))
    for e in r.entries:
        assert f"ok {e.key}\n" in verbose


def find_key(tree, key: str):
    if isinstance(tree, dict):
        for k, v in tree.items():
            if k == key:
                yield v
            yield from find_key(v, key)
    elif isinstance(tree, list):
        for v in tree:
            yield from find_key(v, key)


@pytest.mark.parametrize("name", NAMES)
def test_dump_metadata(name):
    r = ref(name)
    text = out_text(run("dump-metadata", r.dir))
    doc = json.loads(text)
    md_files = r.meta["checkpoint"]["metadata_files"]
    heads = r.meta["checkpoint"].get("safetensors_headers")
    if heads is not None:  # HuggingFace storage: every header as written, and the index json
        index = r.meta["checkpoint"]["hf_index_json"]
        assert list(doc) == sorted(heads) + (["model.safetensors.index.json"] if index else [])
        for name, h in heads.items():
            got = doc[name]
            if "__metadata__" in got:  # the reference sorts this map (written in random order)
                got["__metadata__"] = dict(sorted(got["__metadata__"].items()))
            assert canon(got) == canon(h["header"]), name
        if index:
            assert doc["model.safetensors.index.json"] == index
        assert {e.key for e in r.entries} == {k for h in heads.values() for k in h["header"]
                                               if k != "__metadata__"}
        return
    if md_files != [".metadata"]:
        assert sorted(doc) == sorted(md_files)
    keys = set()
    for sdm in find_key(doc, "state_dict_metadata"):
        if isinstance(sdm, dict) and "__dict__" not in sdm:
            keys |= set(sdm)
    missing = [e.key for e in r.entries if e.key not in keys]
    assert not missing, f"state_dict_metadata lacks {missing[:10]}"
    pretty = out_text(run("dump-metadata", "--indent", "2", r.dir))
    assert canon(json.loads(pretty)) == canon(doc)
    assert "\n  " in pretty


# ------------------------------------------------------------------------------------------
# command line
# ------------------------------------------------------------------------------------------

def test_usage():
    assert "Usage: ckpt" in out_text(run("--help"))
    assert out_text(run("--version")).startswith("ckpt ")
    for cmd in ("ls", "info", "cat", "verify", "dump-metadata"):
        assert f"Usage: ckpt {cmd}" in out_text(run(cmd, "--help"))
        assert f"Usage: ckpt {cmd}" in out_text(run("help", cmd))
        p = run(cmd, ok=(2,))
        assert err_text(p).startswith("ckpt: ")
        run(cmd, "--no-such-option", "x", ok=(2,))
    p = run(ok=(2,))
    assert "Usage" in err_text(p)
    run("frobnicate", ok=(2,))
    run("--frobnicate", ok=(2,))
    p = run("ls", "/nonexistent/checkpoint", ok=(1,))
    assert err_text(p).startswith("ckpt: ") and "/nonexistent/checkpoint" in err_text(p)
    p = run("info", str(Path(__file__).parent), ok=(1,))
    assert ".metadata" in err_text(p)


def test_man_page_exists():
    man = Path(__file__).resolve().parents[2] / "docs" / "ckpt.1"
    text = man.read_text(encoding="ascii")
    for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "OPTIONS", "EXIT STATUS",
                    "EXAMPLES"):
        assert f".SH {section}" in text


needs_fixture = pytest.mark.skipif(not NAMES, reason="no fixtures generated")


@needs_fixture
def test_cat_errors():
    r = ref(NAMES[0])
    t = next(e for e in r.tensors if len(e.shape) >= 1 and e.shape[0] >= 2)
    for spec, words in [("::2", "step"), ("0:2:2", "step"), ("0:4:0", "zero"),
                        ("a", "invalid"), ("0,,1", "empty"), ("...,...", "ellipsis"),
                        (",".join(["0"] * 70), "too many"), (f"{t.shape[0]}", "out of bounds"),
                        ("1:2:3:4", "step")]:
        p = run("cat", "--slice", spec, r.dir, t.key, ok=(2,))
        assert err_text(p).startswith("ckpt: ") and words in err_text(p), (spec, err_text(p))
    assert run("cat", "--slice", "0:2:1", r.dir, t.key).stdout == \
        np.ascontiguousarray(r.raw_array(t)[0:2]).tobytes()
    assert run("cat", f"--slice=0:1", r.dir, t.key).stdout == r.raw_array(t)[0:1].tobytes()
    p = run("cat", r.dir, "no.such.key", ok=(2,))
    assert err_text(p).startswith("ckpt: ") and "no.such.key" in err_text(p)
    run("cat", "--text", "--json", r.dir, t.key, ok=(2,))
    run("cat", r.dir, ok=(2,))
    run("cat", r.dir, t.key, "extra", ok=(2,))
    run("cat", "--block-size", "0", r.dir, t.key, ok=(2,))
    if r.objects:
        run("cat", "--slice", "0", r.dir, r.objects[0].key, ok=(2,))
    # a key that looks like an option, after --
    run("cat", "--", r.dir, "-x", ok=(2,))


@needs_fixture
def test_cat_refuses_terminal():
    r = ref(NAMES[0])
    t = r.tensors[0]
    master, slave = pty.openpty()
    try:
        p = run("cat", r.dir, t.key, stdout=slave, stderr=subprocess.PIPE, ok=(2,))
        assert "terminal" in err_text(p)
        run("cat", "-f", r.dir, t.key, stdout=slave, stderr=subprocess.PIPE, ok=(0,))
    finally:
        os.close(master)
        os.close(slave)


# ------------------------------------------------------------------------------------------
# damaged checkpoints
# ------------------------------------------------------------------------------------------

def damage_fixture() -> str | None:
    """A fixture with a single .metadata and at least two data files."""
    for n in NAMES:
        r = ref(n)
        if (r.dir / ".metadata").is_file() and len(r.data_files()) >= 2 and r.tensors:
            return n
    return NAMES[0] if NAMES else None


@pytest.fixture
def damaged(tmp_path):
    name = damage_fixture()
    if not name:
        pytest.skip("no fixtures generated")
    r = ref(name)
    dst = tmp_path / "ckpt"
    shutil.copytree(r.dir, dst)
    return r, dst


def layout(d: Path) -> list[dict]:
    return json.loads(out_text(run("ls", "--json", "--chunks", d)))


def files_of(g: dict) -> set:
    return {s["file"] for s in g["storage"] if s["file"]}


def check_others_cat(r: Ref, d: Path, ok_entry) -> int:
    """Every tensor for which ok_entry(layout) holds must still cat to the reference bytes."""
    n = 0
    for g in layout(d):
        if g["kind"] != "tensor" or not ok_entry(g):
            continue
        e = next(x for x in r.tensors if x.key == g["key"])
        assert run("cat", d, e.key).stdout == r.data(e), e.key
        n += 1
    return n


def verify_fails(d: Path, *needles: str) -> str:
    p = run("verify", d, ok=(1,))
    out = out_text(p) + err_text(p)
    assert re.search(r"verified \d+ entr(y|ies), \d+ chunks?: [1-9]\d* problems?", out), out
    for needle in needles:
        assert needle in out, f"{needle!r} not in verify's report:\n{out}"
    js = json.loads(out_text(run("verify", "--json", d, ok=(1,))))
    assert js["ok"] is False and js["problems"]
    assert run("verify", "-q", d, ok=(1,)).stdout == b""
    return out


def test_damage_truncate_data_file(damaged):
    r, d = damaged
    victim = r.data_files()[-1]
    f = d / victim
    os.truncate(f, f.stat().st_size // 2)
    out = verify_fails(d, victim)
    assert "FAIL " in out
    assert check_others_cat(r, d, lambda g: victim not in files_of(g)) > 0
    # an entry with a chunk past the cut fails cleanly, naming the file
    cut = f.stat().st_size
    for g in layout(d):
        if g["kind"] == "tensor" and any(s["file"] == victim and s["offset"] + s["length"] > cut
                                         for s in g["storage"]):
            p = run("cat", d, g["key"], ok=(1,))
            assert err_text(p).startswith("ckpt: ") and victim in err_text(p), err_text(p)
            break


def test_damage_delete_data_file(damaged):
    r, d = damaged
    victim = r.data_files()[0]
    (d / victim).unlink()
    verify_fails(d, victim)
    assert check_others_cat(r, d, lambda g: victim not in files_of(g)) > 0
    g = next(g for g in layout(d) if g["kind"] == "tensor" and victim in files_of(g))
    p = run("cat", d, g["key"], ok=(1,))
    assert err_text(p).startswith("ckpt: ") and victim in err_text(p)
    run("cat", "--text", d, g["key"], ok=(1,))
    run("verify", "--data", d, ok=(1,))


@pytest.mark.parametrize("cut", [0, 1, 2, 16, 100, 0.5, -1])
def test_damage_truncate_metadata(damaged, cut):
    r, d = damaged
    f = d / ".metadata"
    size = f.stat().st_size
    n = int(size * cut) if isinstance(cut, float) else (size + cut if cut < 0 else cut)
    os.truncate(f, n)
    verify_fails(d, ".metadata")
    for cmd in (["ls"], ["info"], ["cat"], ["dump-metadata"]):
        args = [*cmd, d] + ([r.entries[0].key] if cmd == ["cat"] else [])
        p = run(*args, ok=(1,))
        assert err_text(p).startswith("ckpt: ") and ".metadata" in err_text(p), err_text(p)


def test_damage_zip_header(damaged):
    r, d = damaged
    lay = layout(d)
    g = next(g for g in lay if g["kind"] == "tensor" and g["storage"] and g["storage"][0]["file"])
    s = g["storage"][0]
    f = d / s["file"]
    data = bytearray(f.read_bytes())
    assert data[s["offset"]:s["offset"] + 4] == b"PK\x03\x04"
    data[s["offset"]] ^= 0xFF
    f.write_bytes(data)
    out = verify_fails(d, g["key"])
    assert f"FAIL {g['key']}: " in out
    # everything else is untouched
    assert check_others_cat(r, d, lambda x: x["key"] != g["key"]) > 0
    p = run("cat", d, g["key"], ok=(1,))
    assert err_text(p).startswith("ckpt: ") and (s["file"] in err_text(p)
                                                 or g["key"] in err_text(p))


def test_damage_garbage_at_end_of_data_file(damaged):
    """Overwrite the tail of a data file (the zip directory of its last item) with garbage."""
    r, d = damaged
    victim = r.data_files()[0]
    f = d / victim
    lay = layout(d)
    last = max((s["offset"], g["key"]) for g in lay for s in g["storage"]
               if s["file"] == victim)[1]
    data = bytearray(f.read_bytes())
    rng = random.Random(7)
    for i in range(len(data) - 64, len(data)):
        data[i] = rng.randrange(256)
    f.write_bytes(data)
    verify_fails(d, last)
    assert check_others_cat(r, d, lambda g: victim not in files_of(g)) > 0


def test_damage_appended_garbage_is_harmless(damaged):
    """Bytes after the last item of a data file are not referenced: torch reads such a
    checkpoint, and so do we."""
    r, d = damaged
    with open(d / r.data_files()[0], "ab") as fh:
        fh.write(os.urandom(4096))
    run("verify", "--data", d)
    assert check_others_cat(r, d, lambda g: True) == len(r.tensors)


def test_damage_appended_garbage_metadata(damaged):
    r, d = damaged
    with open(d / ".metadata", "ab") as fh:
        fh.write(b"\x00garbage" * 64)
    p = run("verify", d, ok=(0, 1))
    if p.returncode == 1:
        assert ".metadata" in out_text(p)


def test_damage_garbage_metadata(damaged):
    r, d = damaged
    (d / ".metadata").write_bytes(random.Random(1).randbytes(5000))
    verify_fails(d, ".metadata")
    (d / ".metadata").write_bytes(b"")
    verify_fails(d, ".metadata")
    (d / ".metadata").unlink()
    verify_fails(d)


@pytest.mark.parametrize("seed", range(4))
def test_damage_random_flips_metadata(damaged, seed):
    """Random byte flips in .metadata: any outcome but a crash (or a sanitizer report)."""
    r, d = damaged
    f = d / ".metadata"
    orig = f.read_bytes()
    rng = random.Random(seed)
    for _ in range(10):
        data = bytearray(orig)
        for _ in range(rng.choice([1, 1, 2, 8])):
            data[rng.randrange(len(data))] = rng.randrange(256)
        f.write_bytes(data)
        run("verify", "--data", d, ok=(0, 1))
        p = run("ls", "--json", "--chunks", d, ok=(0, 1))
        if p.returncode == 0:
            for g in json.loads(out_text(p))[:20]:
                run("cat", d, g["key"], ok=(0, 1, 2))
                run("cat", "--text", d, g["key"], ok=(0, 1, 2))
        run("dump-metadata", d, ok=(0, 1))


@pytest.mark.parametrize("seed", range(4))
def test_damage_random_flips_data(damaged, seed):
    r, d = damaged
    victim = r.data_files()[0]
    f = d / victim
    orig = f.read_bytes()
    rng = random.Random(seed)
    lay = layout(d)
    keys = [g["key"] for g in lay if victim in files_of(g)]
    for _ in range(10):
        data = bytearray(orig)
        for _ in range(rng.choice([1, 4, 32])):
            data[rng.randrange(len(data))] = rng.randrange(256)
        f.write_bytes(data)
        run("verify", "--data", d, ok=(0, 1))
        for k in rng.sample(keys, min(5, len(keys))):
            run("cat", d, k, ok=(0, 1))
            run("cat", "--text", d, k, ok=(0, 1))


# ------------------------------------------------------------------------------------------
# a synthetic checkpoint with large tensors (needs torch): summarised --text, multi-block cat
# ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    torch = pytest.importorskip("torch")
    import warnings

    import torch.distributed.checkpoint as dcp
    d = tmp_path_factory.mktemp("synthetic") / "ckpt"
    g = torch.Generator().manual_seed(0)
    sd = {"big": torch.randn(17 * 1024 * 1024 + 3, generator=g),  # spans many read blocks
          "cube": torch.randn(20, 30, 40, generator=g),
          "ints": torch.arange(5000, dtype=torch.int64).reshape(50, 100),
          "wide": torch.randn(3, 2000, generator=g).to(torch.bfloat16),
          "tall": torch.randn(2000, 1, generator=g).to(torch.float16),
          "edge": torch.arange(1001, dtype=torch.int32)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(sd, checkpoint_id=str(d))
    raw = {k: v.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() for k, v in sd.items()}
    shapes = {k: list(v.shape) for k, v in sd.items()}
    dtypes = {k: str(v.dtype).removeprefix("torch.") for k, v in sd.items()}
    return d, raw, shapes, dtypes


def test_synthetic_large(synthetic):
    d, raw, shapes, dtypes = synthetic
    run("verify", "--data", d)
    assert run("cat", d, "big").stdout == raw["big"]
    assert run("cat", "--block-size", "1M", d, "big").stdout == raw["big"]
    arr = np.frombuffer(raw["cube"], dtype="V4").reshape(shapes["cube"])
    for bs in ("4", "100", "4K", "5000"):
        for spec in ("", "1:-1,5:,::1", "-1", "...,7:9"):
            want = np.ascontiguousarray(arr[py_index(spec)]).tobytes()
            assert run("cat", "--block-size", bs, "--slice", spec, d, "cube").stdout == want


def test_synthetic_summarised_text(synthetic):
    d, raw, shapes, dtypes = synthetic
    for key in ("cube", "ints", "wide", "tall", "edge"):
        text = out_text(run("cat", "--text", d, key))[:-1]
        itemsize = ITEMSIZE[dtypes[key]]
        assert skeleton(text) == numpy_skeleton(shapes[key], itemsize), key
        e = Entry(["T", key, dtypes[key], ",".join(map(str, shapes[key])), "0",
                   str(len(raw[key])), key], None)
        r = type("R", (), {"data": lambda self, _e: raw[key]})()
        values = elem_values(r, e)
        # the printed values are the edge items of every dimension
        a = np.arange(len(values)).reshape(shapes[key])
        for axis, n in enumerate(shapes[key]):
            if n > 6:
                a = np.concatenate([a.take(range(3), axis), a.take(range(n - 3, n), axis)], axis)
        toks = [t for t in text_tokens(text) if t != "..."]
        idx = a.reshape(-1)
        assert len(toks) == len(idx), key
        bad = [(t, values[i]) for t, i in zip(toks, idx) if not value_matches(e.dtype, t, values[i])]
        assert not bad, (key, bad[:5])
    # 1000 elements or fewer are printed whole
    text = out_text(run("cat", "--text", "--slice", "0:1000", d, "edge"))
    assert "..." not in text and len(text_tokens(text)) == 1000


# ------------------------------------------------------------------------------------------
# the bad-input checkpoints of tests/fixtures/corrupt
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CORRUPT_CASES)
def test_corrupt_case(case):
    r = Ref(case, CORRUPT)
    # dag_value's data is intact: its hostile value is valid, only too large to render
    intact = case in ("base", "dag_value") or case.startswith("overlap_")
    p = run("verify", r.dir, ok=(0,) if intact else (1,))
    out = out_text(p)
    if not intact:
        assert re.search(r"^FAIL[ :]", out, re.M), out
    js = json.loads(out_text(run("verify", "--json", "--data", r.dir, ok=(0, 1))))
    assert js["ok"] is intact
    # the entries the damage leaves intact still read back exactly
    for e in r.entries:
        if e.kind == "tensor":
            assert run("cat", r.dir, e.key).stdout == r.data(e), e.key
        else:
            assert out_text(run("cat", r.dir, e.key)) == e.repr + "\n", e.key
    # nothing crashes, whatever the damage
    for cmd in (["info", "--json"], ["dump-metadata"], ["ls", "-lR", "--chunks"]):
        run(*cmd, r.dir, ok=(0, 1))
    p = run("ls", "--json", "--chunks", r.dir, ok=(0, 1))
    if p.returncode == 0:
        for g in json.loads(out_text(p)):
            run("cat", r.dir, g["key"], ok=(0, 1))
            run("cat", "--text", "--slice", "...", r.dir, g["key"], ok=(0, 1, 2))
            run("cat", "--json", r.dir, g["key"], ok=(0, 1))


def peak_rss_mb(*args, timeout=60):
    """Runs ckpt ARGS in a fresh Python parent and returns (completed process, seconds, the
    child's peak RSS in MB)."""
    code = ("import resource, subprocess, sys, time\n"
            "t = time.monotonic()\n"
            "r = subprocess.run(sys.argv[1:], capture_output=True)\n"
            "t = time.monotonic() - t\n"
            "sys.stderr.buffer.write(r.stderr)\n"
            "print(r.returncode, len(r.stdout), t,\n"
            "      resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)\n")
    p = subprocess.run(["python3", "-c", code, BIN, *map(str, args)], capture_output=True,
                       text=True, timeout=timeout)
    rc, nout, secs, mb = p.stdout.split()
    return int(rc), int(nout), p.stderr, float(secs), float(mb)


def test_shared_dag_value_is_bounded():
    """Issue #22 item 5: step's value is 40 levels of `a = [a, a]` (1.5 KB stored, 2**40 lists
    as a tree).  `ckpt cat` (text and JSON) ends with an error naming the key and the render
    budget, printing nothing, in bounded memory (it used to grow past 600 MB); so does
    dump-metadata of a .metadata holding the same DAG.  Memory and output are the bounds
    asserted; the 120 s timeout only guards against a hang."""
    d = CORRUPT / "dag_value" / "ckpt"
    for opts in ([], ["--json"]):
        rc, nout, err, secs, mb = peak_rss_mb("cat", *opts, d, "step", timeout=120)
        assert rc == 1 and nout == 0, (rc, nout, err)
        assert "step: value too large to render" in err, err
        assert mb < 256, (opts, secs, mb)
    rc, nout, err, secs, mb = peak_rss_mb("dump-metadata", CORRUPT / "dag_metadata" / "ckpt",
                                          timeout=120)
    assert rc == 1 and nout == 0 and "pickle too large to render as JSON" in err, (rc, err)
    assert mb < 256, (secs, mb)


def test_directory_of_checkpoints_is_named(tmp_path):
    """Given a training run's directory instead of one checkpoint, ckpt says which checkpoints
    it holds and which is the latest (as the mount's `latest` picks it), and fails."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copytree(FIXTURES / "fsdp2_ws1" / "ckpt", run_dir / "step-100")
    shutil.copytree(FIXTURES / "fsdp2_ws2" / "ckpt", run_dir / "step-200")
    for cmd in ("info", "ls", "verify"):
        err = run(cmd, run_dir, ok=(1,)).stderr.decode()
        assert f"{run_dir} is a directory of 2 checkpoints (step-100, step-200)" in err, err
        assert f"e.g. {run_dir}/step-200 (the latest)" in err, err
    (run_dir / "latest").write_text("step-100\n")  # as the saver keeps it
    err = run("info", f"{run_dir}/", ok=(1,)).stderr.decode()
    assert f"e.g. {run_dir}/step-100 (the latest)" in err, err


def test_a_key_that_spells_another_path_is_never_taken_silently(tmp_path):
    """Issue #22: the top-level key 'model/x' (tree path 'model%2Fx') and the nested
    model['x'] (key 'model.x', tree path 'model/x'), saved by torch.  `ckpt ls` prints
    'model/x' for the nested tensor; `ckpt cat` of that name used to return the other entry
    (its flat key).  Now the bare name is refused as ambiguous, --path and --key each take
    the entry they say, and `ckpt diff` matches by tree path only."""
    torch = pytest.importorskip("torch")
    import torch.distributed.checkpoint as dcp
    top = torch.arange(3, dtype=torch.float32)
    nested = torch.arange(10, 15, dtype=torch.float32)
    ck = tmp_path / "ck"
    dcp.save({"model/x": top, "model": {"x": nested}}, checkpoint_id=str(ck), no_dist=True)
    ls = out_text(run("ls", str(ck), "-R"))
    assert "model%2Fx" in ls and "x" in ls, ls
    p = run("cat", str(ck), "model/x", ok=(2,))
    assert "ambiguous" in err_text(p) and "--path" in err_text(p), err_text(p)
    assert run("cat", "--path", str(ck), "model/x").stdout == nested.numpy().tobytes()
    assert run("cat", "--key", str(ck), "model/x").stdout == top.numpy().tobytes()
    assert run("cat", str(ck), "model%2Fx").stdout == top.numpy().tobytes()
    assert run("cat", str(ck), "model.x").stdout == nested.numpy().tobytes()
    run("cat", "--key", str(ck), "model%2Fx", ok=(2,))  # a path, not a key
    # diff pairs entries by tree path: a copy with the nested tensor changed differs there
    ck2 = tmp_path / "ck2"
    dcp.save({"model/x": top, "model": {"x": nested + 1}}, checkpoint_id=str(ck2), no_dist=True)
    d = run("diff", str(ck), str(ck2), ok=(1,))
    assert "changed" in out_text(d) and "model/x" in out_text(d), out_text(d)
    assert "model%2Fx" not in out_text(d).replace("same", ""), out_text(d)


def test_long_and_nul_names(tmp_path):
    """Issue #22: a path element over NAME_MAX (255 bytes) is shortened to a unique valid name
    (its first bytes, "%~" and a hash of the whole element), so both such entries stay
    addressable; keys holding a NUL byte (which two truncations would merge into one) are
    refused with a message naming the defect."""
    torch = pytest.importorskip("torch")
    import torch.distributed.checkpoint as dcp
    a, b = torch.arange(4, dtype=torch.float32), torch.arange(4, 8, dtype=torch.float32)
    ck = tmp_path / "long"
    dcp.save({"w" * 300: a, "w" * 299 + "v": b}, checkpoint_id=str(ck), no_dist=True)
    names = [n for n in out_text(run("ls", str(ck))).split() if n.startswith("www")]
    assert len(names) == 2 and len(set(names)) == 2, names
    assert all(len(n.encode()) <= 255 and "%~" in n for n in names), names
    got = {run("cat", "--path", str(ck), n).stdout for n in names}
    assert got == {a.numpy().tobytes(), b.numpy().tobytes()}
    assert run("cat", "--key", str(ck), "w" * 300).stdout == a.numpy().tobytes()
    nul = tmp_path / "nul"
    dcp.save({"x\0a": a, "x\0b": b}, checkpoint_id=str(nul), no_dist=True)
    p = run("ls", str(nul), ok=(1,))
    assert "NUL byte" in err_text(p) and ".metadata" in err_text(p), err_text(p)


def test_run_directories(tmp_path):
    """Issue #23: `ckpt` takes RUN@STEP and RUN@latest (latest as the mount picks it: a
    `latest` file, SageMaker's `newest`, else the newest complete step); `ckpt prune --keep N`
    deletes the oldest complete steps, never the latest nor an incomplete one."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for i, fx in ((100, "fsdp2_ws1"), (200, "fsdp2_ws2"), (300, "fsdp2_ws3")):
        shutil.copytree(FIXTURES / fx / "ckpt", run_dir / f"step-{i}")
    (run_dir / "step-400").mkdir()  # being written: no .metadata
    shutil.copy(FIXTURES / "fsdp2_ws1" / "ckpt" / "__0_0.distcp", run_dir / "step-400")

    def files_of(d):
        return out_text(run("info", "--json", str(d)))

    assert files_of(f"{run_dir}@latest") == files_of(run_dir / "step-300")
    assert files_of(f"{run_dir}@step-100") == files_of(run_dir / "step-100")
    (run_dir / "newest").write_text("step-200\n")
    assert files_of(f"{run_dir}@latest") == files_of(run_dir / "step-200")
    p = run("info", f"{run_dir}@step-999", ok=(1,))
    assert "step-999" in err_text(p)
    # prune: keep 1 -> step-200 (named by `newest`) must stay as well as the newest
    run("prune", "--keep", "1", str(run_dir))
    left = sorted(p.name for p in run_dir.iterdir())
    assert left == ["newest", "step-200", "step-300", "step-400"], left
    run("prune", "--keep", "0", str(run_dir), ok=(2,))
