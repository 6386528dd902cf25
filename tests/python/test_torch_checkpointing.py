"""torch-checkpointing checkpoints (tests/fixtures/torch-checkpointing/) through the Python
package: ckptfs.open reads every tensor as torch-checkpointing's own load returned it
(reference.json), and dcp.load with ckptfs.dcp.StorageReader fills a state_dict alike."""

import json
import os
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

import ckptfs
from ckptfs.dcp import StorageReader

warnings.filterwarnings("ignore")

# CKPT_TC_FIXTURES: fixtures generated afresh (tools/run-tests.sh), else the committed ones
FIXTURES = Path(os.environ.get("CKPT_TC_FIXTURES") or
                Path(__file__).resolve().parents[1] / "fixtures" / "torch-checkpointing")
NAMES = sorted(p.name for p in FIXTURES.iterdir() if (p / "reference.json").is_file())


def hexof(t: torch.Tensor) -> str:
    return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes().hex()


def tensors(name: str) -> list[dict]:
    doc = json.loads((FIXTURES / name / "reference.json").read_text(encoding="utf-8"))
    return [e for e in doc["entries"] if e["kind"] == "tensor"]


@pytest.mark.parametrize("name", NAMES)
def test_open_reads_what_the_library_loads(name):
    with ckptfs.open(str(FIXTURES / name / "ckpt")) as c:
        for e in tensors(name):
            t = c.read_tensor(c.find(path="/".join(map(str, e["path"]))))
            assert str(t.dtype) == "torch." + e["dtype"] and list(t.shape) == e["shape"]
            assert hexof(t) == e["hex"], e["path"]


@pytest.mark.parametrize("name", NAMES)
def test_dcp_load_through_the_storage_reader(name):
    ref = {".".join(map(str, e["path"])): e for e in tensors(name)}
    sd = {k: torch.full(e["shape"], 7, dtype=getattr(torch, e["dtype"])) for k, e in ref.items()}
    dcp.load(sd, storage_reader=StorageReader(str(FIXTURES / name / "ckpt")), no_dist=True)
    for k, v in sd.items():
        assert hexof(v) == ref[k]["hex"], k


def test_json_ints_beyond_64_bits_are_python_ints(tmp_path):
    """A JSON item with ints of any size, written by the registry's release: read_value gives
    exactly what json.loads gives (ints, not the nearest floats)."""
    pytest.importorskip("torch_checkpointing")
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
    import generate_torch_checkpointing as gen
    cfg = {"big": 2 ** 100, "neg": -(2 ** 80) - 7, "huge": 10 ** 400 + 1, "list": [2 ** 64, 1]}
    m = gen._manager(["model"], {"config": ("json", "config_{rank}.json")})
    m.save(str(tmp_path / "c"), {"model": {"w": torch.zeros(2)}, "config": cfg})
    m.close()
    want = json.loads((tmp_path / "c" / "config_0.json").read_text())
    with ckptfs.open(str(tmp_path / "c")) as c:
        for k, v in want.items():
            got = c.read_value(c.find(path=f"config/{k}"))
            assert got == v and type(got) is type(v), (k, got)
