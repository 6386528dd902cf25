"""other_formats.py — checkpoints without DCP metadata, for the read-once tests of the loader
(docs/loader.md "Read once"), written by real torch, and their tensors as torch holds them.

`make_bin_dir(d)`: HuggingFace's torch.save shards (what save_pretrained writes with
safe_serialization=False): pytorch_model-0000k-of-00002.bin holding flat state_dicts and
pytorch_model.bin.index.json.  `make_torchsave_file(path)`: one torch.save file of a nested
state_dict.  Each returns {tree path: (dtype name, shape, raw C-order bytes)}, the form
load_ref.tensors gives.  `tc_reference(fixture)`: the same from a torch-checkpointing
fixture's reference.json (written by torch when it was made)."""
from __future__ import annotations

import json
from pathlib import Path

DTYPES = {"torch.float32": "float32", "torch.bfloat16": "bfloat16", "torch.int64": "int64",
          "torch.float16": "float16"}


def _raw(t):
    import torch
    t = t.detach().contiguous().reshape(-1)
    return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""


def _entry(t):
    return (DTYPES[str(t.dtype)], tuple(t.shape), _raw(t))


def make_bin_dir(d: Path) -> dict:
    import torch
    g = torch.Generator().manual_seed(20)
    sd = {"embed.weight": torch.randn(37, 12, generator=g),
          "layers.0.weight": torch.randn(12, 12, generator=g).to(torch.bfloat16),
          "layers.0.bias": torch.randn(12, generator=g),
          "layers.1.weight": torch.randn(9, 12, generator=g),
          "step": torch.tensor(7, dtype=torch.int64)}
    d.mkdir(parents=True, exist_ok=True)
    keys = list(sd)
    shards = {"pytorch_model-00001-of-00002.bin": keys[:2],
              "pytorch_model-00002-of-00002.bin": keys[2:]}
    for name, ks in shards.items():
        torch.save({k: sd[k] for k in ks}, d / name)
    (d / "pytorch_model.bin.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 0},
         "weight_map": {k: name for name, ks in shards.items() for k in ks}}))
    return {k: _entry(v) for k, v in sd.items()}


def make_torchsave_file(path: Path) -> dict:
    import torch
    g = torch.Generator().manual_seed(21)
    sd = {"model": {"w": torch.randn(23, 5, generator=g), "b": torch.randn(5, generator=g)},
          "opt": {"m": torch.randn(23, 5, generator=g).to(torch.float16)}}
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(sd, path)
    return {f"{a}/{b}": _entry(t) for a, inner in sd.items() for b, t in inner.items()}


def tc_reference(fixture: Path) -> dict:
    ref = json.loads((fixture / "reference.json").read_text())
    return {"/".join(map(str, e["path"])): (e["dtype"], tuple(e["shape"]), bytes.fromhex(e["hex"]))
            for e in ref["entries"] if e.get("kind") == "tensor" and "hex" in e}


def build(fixtures: Path, tmp: Path) -> dict:
    """{name: (checkpoint path, reference)} for the read-once tests: HuggingFace safetensors
    storage (bundled fixtures hf_sharded, hf_full), .bin shards and a torch.save file (written
    under tmp), torch-checkpointing (bundled tc_sharded, tc_single)."""
    from load_ref import tensors
    out = {n: (fixtures / n / "ckpt", tensors(fixtures / n)[0]) for n in ("hf_sharded", "hf_full")}
    out["bin"] = (tmp / "bin", make_bin_dir(tmp / "bin"))
    out["torchsave"] = (tmp / "ts" / "model.pt", make_torchsave_file(tmp / "ts" / "model.pt"))
    tc = fixtures.parent / "torch-checkpointing"
    for n in ("tc_sharded", "tc_single"):
        out[n] = (tc / n / "ckpt", tc_reference(tc / n))
    return out
