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
