"""test_mount_mesh.py — `.layout/<spec>/<rank>/<path>` for DTensor layouts (a device mesh and
placements: `2x2:S0s2,S0`, docs/mount.md) through real FUSE mounts of every fixture: for 2x2:S0,S1,
2x2:S0s2,S0, 2x3:R,S0, 3x2:S1,R, 2:S0s2 and 5:S0 every rank's file is exactly what torch's
DTensor holds on that rank (tests/lib/dtensor_ref.py: torch's own splitting code, checked
against real DTensor under gloo by tests/unit/gen_mesh_vectors.py), read whole and in pieces
that straddle the boxes of a _StridedShard shard; its xattrs are the local shape, torch's
global offset and the global shape; `dim<d>-of-<N>` stays an alias; names that are not specs
do not exist.

Environment as test_mount.py."""

from __future__ import annotations

import errno
import json
import os
import random
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from test_mount import FIXTURES, NAMES, Mount, Ref, np_dtype  # noqa: E402

torch = pytest.importorskip("torch")
import dtensor_ref  # noqa: E402

SPECS = dtensor_ref.SPECS
nranks = dtensor_ref.nranks


def full_bytes(ref, path):
    """The tensor as uint8 with a trailing dim of its element's bytes (never sharded)."""
    dtype, shape, data, _ = ref.tensors[path]
    item = np.dtype(np_dtype(dtype)).itemsize
    return torch.from_numpy(np.frombuffer(data, dtype=np.uint8).copy().reshape(*shape, item))


@pytest.fixture(scope="module", params=NAMES)
def mounted(request):
    fixture = FIXTURES / request.param
    m = Mount(fixture / "ckpt")
    yield m, Ref(fixture)
    m.close()


def test_mesh_layouts_equal_dtensor(mounted):
    m, ref = mounted
    rng = random.Random(7)
    multi = 0
    for spec in SPECS:
        d = m.dir / ".layout" / spec
        n = nranks(spec)
        assert sorted(os.listdir(d), key=int) == [str(r) for r in range(n)]
        for path, (dtype, shape, data, key) in ref.tensors.items():
            full = full_bytes(ref, path)
            for r in range(n):
                f = d / str(r) / path
                want = dtensor_ref.expected_local(full, spec, r, ndim=len(shape))
                wb = want.numpy().tobytes()
                got = f.read_bytes()
                assert got == wb, (spec, path, shape, r)
                assert os.stat(f).st_size == len(wb)
                ls, off = dtensor_ref.expected_offset(shape, spec, r)
                assert json.loads(os.getxattr(f, "user.ckpt.shape")) == ls == list(want.shape[:-1])
                assert json.loads(os.getxattr(f, "user.ckpt.offset")) == off, (spec, path, r)
                assert json.loads(os.getxattr(f, "user.ckpt.global_shape")) == list(shape)
                assert os.getxattr(f, "user.ckpt.key").decode() == key
                if len(wb) > 2:  # pieces at odd offsets, across box boundaries
                    multi += 1
                    fd = os.open(f, os.O_RDONLY)
                    try:
                        for _ in range(4):
                            a = rng.randrange(len(wb))
                            k = rng.randrange(1, len(wb) - a + 1)
                            assert os.pread(fd, k, a) == wb[a:a + k], (spec, path, r, a, k)
                    finally:
                        os.close(fd)
    assert multi
    listed = os.listdir(m.dir / ".layout")
    assert all(s in listed for s in SPECS), listed


def test_alias_is_the_same_layout(mounted):
    m, ref = mounted
    for path in ref.tensors:
        for r in range(3):
            a = (m.dir / ".layout" / "dim1-of-3" / str(r) / path).read_bytes()
            b = (m.dir / ".layout" / "3:S1" / str(r) / path).read_bytes()
            assert a == b, (path, r)


@pytest.mark.parametrize("name", ["2:S0s0", "3x:R", "2x2:S0", "0:S0", "2:S64", "2:S0s65537",
                                  "2:s0", "2:S0,", "x" * 200, "1048577:R", "08:S0",
                                  "2048x1024:R,R", "dim0-of-0", "dim1"])
def test_not_a_spec_does_not_exist(mounted, name):
    m, _ = mounted
    with pytest.raises(OSError) as e:
        os.stat(m.dir / ".layout" / name)
    assert e.value.errno == errno.ENOENT, name
