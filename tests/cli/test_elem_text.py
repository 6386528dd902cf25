"""`ckpt cat --json` prints every float element with the shortest digits that read back in the
element's own dtype: for float16 (every finite value) and float32 (random values, powers of two
and their neighbours, where the rounding interval is lopsided) the digits are exactly numpy's
(`str` of a numpy scalar: the shortest round-trip digits, ties to even), in Python's notation
(exponent form iff |x| >= 1e16 or 0 < |x| < 1e-4).  The checkpoint is written by real torch.

Environment: CKPT_BIN (the built `ckpt`)."""

from __future__ import annotations

import json
import os
import subprocess
from decimal import Decimal

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dcp = pytest.importorskip("torch.distributed.checkpoint")

BIN = os.environ.get("CKPT_BIN")
if not BIN:
    pytest.skip("CKPT_BIN is not set (run through meson test)", allow_module_level=True)


def _f32_bits() -> np.ndarray:
    rng = np.random.default_rng(20261201)
    rand = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32)
    pows = []
    for e in range(-149, 128):  # 2**e as float32 bits, and its neighbours
        b = int(np.array(np.ldexp(1.0, e), np.float32).view(np.uint32))
        pows += [b - 1, b, b + 1]
    return np.concatenate([rand, np.array([p for p in pows if 0 < p < 0x7F800000], np.uint32)])


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("elem_text") / "ckpt"
    halves = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.float16)
    singles = _f32_bits().view(np.float32)
    sd = {"f16": torch.from_numpy(halves[np.isfinite(halves)].copy()),
          "f32": torch.from_numpy(singles[np.isfinite(singles)].copy())}
    dcp.save(sd, checkpoint_id=str(d), no_dist=True)
    return d, {k: v.numpy() for k, v in sd.items()}


def _printed(ckpt_dir, key) -> list[str]:
    p = subprocess.run([BIN, "cat", "--json", str(ckpt_dir), key], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout, parse_float=str, parse_int=str)  # the tokens as printed


def _python_notation(x: float) -> bool:
    """True when Python's repr of x uses the exponent form."""
    return x != 0 and (abs(x) >= 1e16 or abs(x) < 1e-4)


@pytest.mark.parametrize("key", ["f16", "f32"])
def test_shortest_digits_are_numpys(ckpt, key):
    d, want = ckpt
    toks = _printed(d, key)
    assert len(toks) == want[key].size
    bad = []
    for tok, v in zip(toks, want[key]):
        digits_ok = Decimal(tok).normalize().as_tuple() == Decimal(str(v)).normalize().as_tuple()
        notation_ok = ("e" in tok) == _python_notation(float(v))
        point_ok = "e" in tok or "." in tok  # JSON floats keep a point: 1.0, never 1
        if not (digits_ok and notation_ok and point_ok):
            bad.append(f"{v!r} ({np.array(v).view(np.uint16 if key == 'f16' else np.uint32)}): "
                       f"printed {tok}, numpy {v}")
    assert not bad, f"{len(bad)} of {len(toks)} differ, e.g.\n" + "\n".join(bad[:10])
