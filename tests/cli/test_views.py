"""test_views.py — taking the model out of a flat (torchtitan) checkpoint, and HuggingFace
sharded exports, against torch:

* `ckpt export --exclude optimizer --exclude lr_scheduler ...` of a torchtitan checkpoint
  (model keys at the top level, written by real dcp.save) gives exactly the model: the
  safetensors and torch.save outputs equal torch's own dcp_to_torch_save of the checkpoint
  restricted to those keys, bit for bit and in its key order, and load_state_dict(strict=True)
  of the model class takes them; `--exclude` matches tree paths at element boundaries and
  flat keys at '.' boundaries (`optimizer.state` drops the optimizer's moments, not its
  param_groups values; `optim` drops nothing of `optimizer`), combines with `--keys`, and
  excluding everything fails leaving no file.
* `ckpt export --max-shard-size SIZE` writes model-0000k-of-0000N.safetensors and
  model.safetensors.index.json split exactly as huggingface_hub's split (an independent
  rendering of its rule here, and huggingface_hub itself when it is installed): every shard
  loads with safetensors bit-exact against torch's reading, the index names every tensor once
  and its total_size is their bytes, no shard holds more than SIZE bytes of tensors unless it
  holds one tensor, `ckpt ls`/`ckpt cat` of the exported directory give the source's tensors;
  SIZE in huggingface_hub's units ("0.15KB" = 150 bytes), sizes counted after --dtype; one
  shard is model.safetensors alone, and a second export into the directory removes what the
  first left that the new index does not name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
st = pytest.importorskip("safetensors.torch")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_export_torch import diff, torch_reading  # noqa: E402

BIN = os.environ.get("CKPT_BIN")
FIXTURES = Path(os.environ.get("CKPT_FIXTURES") or os.environ.get("CKPT_FIXTURES_DEFAULT")
                or Path(__file__).resolve().parents[1] / "fixtures" / "data")
if not BIN:
    pytest.skip("CKPT_BIN is not set", allow_module_level=True)
TITAN = FIXTURES / "torchtitan" / "ckpt"
NOT_MODEL = ("optimizer", "lr_scheduler", "dataloader", "train_state")
EXCLUDE = [a for top in NOT_MODEL for a in ("--exclude", top)]


def ckpt(*args):
    return subprocess.run([BIN, *map(str, args)], capture_output=True, timeout=120)


def tbytes(t) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


@pytest.fixture(scope="module")
def titan(tmp_path_factory):
    """torch's own reading of the torchtitan fixture (dcp_to_torch_save + torch.load)."""
    want = torch_reading(TITAN, tmp_path_factory.mktemp("titan"))
    assert want is not None and set(NOT_MODEL) <= set(want)
    return want


def model_of(want: dict) -> dict:
    return {k: v for k, v in want.items() if k not in NOT_MODEL}


def tiny_model():
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
    from generate import TinyTransformer  # the fixture's model class
    return TinyTransformer(n_layers=1)


def test_exclude_gives_the_model_as_safetensors(titan, tmp_path):
    model = model_of(titan)
    assert model and all(isinstance(v, torch.Tensor) for v in model.values())
    out = tmp_path / "model.safetensors"
    r = ckpt("export", "-q", *EXCLUDE, TITAN, out)
    assert r.returncode == 0, r.stderr
    got = st.load_file(out)
    assert set(got) == set(model)
    for k, t in model.items():
        assert got[k].dtype == t.dtype and got[k].shape == t.shape, k
        assert tbytes(got[k]) == tbytes(t), k
    m = tiny_model()
    m.load_state_dict(got, strict=True)


def test_exclude_gives_the_model_as_torch_save(titan, tmp_path):
    out = tmp_path / "model.pt"
    r = ckpt("export", "-q", *EXCLUDE, TITAN, out)
    assert r.returncode == 0, r.stderr
    got = torch.load(out, weights_only=True, mmap=True)
    want = model_of(titan)
    assert list(got) == list(want)  # torch's key order
    d = diff(want, got)
    assert not d, d[:5]
    tiny_model().load_state_dict(got, strict=True)


def test_exclude_by_flat_key_prefix_and_boundaries(titan, tmp_path):
    # `optimizer.state` is no tree path here (the optimizer's keys are flat under optimizer/),
    # but it is a flat-key prefix: the moments go, the param_groups values stay
    out = tmp_path / "o.pt"
    r = ckpt("export", "-q", "--exclude", "optimizer.state", TITAN, out)
    assert r.returncode == 0, r.stderr
    got = torch.load(out, weights_only=True)
    opt = titan["optimizer"]
    want_opt = {k: v for k, v in opt.items() if not k.startswith("state.")}
    assert any(k.startswith("state.") for k in opt) and want_opt
    assert list(got["optimizer"]) == list(want_opt)
    assert not diff(want_opt, got["optimizer"])
    assert not diff({k: v for k, v in titan.items() if k != "optimizer"},
                    {k: v for k, v in got.items() if k != "optimizer"})
    # element and '.' boundaries: `optim` names nothing of optimizer/, `norm` names norm.weight
    # (its flat key continues `norm` after a '.') but not layers.0.norm.weight
    out2 = tmp_path / "o2.safetensors"
    r = ckpt("export", "-q", "--exclude", "optim", "--exclude", "norm", TITAN, out2)
    assert r.returncode == 0, r.stderr
    got2 = st.load_file(out2)
    assert "norm.weight" not in got2 and "layers.0.norm.weight" in got2
    assert "optimizer/state.tok_embeddings.weight.exp_avg" in got2
    # with --keys: names relative to it, the exclusion by the full path
    out3 = tmp_path / "o3.safetensors"
    r = ckpt("export", "-q", "--keys", "optimizer", "--exclude",
             "optimizer/state.mix.exp_avg_sq", TITAN, out3)
    assert r.returncode == 0, r.stderr
    got3 = st.load_file(out3)
    want3 = {k: v for k, v in opt.items() if isinstance(v, torch.Tensor)}
    assert set(got3) == set(want3) - {"state.mix.exp_avg_sq"}
    for k, t in got3.items():
        assert tbytes(t) == tbytes(want3[k]), k


def test_exclude_everything_fails_and_leaves_nothing(tmp_path):
    for fmt in ("safetensors", "torch"):
        out = tmp_path / f"none.{fmt}"
        r = ckpt("export", "--format", fmt, "--exclude", "optimizer", "--exclude", "dataloader",
                 "--exclude", "lr_scheduler", "--exclude", "train_state", "--exclude", "layers",
                 "--exclude", "mix", "--exclude", "tok_embeddings", "--exclude", "norm",
                 "--exclude", "output", TITAN, out)
        assert r.returncode == 1, r.stdout + r.stderr
        assert b"after --exclude" in r.stderr, r.stderr
    assert not list(tmp_path.iterdir())
    assert ckpt("export", "--exclude", "", TITAN, tmp_path / "x").returncode == 2


# ------------------------------------------------------------------ sharded export


def hf_split(sizes: list[tuple[str, int]], limit: int) -> dict[str, str]:
    """huggingface_hub's rule (serialization/_base.py), restated: walk the tensors in order; one
    larger than the limit becomes a shard of its own at once; otherwise, when it would take the
    shard being filled past the limit, that shard is closed first; the last open shard closes
    at the end.  Shards are numbered in the order they close; one shard is model.safetensors."""
    shards: list[list[str]] = []
    cur: list[str] = []
    cur_size = 0
    for name, n in sizes:
        if n > limit:
            shards.append([name])
            continue
        if cur_size + n > limit:
            shards.append(cur)
            cur, cur_size = [], 0
        cur.append(name)
        cur_size += n
    if cur:
        shards.append(cur)
    if len(shards) == 1:
        return {name: "model.safetensors" for name in shards[0]}
    total = len(shards)
    return {name: f"model-{i + 1:05d}-of-{total:05d}.safetensors"
            for i, names in enumerate(shards) for name in names}


def check_sharded(outdir: Path, want: dict, limit: int, itemsize_of=None) -> dict:
    """The exported directory against torch's tensors `want` (name -> tensor, in order)."""
    index = json.loads((outdir / "model.safetensors.index.json").read_text())
    wm = index["weight_map"]
    assert list(index) == ["metadata", "weight_map"]
    assert sorted(wm) == sorted(want) and len(wm) == len(want)  # every tensor, once
    nbytes = {k: t.numel() * (itemsize_of(t) if itemsize_of else t.element_size())
              for k, t in want.items()}
    assert index["metadata"] == {"total_size": sum(nbytes.values())}
    assert wm == hf_split(list(nbytes.items()), limit)
    files = sorted(set(wm.values()))
    assert sorted(p.name for p in outdir.iterdir()) == sorted(files +
                                                              ["model.safetensors.index.json"])
    seen = {}
    for f in files:
        got = st.load_file(outdir / f)
        assert sorted(got) == sorted(k for k, v in wm.items() if v == f)
        size = sum(nbytes[k] for k in got)
        assert size <= limit or len(got) == 1, (f, size)
        seen.update(got)
    assert set(seen) == set(want)
    return seen


def test_sharded_export_splits_as_huggingface_hub(titan, tmp_path):
    want = model_of(titan)
    out = tmp_path / "hf"
    limit = 150  # tok_embeddings and output (168 bytes) each get a shard of their own
    r = ckpt("export", *EXCLUDE, "--max-shard-size", limit, TITAN, out)
    assert r.returncode == 0, r.stderr
    assert b"shards" in r.stdout
    got = check_sharded(out, want, limit)
    for k, t in want.items():
        assert got[k].dtype == t.dtype and got[k].shape == t.shape and \
            tbytes(got[k]) == tbytes(t), k
    wm = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    assert len(set(wm.values())) > 3
    assert wm["tok_embeddings.weight"] != wm["mix"]  # the big one alone, placed at once
    tiny_model().load_state_dict(got, strict=True)
    # ckpt reads the exported directory (HuggingFace storage) as the same tensors
    ls = ckpt("ls", out)
    assert ls.returncode == 0, ls.stderr
    assert sorted(ls.stdout.decode().split()) == sorted(want)
    for k, t in want.items():
        c = ckpt("cat", out, k)
        assert c.returncode == 0 and c.stdout == tbytes(t), k
    # huggingface_hub's own split, where it is installed
    try:
        from huggingface_hub import split_torch_state_dict_into_shards
    except ImportError:
        return
    split = split_torch_state_dict_into_shards(want, max_shard_size=limit)
    assert split.tensor_to_filename == wm
    assert split.metadata == {"total_size": sum(t.nbytes for t in want.values())}


def test_sharded_export_units_casts_and_reexport(titan, tmp_path):
    want = model_of(titan)
    out = tmp_path / "hf"
    # huggingface_hub's units: "0.15KB" is 150 bytes (int(0.15 * 10**3))
    assert ckpt("export", "-q", *EXCLUDE, "--max-shard-size", "0.15KB", TITAN, out).returncode == 0
    first = json.loads((out / "model.safetensors.index.json").read_text())["weight_map"]
    assert first == hf_split([(k, t.nbytes) for k, t in want.items()], 150)
    # sizes are the written ones: bf16 halves them
    outb = tmp_path / "hfb"
    r = ckpt("export", "-q", *EXCLUDE, "--dtype", "bf16", "--max-shard-size", "75", TITAN, outb)
    assert r.returncode == 0, r.stderr
    got = check_sharded(outb, want, 75, itemsize_of=lambda t: 2)
    for k, t in want.items():
        assert tbytes(got[k]) == tbytes(t.to(torch.bfloat16)), k
    # into the same directory again, all in one shard: model.safetensors alone, no index, the
    # first export's shards gone (a stray file of the user's stays)
    (out / "README.md").write_text("mine")
    r = ckpt("export", "-q", *EXCLUDE, "--max-shard-size", "1GiB", TITAN, out)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "model.safetensors"]
    one = st.load_file(out / "model.safetensors")
    assert set(one) == set(want) and all(tbytes(one[k]) == tbytes(t) for k, t in want.items())
    # and back to shards: model.safetensors goes
    assert ckpt("export", "-q", *EXCLUDE, "--max-shard-size", "150", TITAN, out).returncode == 0
    assert "model.safetensors" not in {p.name for p in out.iterdir()}
    assert "README.md" in {p.name for p in out.iterdir()}


def test_sharded_export_refusals(tmp_path):
    for bad in ("0", "5XB", "-1", "GB", "1e30TB", ""):
        r = ckpt("export", "--max-shard-size", bad, TITAN, tmp_path / "o")
        assert r.returncode == 2, (bad, r.stderr)
    assert ckpt("export", "--max-shard-size", "1MB", TITAN, "-").returncode == 2
    assert ckpt("export", "--max-shard-size", "1MB", "--format", "torch", TITAN,
                tmp_path / "o").returncode == 2
    f = tmp_path / "file"
    f.write_text("x")
    r = ckpt("export", "--max-shard-size", "1MB", TITAN, f)
    assert r.returncode == 1 and b"not a directory" in r.stderr
    assert not (tmp_path / "o").exists()
