"""realistic.py — device loads of a realistic checkpoint for the stand-in tests
(test_device_mock.py, test_nccl_mock.py): the README demo's GPT-style model + AdamW state
(many small tensors: norms, 0-d `step` tensors, beside the weights), saved by the collective
saver at N ranks under mpirun, loaded with `ckpt load --device cuda` at M ranks.  Each tensor
gets its own cudaMalloc, and the stand-in runtime packs allocations as a GPU does (adjacent,
256-byte aligned), so a copy merged across two tensors' buffers is refused, as on a real GPU
(issue #26).  The referee is torch: `dcp_to_torch_save` of the same directory.

Environment: DEMO_GPT_SAVE (tools/demo/demo_gpt_save), CKPT_BIN."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mpi"))
import test_load as tl  # noqa: E402  (helpers: shard, ITEM)

DEMO = os.environ.get("DEMO_GPT_SAVE")
# small enough for every CI run (1.6 MB), shaped like the real one: the 64-wide norms are 256
# bytes, so their Shard(0) pieces fill whole 256-byte allocation units and sit back to back
CONFIG = ("--layers", "2", "--dim", "64", "--vocab", "256", "--no-fsync")


def save_demo(parent: Path, n: int = 4) -> Path:
    """The demo model saved by n ranks; the step directory."""
    parent.mkdir(parents=True, exist_ok=True)
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n), DEMO, str(parent),
           "step-1", *CONFIG]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return parent / "step-1"


def torch_reference(ckpt: Path, tmp: Path):
    """path -> (dtype name, shape, C-order bytes), as torch reads the checkpoint."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(str(ckpt), str(tmp / "ref.pt"))
    sd = torch.load(tmp / "ref.pt", weights_only=False)
    out = {}

    def walk(d, prefix):
        for k, v in d.items():
            p = f"{prefix}/{k}" if prefix else str(k)
            if isinstance(v, dict):
                walk(v, p)
            elif isinstance(v, torch.Tensor):
                name = str(v.dtype).removeprefix("torch.")
                out[p] = (name, tuple(v.shape), v.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())

    walk(sd, "")
    assert len(out) > 50, sorted(out)  # 19 parameters, 3 states each
    return out


def load_and_compare(ckpt: Path, ref, m: int, dim: int, transport: str, out: Path,
                     mode: str = "collective"):
    """`ckpt load --device cuda` at m ranks; every rank's buffers (copied back from the
    device) equal torch's tensors cut as Shard(dim); returns the load's counters."""
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--mca",
           "btl_vader_single_copy_mechanism", "none", "-np", str(m), tl.BIN, "load", str(ckpt),
           "--device", "cuda", "--transport", transport, "--layout", f"dim{dim}", "--mode",
           mode, "--dump", str(out), "--json"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (m, dim, transport, r.stdout + r.stderr)
    stats = json.loads(r.stdout.strip().splitlines()[-1])
    tl.check_dumps(out, ref, m, lambda raw, dt, shape, k: tl.shard(raw, dt, shape, dim, m, k),
                   (f"dim{dim}", transport))
    per = stats["per_rank"]
    assert [p["device"] for p in per] == [p["requested"] for p in per], stats
    if mode == "collective":
        assert all(p["transport"] == transport for p in per), stats
        assert sum(p["read_plan"] for p in per) == stats["union_bytes"], stats  # each byte once
    return stats
