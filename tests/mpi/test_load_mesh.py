"""test_load_mesh.py — `ckpt load --layout SPEC` under real `mpirun` for DTensor layouts (a
device mesh and placements, docs/loader.md): on every fixture, for 2x2:S0,S1, 2x2:S0s2,S0,
2x3:R,S0, 3x2:S1,R, 2:S0s2 and 5:S0 (M != N, uneven and empty shards, several mesh dims on one
tensor dim, _StridedShard shards that are several boxes), each rank's dumped buffer equals
what torch's DTensor holds on that rank — torch's own splitting code (tests/lib/dtensor_ref.py,
checked against real DTensor under gloo by tests/unit/gen_mesh_vectors.py), and for two specs
real distribute_tensor(..., src_data_rank=None).to_local() under gloo (dtensor_referee.py) —
and the job reads each needed stored byte once; over TCP as well; --layout-map mixes specs per
key; bad specs are usage errors on every rank.

Environment as test_load.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from test_load import BIN, FIXTURES, ITEM, NAMES, check_dumps, mpirun, tensors  # noqa: E402

torch = pytest.importorskip("torch")
import dtensor_ref  # noqa: E402
import sweep  # noqa: E402

SPECS = dtensor_ref.SPECS
ranks = dtensor_ref.nranks


def expect(raw: bytes, dtype: str, shape, spec: str, rank: int) -> bytes:
    item = ITEM[dtype]
    full = torch.from_numpy(np.frombuffer(raw, dtype=np.uint8).copy().reshape(*shape, item))
    return dtensor_ref.expected_local(full, spec, rank, ndim=len(shape)).numpy().tobytes()


def check(fx: Path, spec: str, out: Path, extra=(), opts=(), layout=None, leak=False):
    m = ranks(spec)
    r = mpirun(m, fx / "ckpt", "--layout", layout or spec, "--dump", out, "--json", *extra,
               opts=opts, leak=leak)
    assert r.returncode == 0, (fx.name, spec, r.stdout + r.stderr)
    stats = json.loads(r.stdout.strip().splitlines()[-1])
    assert sum(p["read_plan"] for p in stats["per_rank"]) == stats["union_bytes"], (fx.name, spec)
    ref, _ = tensors(fx)
    check_dumps(out, ref, m, lambda raw, dt, shape, k: expect(raw, dt, shape, spec, k),
                (fx.name, spec))
    return stats


@pytest.mark.parametrize("name", NAMES)
def test_mesh_layouts_equal_dtensor(name, tmp_path):
    fx = FIXTURES / name
    # a short sweep: 2 specs per fixture, in turn, and the leak-checked one on each
    for spec in sweep.pick(SPECS, NAMES.index(name), 2, keep=["2x2:S0s2,S0"]):
        i = SPECS.index(spec)
        # alternate: everything through the exchange / single-owner runs read in place
        check(fx, spec, tmp_path / f"s{i}", extra=("--direct-min", "never" if i % 2 else "1"),
              leak=spec == "2x2:S0s2,S0")  # leak-checked in sanitizer builds (slow)
        shutil.rmtree(tmp_path / f"s{i}")


# _StridedShard after the first dim: each rank's shard is a box per row and run, requested as
# one strided box per run (a destination with the local tensor's strides, docs/loader.md)
STRIDED = ["2x2:S1s2,R", "3x2:R,S1s3", "2x2:S0s2,S1s2"]


@pytest.mark.parametrize("name", NAMES)
def test_strided_shards_after_the_first_dim_equal_dtensor(name, tmp_path):
    """Strided run boxes through every path: transfers exchanged or read in place, decoded
    (zstd) and byte-swapped chunks read by their rank, the independent mode, many rounds."""
    fx = FIXTURES / name
    n = NAMES.index(name)
    for spec in sweep.rotate(STRIDED, n, 1):  # a short sweep: one spec per fixture, in turn
        i = STRIDED.index(spec)
        check(fx, spec, tmp_path / f"s{i}", extra=("--direct-min", "never" if i % 2 else "1"))
        shutil.rmtree(tmp_path / f"s{i}")
    if not sweep.SHORT or n % 2 == 0:
        check(fx, STRIDED[0], tmp_path / "ind", extra=("--mode", "independent"))
    if not sweep.SHORT or n % 2 == 1:
        check(fx, STRIDED[2], tmp_path / "small", extra=("--budget", "2K"))


@pytest.mark.parametrize("spec", ["2x2:S0s2,S0", "2x3:R,S0"])
def test_over_tcp(spec, tmp_path):
    check(FIXTURES / "fsdp2_ws3", spec, tmp_path / "o", opts=("--mca", "btl", "self,tcp"))


def test_alias_and_dim_shorthand(tmp_path):
    """dim1 is 3:S1 on 3 ranks; dim1-of-3 the same layout."""
    fx = FIXTURES / "fsdp2_ws4"
    check(fx, "3:S1", tmp_path / "a", layout="dim1")
    check(fx, "3:S1", tmp_path / "b", layout="dim1-of-3")


@pytest.mark.parametrize("spec", ["2x2:S0s2,S0", "2x3:S1,S0s2"])
def test_real_dtensor_under_gloo(spec, tmp_path):
    """The referee itself: real DTensor on a gloo mesh of the same shape, in one job."""
    fx = FIXTURES / "fsdp2_ws4"
    check(fx, spec, tmp_path / "o")
    r = subprocess.run([sys.executable, str(Path(__file__).with_name("dtensor_referee.py")),
                        str(fx), spec, str(tmp_path / "o")], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0 and r.stdout.startswith("ok "), r.stdout + r.stderr
    assert int(r.stdout.split()[1]) > 10


def test_layout_map_mixes_specs(tmp_path):
    """A per-key map: a flat key, a directory, and the default "*"; the longest match wins."""
    fx = FIXTURES / "fsdp2_ws4"
    ref, _ = tensors(fx)
    paths = sorted(p for p, (d, s, _) in ref.items() if "%" not in p and d in ITEM and len(s) == 2)
    assert len(paths) >= 2
    one = paths[0]
    top = one.split("/")[0]
    mapping = {"*": "2x2:R,S0", top: "2x2:S1,S0s2", one: "2x2:S0s2,S0"}
    (tmp_path / "map.json").write_text(json.dumps(mapping))
    r = mpirun(4, fx / "ckpt", "--layout", "2x2:S0,S1", "--layout-map", tmp_path / "map.json",
               "--dump", tmp_path / "o", leak=True)
    assert r.returncode == 0, r.stdout + r.stderr
    seen = set()
    for path, (dtype, shape, raw) in ref.items():
        if "%" in path or dtype not in ITEM:
            continue
        spec = mapping[one] if path == one else mapping[top] if path.startswith(top + "/") \
            else mapping["*"]
        seen.add(spec)
        for k in range(4):
            got = (tmp_path / "o" / f"rank{k}" / path).read_bytes()
            assert got == expect(raw, dtype, shape, spec, k), (path, spec, k)
    assert len(seen) >= 2, seen


@pytest.mark.parametrize("layout,m,msg", [
    ("3:S0", 2, "has 3 ranks but the job has 2"),
    ("2x2:S0", 4, "1 placements for 2 mesh dims"),
    ("2:S0s", 2, "expected a split factor"),
    ("dimx", 2, "expected a tensor dim"),
])
def test_bad_layouts_are_usage_errors(layout, m, msg):
    r = mpirun(m, FIXTURES / "fsdp2_ws2" / "ckpt", "--layout", layout)
    assert r.returncode == 2 and msg in r.stderr, r.stderr


def test_bad_layout_map(tmp_path):
    (tmp_path / "m.json").write_text('{"*": "2:S0", "model": "2:Q"}')
    r = mpirun(2, FIXTURES / "fsdp2_ws2" / "ckpt", "--layout-map", tmp_path / "m.json")
    assert r.returncode == 2 and "'model'" in r.stderr and "expected a placement" in r.stderr, \
        r.stderr
    (tmp_path / "m.json").write_text('{"model\\u0000x": "2:S0"}')
    r = mpirun(2, FIXTURES / "fsdp2_ws2" / "ckpt", "--layout-map", tmp_path / "m.json")
    assert r.returncode == 2 and "a key with a NUL character" in r.stderr, r.stderr
    (tmp_path / "m.json").write_text('{"model": 3}')
    r = mpirun(2, FIXTURES / "fsdp2_ws2" / "ckpt", "--layout-map", tmp_path / "m.json")
    assert r.returncode == 2 and "the spec is not a string" in r.stderr, r.stderr
    (tmp_path / "m.json").write_text('["2:S0"]')
    r = mpirun(2, FIXTURES / "fsdp2_ws2" / "ckpt", "--layout-map", tmp_path / "m.json")
    assert r.returncode == 2 and "not a JSON object" in r.stderr, r.stderr


@pytest.mark.parametrize("spec", ["2x2:S1s2,S0", "2:S0s2", "3x2:S1s3,R", "5:S0"])
def test_c_api_box_lists(spec):
    """ckpt_load_request_layout and ckpt_load_request_boxes (load_boxes.c) fill one buffer
    with the boxes in order, equal to the reader's own reads; failed requests keep nothing."""
    drv = os.environ.get("CKPT_LOAD_BOXES")
    if not drv:
        pytest.skip("needs CKPT_LOAD_BOXES")
    keys = ["model/tok_embeddings.weight", "model/layers.0.attention.wo.weight", "model/mix",
            "optim/state/mix/step", "optim/state/layers.0.mlp.0.bias/exp_avg"]
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca",
           "btl_vader_single_copy_mechanism", "none", "-np", str(ranks(spec)), drv,
           str(FIXTURES / "fsdp2_ws4" / "ckpt"), spec, *keys]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("ok:"), r.stdout + r.stderr
    if "s" in spec.split(":")[1]:
        assert int(r.stdout.split()[1]) > len(keys) * ranks(spec), r.stdout  # several per shard
