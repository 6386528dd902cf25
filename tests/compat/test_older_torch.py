"""ckptfs against a real, older torch release (issue #23): run by tools/compat/older_torch.sh
with the Python of a virtual environment that holds that release from the package registry,
never by a stand-in.  Both directions:

  * that torch loads what ckptfs writes: the C saver's default output and `ckpt reshard`'s
    (5-field TensorProperties), into placeholders, every tensor and value equal; the outputs
    that need torch 2.15 (`--strides`, `ckpt reshard --torch 2.15`) fail on torch 2.4 - 2.14
    exactly as torch fails, and load on 2.15 and later;
  * ckptfs reads what that torch writes: `dcp.save` from one process and from two (gloo,
    DTensor Shard(0) and Shard(1)), and `torch.save` of a model + AdamW, read back by
    `ckpt cat` bit for bit against that torch's own tensors.

Environment: SAVE_DRIVER, CKPT_BIN (the project's build), CKPT_SOURCE_ROOT."""

import inspect
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

ROOT = Path(os.environ.get("CKPT_SOURCE_ROOT") or Path(__file__).resolve().parents[2])
sys.path.insert(0, str(ROOT / "tests" / "save"))
sys.path.insert(0, str(ROOT / "tests" / "lib"))
from gloo_group import gloo_group  # noqa: E402
from test_save import (TENSORS, VALUES, bit_equal, expected, lookup,  # noqa: E402
                       placeholder_state_dict, raw, run_driver)

CKPT = os.environ.get("CKPT_BIN", "")
DRIVER = os.environ.get("SAVE_DRIVER", "")
VERSION = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*")

pytestmark = pytest.mark.skipif(not (CKPT and DRIVER), reason="CKPT_BIN / SAVE_DRIVER not set")


def load(sd, path):
    """dcp.load without a process group, on every release (no_dist came after 2.4)."""
    kw = {"no_dist": True} if "no_dist" in inspect.signature(dcp.load).parameters else {}
    dcp.load(sd, checkpoint_id=str(path), **kw)


def save(sd, path):
    kw = {"no_dist": True} if "no_dist" in inspect.signature(dcp.save).parameters else {}
    dcp.save(sd, checkpoint_id=str(path), **kw)


def ckpt(*args):
    p = subprocess.run([CKPT, *map(str, args)], capture_output=True)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    return p.stdout


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    d = tmp_path_factory.mktemp("written")
    run_driver(d, "step-1")
    run_driver(d, "step-2", "--strides")
    ckpt("reshard", "--ranks", "3", "-q", d / "step-1", d / "re")
    ckpt("reshard", "--torch", "2.15", "-q", d / "step-1", d / "re215")
    return d


# torch.load(weights_only=True), which dcp.load uses for every tensor, accepts uint16/32/64
# from 2.6 on (ckpt_dtype_torch_min): older releases load every other entry of the same files
U16 = "model/u16"
U16_LOADS = VERSION >= (2, 6)


def check_loaded(sd):
    """test_save.check_loaded, without the uint16 tensor where this torch cannot load it."""
    for path, dtype, shape, seed in TENSORS:
        if path == U16 and not U16_LOADS:
            continue
        assert bit_equal(lookup(sd, path), expected(dtype, shape, seed)), path
    for path, want in VALUES.items():
        got = lookup(sd, path)
        assert got == want and type(got) is type(want), (path, got)


def placeholders():
    sd = placeholder_state_dict()
    if not U16_LOADS:
        del sd["model"]["u16"]
    return sd


@pytest.mark.parametrize("name", ["step-1", "re"])
def test_loads_the_default_form(written, name):
    sd = placeholders()
    load(sd, written / name)
    check_loaded(sd)


@pytest.mark.skipif(U16_LOADS, reason="this torch loads uint16")
def test_uint16_fails_as_ckpt_says(written, tmp_path):
    """Before 2.6 a uint16 tensor fails in torch's own weights-only unpickler; `ckpt reshard`
    notes the release needed, and `--torch` with this release refuses naming the key."""
    with pytest.raises(BaseException) as ei:  # torch's CheckpointException, by rank
        load(placeholder_state_dict(), written / "step-1")
    why = str(ei.value) + repr(getattr(ei.value, "failures", ""))
    assert "GLOBAL torch.uint16 was not an allowed global" in why, why[-3000:]
    ver = f"{VERSION[0]}.{VERSION[1]}"
    p = subprocess.run([CKPT, "reshard", "--torch", ver, str(written / "step-1"),
                        str(tmp_path / "o")], capture_output=True, text=True)
    assert p.returncode == 1 and "model.u16" in p.stderr and "needs torch 2.6" in p.stderr, \
        p.stderr
    assert not (tmp_path / "o").exists()
    p = subprocess.run([CKPT, "reshard", str(written / "step-1"), str(tmp_path / "n")],
                       capture_output=True, text=True)
    assert p.returncode == 0 and "torch 2.6 or later will be needed" in p.stderr, p.stderr


@pytest.mark.parametrize("name", ["step-2", "re215"])
def test_the_2_15_form(written, name):
    if VERSION >= (2, 15):
        sd = placeholders()
        load(sd, written / name)
        check_loaded(sd)
    else:
        with pytest.raises(ValueError, match="too many values to unpack"):
            dcp.FileSystemReader(str(written / name)).read_metadata()


@pytest.mark.skipif(not U16_LOADS, reason="test_uint16_fails_as_ckpt_says")
def test_reshard_for_this_torch(written, tmp_path):
    """`ckpt reshard --torch <this version>` writes what this torch loads."""
    ver = f"{VERSION[0]}.{VERSION[1]}"
    ckpt("reshard", "--torch", ver, "--ranks", "2", "-q", written / "step-1", tmp_path / "o")
    sd = placeholders()
    load(sd, tmp_path / "o")
    check_loaded(sd)


def _state():
    g = torch.Generator().manual_seed(3)
    return {
        "w": torch.randn(7, 5, generator=g),
        "b16": torch.randn(9, generator=g).to(torch.bfloat16),
        "h": torch.randn(2, 3, 4, generator=g).to(torch.float16),
        "i": torch.arange(-6, 6, dtype=torch.int64).reshape(3, 4),
        "mask": torch.arange(10) % 3 == 0,
        "f8": torch.randn(6, generator=g).to(torch.float8_e4m3fn),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3),
        "t_view": torch.arange(20.0).reshape(4, 5).t(),  # non-contiguous: saved contiguous
        "cfg": {"lr": 0.01, "betas": (0.9, 0.95), "name": "ünï", "n": 2**40, "none": None},
    }


def _check_tensor(path, key, want):
    got = ckpt("cat", path, key)
    assert got == raw(want.detach()).numpy().tobytes(), key


def test_reads_what_this_torch_saves(tmp_path):
    st = _state()
    save(st, tmp_path / "c")
    for k, v in st.items():
        if isinstance(v, torch.Tensor):
            _check_tensor(tmp_path / "c", k, v)
    cfg = json.loads(ckpt("cat", "--json", tmp_path / "c", "cfg.lr"))
    assert cfg == 0.01
    assert json.loads(ckpt("cat", "--json", tmp_path / "c", "cfg.name")) == "ünï"
    assert json.loads(ckpt("cat", "--json", tmp_path / "c", "cfg.n")) == 2**40
    ckpt("verify", tmp_path / "c")


def _dtensor_api():
    try:
        from torch.distributed.tensor import Shard, distribute_tensor
    except ImportError:  # torch 2.4: the private module
        from torch.distributed._tensor import Shard, distribute_tensor
    return Shard, distribute_tensor


def _worker(rank, store, out):
    from torch.distributed.device_mesh import init_device_mesh
    Shard, distribute_tensor = _dtensor_api()
    with gloo_group(init_method=f"file://{store}", rank=rank, world_size=2):
        mesh = init_device_mesh("cpu", (2,))
        full = _state()
        sd = {}
        for k, v in full.items():
            if isinstance(v, torch.Tensor) and v.dim() == 2 and v.shape[0] >= 2:
                sd[k] = distribute_tensor(v.contiguous(), mesh, [Shard(len(sd) % 2)])
            else:
                sd[k] = v
        dcp.save(sd, checkpoint_id=out)


def test_reads_what_this_torch_saves_from_two_ranks(tmp_path):
    import torch.multiprocessing as mp
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("no gloo")
    out = tmp_path / "c2"
    mp.spawn(_worker, args=(str(tmp_path / "store"), str(out)), nprocs=2, join=True)
    assert len(list(out.glob("*.distcp"))) == 2
    for k, v in _state().items():
        if isinstance(v, torch.Tensor):
            _check_tensor(out, k, v.contiguous())
    ckpt("verify", out)


def test_reads_this_torchs_torch_save_file(tmp_path):
    g = torch.Generator().manual_seed(11)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.LayerNorm(4))
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(3, 6, generator=g)).sum().backward()
    opt.step()
    path = tmp_path / "model.pt"
    torch.save({"model": model.state_dict(), "optim": opt.state_dict(), "step": 42}, path)
    for k, v in model.state_dict().items():
        _check_tensor(path, f"model.{k}", v)
    for pid, st in opt.state_dict()["state"].items():
        for k, v in st.items():
            _check_tensor(path, f"optim.state.{pid}.{k}", v)
    assert json.loads(ckpt("cat", "--json", path, "step")) == 42


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return (isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and
                torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8)))
    if isinstance(a, dict):
        return type(b) is dict and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and a == b


def test_loads_ckpt_export_format_torch(tmp_path):
    """`ckpt export --format torch` (the bytes of the mount's `.torch/` view) of what this torch
    saved with dcp.save: this torch's torch.load(weights_only=True, mmap=True) gives the state
    dict back; `--by-id` loads into this torch's AdamW."""
    g = torch.Generator().manual_seed(4)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.LayerNorm(4))
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(3, 6, generator=g)).sum().backward()
    opt.step()
    from torch.distributed.checkpoint.state_dict import get_state_dict
    msd, osd = get_state_dict(model, opt)
    sd = {"model": msd, "optim": osd, "extra": {"step": 7, "name": "run", "f": 0.5,
                                               "t": (1, None), "b16": torch.ones(3, dtype=torch.bfloat16),
                                               "ids": [torch.arange(3), torch.zeros(0, 2)]}}
    save(sd, tmp_path / "ckpt")
    ckpt("export", "-q", tmp_path / "ckpt", tmp_path / "all.pt")
    got = torch.load(tmp_path / "all.pt", weights_only=True, mmap=True)
    assert _same(got["model"], dict(msd)) and _same(got["extra"], sd["extra"])
    ckpt("export", "-q", "--by-id", "--keys", "optim", tmp_path / "ckpt", tmp_path / "o.pt")
    opt2 = torch.optim.AdamW(model.parameters())
    opt2.load_state_dict(torch.load(tmp_path / "o.pt", weights_only=True, mmap=True))
    a, b = opt.state_dict(), opt2.state_dict()
    assert a["param_groups"] == b["param_groups"]
    assert all(_same(dict(sorted(a["state"][i].items())), dict(sorted(b["state"][i].items())))
               for i in a["state"])


def test_version_is_what_the_venv_holds():
    want = os.environ.get("CKPT_COMPAT_TORCH")
    if want:
        assert torch.__version__.split("+")[0] == want, torch.__version__
