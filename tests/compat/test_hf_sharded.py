"""test_hf_sharded.py — `ckpt export --max-shard-size` read by HuggingFace's own code (run by
tools/compat/hf_sharded.sh in a venv with huggingface_hub and transformers; skipped without
them): huggingface_hub's split_torch_state_dict_into_shards gives exactly the export's shards
and index metadata, its load_torch_model loads the export strictly into the model, and
transformers' from_pretrained loads a Llama saved by dcp.save (model keys at the top level
beside an optimizer, as torchtitan lays them out) and exported with --exclude, bit-exact."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
hub = pytest.importorskip("huggingface_hub")
BIN = os.environ.get("CKPT_BIN")
if not BIN:
    pytest.skip("CKPT_BIN is not set", allow_module_level=True)
FIXTURES = Path(os.environ.get("CKPT_FIXTURES") or os.environ.get("CKPT_FIXTURES_DEFAULT")
                or Path(__file__).resolve().parents[1] / "fixtures" / "data")
EXCLUDE = ["--exclude", "optimizer", "--exclude", "lr_scheduler", "--exclude", "dataloader",
           "--exclude", "train_state"]


def export(*args):
    r = subprocess.run([BIN, "export", "-q", *map(str, args)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r


@pytest.mark.parametrize("limit", [150, 400, 10 ** 6])
def test_huggingface_hub_splits_and_loads_the_same(tmp_path, limit):
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    ck = FIXTURES / "torchtitan" / "ckpt"
    dcp_to_torch_save(ck, tmp_path / "ref.pt")
    ref = torch.load(tmp_path / "ref.pt", weights_only=False)
    model_sd = {k: v for k, v in ref.items() if isinstance(v, torch.Tensor)}
    out = tmp_path / "hf"
    export(*EXCLUDE, "--max-shard-size", limit, ck, out)
    split = hub.split_torch_state_dict_into_shards(model_sd, max_shard_size=limit)
    assert sorted(p.name for p in out.iterdir()) == sorted(
        list(split.filename_to_tensors) + (["model.safetensors.index.json"]
                                           if split.is_sharded else []))
    if split.is_sharded:
        index = json.loads((out / "model.safetensors.index.json").read_text())
        assert index == {"metadata": split.metadata, "weight_map": split.tensor_to_filename}
    sys.path.insert(0, str(FIXTURES.parent))
    from generate import TinyTransformer
    m = TinyTransformer(n_layers=1)
    hub.load_torch_model(m, out, strict=True)
    for k, v in m.state_dict().items():
        assert torch.equal(v, model_sd[k]), k


def test_transformers_from_pretrained(tmp_path):
    transformers = pytest.importorskip("transformers")
    import torch.distributed.checkpoint as dcp
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=2, tie_word_embeddings=False)
    m = transformers.LlamaForCausalLM(cfg)
    sd = dict(m.state_dict())
    sd["optimizer"] = {f"state.{k}.exp_avg": torch.randn_like(v) for k, v in m.state_dict().items()}
    sd["train_state"] = {"step": 3}
    dcp.save(sd, checkpoint_id=str(tmp_path / "dcp"), no_dist=True)
    out = tmp_path / "out"
    export("--exclude", "optimizer", "--exclude", "train_state", "--max-shard-size", "20KB",
           tmp_path / "dcp", out)
    assert len(list(out.glob("model-*-of-*.safetensors"))) > 1
    cfg.save_pretrained(out)
    m2 = transformers.LlamaForCausalLM.from_pretrained(out)
    a, b = m.state_dict(), m2.state_dict()
    assert sorted(a) == sorted(b)
    for k in a:
        assert torch.equal(a[k], b[k]), k
