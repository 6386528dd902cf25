"""ckptfs.dcp.StorageReader under torch.distributed.checkpoint.load, with torch's own readers
as referee: FileSystemReader (HuggingFaceStorageReader for HuggingFace storage) loading into
the same state_dict must give the same result bit for bit; where stock torch cannot read a
fixture (safetensors-format .distcp files, torch 1.13, Megatron's flattened_range states in
their original shape) the reference torch wrote at generation time is the referee."""

import os
import shutil
import subprocess
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader, HuggingFaceStorageReader
from torch.distributed.checkpoint.default_planner import (DefaultLoadPlanner,
                                                          _EmptyStateDictLoadPlanner)

import ckptfs
from ckptfs.dcp import StorageReader
from torch.distributed.checkpoint.state_dict_loader import _load_state_dict
from common import bits, fixture_names, json_text, ref, same

warnings.filterwarnings("ignore")

NAMES = fixture_names()
HF = {"hf_consolidated", "hf_full", "hf_sharded"}
# stock torch 2.15 cannot read these (see each fixture's reference_source), or, for
# rank_local, reads only rank 0's __0.metadata in one process (the reference is the union)
REFERENCE_ONLY = {"safetensors_fmt", "torch113", "megatron_flat", "rank_local"}


def torch_reader(name):
    d = ref(name).dir
    return HuggingFaceStorageReader(str(d)) if name in HF else FileSystemReader(d)


def load(sd, reader, planner=None):
    """Loads into sd in place (as format_utils.dcp_to_torch_save does) and returns it."""
    _load_state_dict(sd, storage_reader=reader, planner=planner, no_dist=True)
    return sd


def flat_dest(ck, fill=0x5A):
    """A flat state_dict for every entry: tensors of the stored dtype and shape filled with a
    byte pattern (so an unwritten byte shows), values as None."""
    sd = {}
    for e in ck:
        if e.is_tensor:
            t = torch.empty(e.shape, dtype=e.dtype)
            if t.numel():
                t.reshape(-1).view(torch.uint8).fill_(fill)
            sd[e.key] = t
        else:
            sd[e.key] = None
    return sd


@pytest.mark.skipif(bool(os.environ.get("CKPT_FIXTURES")), reason="a regenerated set")
def test_coverage():
    """The committed fixtures include every kind the lists above name."""
    assert set(NAMES) >= HF | REFERENCE_ONLY | {"fsdp2_ws4", "zstd", "rank_local", "megatron"}


@pytest.mark.parametrize("name", NAMES)
def test_load_into_flat_state_dict(name):
    with ckptfs.open(ref(name).dir) as ck:
        ours = load(flat_dest(ck), StorageReader(ref(name).dir))
        if name in REFERENCE_ONLY:
            r = ref(name)
            for re_ in r.entries:
                if re_.is_tensor:
                    assert bits(ours[re_.key]) == bits(r.tensor(re_)), re_.key
                else:
                    assert json_text(ours[re_.key]) == re_.json, re_.key
            return
        theirs = load(flat_dest(ck), torch_reader(name))
    assert same(theirs, ours) is None, same(theirs, ours)


@pytest.mark.parametrize("name", sorted(set(NAMES) - HF - REFERENCE_ONLY))
def test_load_without_a_state_dict(name):
    """_EmptyStateDictLoadPlanner (dcp_to_torch_save's): the nested state_dict rebuilt from
    planner_data, whose list indices must stay ints."""
    ours = load({}, StorageReader(ref(name).dir), _EmptyStateDictLoadPlanner())
    theirs = load({}, torch_reader(name), _EmptyStateDictLoadPlanner())
    assert ours and same(theirs, ours) is None, same(theirs, ours)


def test_strided_and_converting_destinations():
    """Transposed (non-contiguous) destinations and float64 destinations of float32 entries:
    read through a buffer and copy_, as FileSystemReader's copy_ does."""
    name = "fsdp2_ws3"
    with ckptfs.open(ref(name).dir) as ck:
        def dest():
            sd = {}
            for e in ck:
                if e.is_tensor and e.ndim == 2:
                    sd[e.key] = torch.zeros(e.shape[::-1], dtype=e.dtype).t()
                elif e.is_tensor and e.dtype == torch.float32:
                    sd[e.key] = torch.zeros(e.shape, dtype=torch.float64)
            return sd
        ours, theirs = load(dest(), StorageReader(ref(name).dir)), load(dest(), torch_reader(name))
    assert any(not t.is_contiguous() for t in ours.values())
    assert any(t.dtype == torch.float64 for t in ours.values())
    assert same(theirs, ours) is None, same(theirs, ours)


def test_nested_model_and_optimizer_state_dict():
    """A real module + AdamW state_dict (nested, param_groups a list) loaded in place."""
    name = "fsdp2_ws2"
    d = ref(name).dir
    nested = load({}, FileSystemReader(d), _EmptyStateDictLoadPlanner())

    def zeroed(v):
        if isinstance(v, torch.Tensor):
            return torch.zeros_like(v)
        if isinstance(v, dict):
            return {k: zeroed(x) for k, x in v.items()}
        if isinstance(v, list):
            return [zeroed(x) for x in v]
        return v
    ours = zeroed(nested)
    dcp.load(ours, storage_reader=StorageReader(d), planner=DefaultLoadPlanner(), no_dist=True)
    assert same(nested, ours) is None, same(nested, ours)
    assert isinstance(ours["optim"]["param_groups"], list)


def test_checkpoint_id_reset_and_validate(tmp_path):
    d = ref("zstd").dir
    assert StorageReader.validate_checkpoint_id(d)
    assert StorageReader.validate_checkpoint_id(ref("hf_full").dir)
    assert not StorageReader.validate_checkpoint_id(tmp_path)
    assert not StorageReader.validate_checkpoint_id(tmp_path / "missing")
    with ckptfs.open(d) as ck:
        sd = flat_dest(ck)
    reader = StorageReader()
    dcp.load(sd, checkpoint_id=d, storage_reader=reader, no_dist=True)
    assert reader.checkpoint_id == os.fspath(d)
    r = ref("zstd")
    for re_ in r.entries:
        if re_.is_tensor:
            assert bits(sd[re_.key]) == bits(r.tensor(re_)), re_.key
    reader.reset(ref("rank_local").dir)
    assert reader.checkpoint_id == os.fspath(ref("rank_local").dir)


def error_text(excinfo):
    return str(excinfo.value)


def test_missing_shard_raises_naming_the_file(tmp_path):
    d = tmp_path / "c"
    shutil.copytree(ref("fsdp2_ws4").dir, d)
    (d / "__2_0.distcp").unlink()
    with ckptfs.open(d) as ck:
        sd = flat_dest(ck)
    with pytest.raises(BaseException) as ei:  # torch wraps it in CheckpointException
        dcp.load(sd, storage_reader=StorageReader(d), no_dist=True)
    assert "__2_0.distcp" in error_text(ei) and "NotFoundError" in error_text(ei)


def test_missing_key_is_torchs_error():
    sd = {"no.such.key": torch.zeros(2)}
    with pytest.raises(BaseException, match="no.such.key"):
        dcp.load(sd, storage_reader=StorageReader(ref("zstd").dir), no_dist=True)


CKPT_BIN = os.environ.get("CKPT_BIN")


@pytest.mark.skipif(not CKPT_BIN, reason="CKPT_BIN (the ckpt tool, for `ckpt seal`) not set")
def test_verify_with_the_manifest(tmp_path):
    d = tmp_path / "c"
    shutil.copytree(ref("fsdp2_ws2").dir, d)
    with ckptfs.open(d) as ck:
        sd = flat_dest(ck)
    with pytest.raises(BaseException, match="manifest"):  # not sealed yet
        dcp.load(sd, storage_reader=StorageReader(d, verify=True), no_dist=True)
    subprocess.run([CKPT_BIN, "seal", str(d)], check=True, capture_output=True)
    dcp.load(sd, storage_reader=StorageReader(d, verify=True), no_dist=True)
    with ckptfs.open(d) as ck:
        assert ck.verify() > 0
    p = d / "__1_0.distcp"
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0x01
    p.write_bytes(data)
    with pytest.raises(BaseException) as ei:
        dcp.load(sd, storage_reader=StorageReader(d, verify=True), no_dist=True)
    assert "integrity problem" in error_text(ei) and "__1_0.distcp" in error_text(ei)
    with ckptfs.open(d) as ck, pytest.raises(ckptfs.ChecksumError, match="__1_0.distcp"):
        ck.verify()


def test_readme_examples(capsys):
    """The README's "From PyTorch" snippets run as written (on a fixture)."""
    import re
    from pathlib import Path
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## From PyTorch", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"\n\n((?:    .*\n)+)", section)
    code = [("\n".join(line[4:] for line in b.splitlines())) for b in blocks]
    code = [c for c in code if not c.startswith("python3 -m pip")]
    assert len(code) == 4, code  # inspect, read, dcp.load, ckptfs.load
    d = str(ref("fsdp2_ws2").dir)
    with ckptfs.open(d) as ck:
        sd = flat_dest(ck)
    env = {"torch": torch, "state_dict": sd}
    for c in code:
        exec(c.replace("ckpt/step-100", d), env)
    assert "model/layers.0.attention.wq.weight torch.float32 (6, 6)" in capsys.readouterr().out
    assert env["wq"].shape == (6, 6) and env["rows"].shape == (4, 6)
    r = ref("fsdp2_ws2")
    for re_ in r.entries:
        if re_.is_tensor:
            assert bits(sd[re_.key]) == bits(r.tensor(re_)), re_.key


CORRUPT_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "corrupt"


@pytest.mark.skipif(not CORRUPT_DIR.is_dir(), reason="no corrupt fixtures")
def test_corrupt_checkpoints_fail_with_ckptfs_errors():
    """Every damaged checkpoint of tests/fixtures/corrupt either fails to open / index with a
    CkptError, or loads (the intact 'base' and 'overlap_*' cases), or fails under dcp.load with
    a ckptfs error (inside torch's CheckpointException) — never another exception."""
    failed = loaded = 0
    for case in sorted(p for p in CORRUPT_DIR.iterdir() if (p / "ckpt").is_dir()):
        try:
            with ckptfs.open(case / "ckpt") as ck:
                sd = {e.key: (torch.zeros(e.shape, dtype=e.dtype or torch.uint8)
                              if e.is_tensor and e.numel < (1 << 24) else None)
                      for e in ck if not e.is_tensor or e.numel < (1 << 24)}
        except ckptfs.CkptError:
            failed += 1
            continue
        try:
            load(sd, StorageReader(case / "ckpt"))
            loaded += 1
        except BaseException as ex:  # noqa: B036 (torch's CheckpointException)
            assert "ckptfs.errors." in str(ex) or isinstance(ex, ckptfs.CkptError), \
                f"{case.name}: {type(ex).__name__}: {str(ex)[-2000:]}"
            failed += 1
    print(f"corrupt: {failed} failed, {loaded} loaded")
    assert failed > 10 and loaded >= 1, (failed, loaded)


def test_torch_save_file_loads_into_a_state_dict(tmp_path):
    """A plain torch.save checkpoint (model + AdamW + counters) loads with dcp.load through the
    reader (read_metadata from the index, no unpickling) into a fresh model's state_dict, equal
    to torch.load's; ckptfs.open lists it by torch's flattening (tuples are values)."""
    g = torch.Generator().manual_seed(11)
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.LayerNorm(4))
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(3, 6, generator=g)).sum().backward()
    opt.step()
    path = tmp_path / "model.pt"
    torch.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": 42}, path)
    ref_sd = torch.load(path, weights_only=False)
    fresh = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.LayerNorm(4))
    sd = {"model": fresh.state_dict(), "step": 0}
    dcp.load(sd, storage_reader=StorageReader(str(path)))
    assert sd["step"] == 42
    for k, v in ref_sd["model"].items():
        assert bits(sd["model"][k]) == bits(v), k
    with ckptfs.open(path) as ck:
        assert ck.read_value("optim/param_groups/0/betas") == ref_sd["optim"]["param_groups"][0]["betas"]
        st = ref_sd["optim"]["state"][0]["exp_avg"]
        assert bits(ck.read_tensor("optim/state/0/exp_avg")) == bits(st)


def test_value_items_within_the_memory_budget(tmp_path):
    """Issue #22: StorageReader's value items are decoded within the Checkpoint's
    max_value_memory (1 GiB by default): a list of 400 k small ints that dcp.save wrote loads
    by default and fails at 8 MiB with ckptfs's LimitError naming the key and the budget."""
    ints = [i % 100 for i in range(400_000)]
    d = tmp_path / "c"
    dcp.save({"w": torch.arange(4.0), "ints": (ints,)}, checkpoint_id=d, no_dist=True)
    sd = {"w": torch.zeros(4), "ints": None}
    dcp.load(sd, storage_reader=StorageReader(d), no_dist=True)
    assert sd["ints"] == (ints,) and torch.equal(sd["w"], torch.arange(4.0))
    sd = {"w": torch.zeros(4), "ints": None}
    with pytest.raises(BaseException) as ei:  # torch wraps it in CheckpointException
        dcp.load(sd, storage_reader=StorageReader(d, max_value_memory=8 << 20), no_dist=True)
    text = error_text(ei)
    assert "LimitError" in text and "'ints'" in text, text
    assert f"memory budget of {8 << 20} bytes" in text, text
