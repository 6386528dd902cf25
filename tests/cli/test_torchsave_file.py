"""test_torchsave_file.py — a single torch.save file (model.pt, pytorch_model.bin, a full
checkpoint of model + optimizer + counters) read by `ckpt` and mounted by ckptfs, with real
torch as the referee: every tensor's bytes equal torch.load's (views of shared storages,
transposed views and storage offsets included), every other value prints as its Python repr,
and a legacy (non-zip) file is refused with a message naming it.

Environment: CKPT_BIN, CKPTFS_BIN (as in test_cli.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

BIN = os.environ.get("CKPT_BIN")
FS_BIN = os.environ.get("CKPTFS_BIN")
if not BIN:
    pytest.skip("CKPT_BIN is not set (run through meson test)", allow_module_level=True)


def flatten(obj):
    """(path elements, leaf) of every leaf, by torch's own traversal (flatten_state_dict)."""
    from torch.distributed.checkpoint._traverse import traverse_state_dict
    out = []
    traverse_state_dict(obj, lambda path, v: out.append((tuple(map(str, path)), v)))
    return out


def tbytes(t: "torch.Tensor") -> bytes:
    t = t.detach().contiguous()
    if t.dtype in (torch.bfloat16, torch.float16):
        t = t.view(torch.int16)
    elif t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2, torch.bool):
        t = t.view(torch.uint8)
    return t.numpy().tobytes()


@pytest.fixture(scope="module")
def saved():
    g = torch.Generator().manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.LayerNorm(6),
                                torch.nn.Linear(6, 8))
    model[2].weight = torch.nn.Parameter(torch.randn(8, 6, generator=g))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, 8, generator=g)).square().sum().backward()
    opt.step()
    fused = torch.randn(3, 16, generator=g)
    big = torch.randn(10, 7, generator=g)
    full = {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "step": 1200,
        "loss": 0.125,
        "run": "llama-7b/α",
        "flags": {"amp": True, "seed": None},
        "views": {"q": fused[0], "k": fused[1], "t": big.t(), "cols": big[:, 2:5],
                  "tied_a": big, "tied_b": big},
        "dtypes": {"bf16": torch.randn(5, generator=g).to(torch.bfloat16),
                   "f16": torch.randn(2, 3, generator=g).half(),
                   "f8": torch.randn(6, generator=g).to(torch.float8_e4m3fn),
                   "c64": torch.randn(3, dtype=torch.complex64, generator=g),
                   "bool": torch.tensor([True, False, True]),
                   "i64": torch.arange(7), "scalar": torch.tensor(2.5)},
        "lists": [torch.ones(2), 3, [torch.zeros(1, 2), "x"]],
    }
    d = Path(tempfile.mkdtemp(prefix="ckpt-ts-"))
    d.chmod(0o755)  # mkdtemp's 0700 would rightly hide every value from other users
    torch.save(full, d / "full.pt")
    torch.save(model.state_dict(), d / "pytorch_model.bin")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.save({"w": torch.ones(2)}, d / "legacy.pt", _use_new_zipfile_serialization=False)
    yield d
    subprocess.run(["rm", "-rf", str(d)])


def ckpt(*args, **kw):
    return subprocess.run([BIN, *map(str, args)], capture_output=True, **kw)


@pytest.mark.parametrize("name", ["full.pt", "pytorch_model.bin"])
def test_every_leaf_equals_torch_load(saved, name):
    ref = torch.load(saved / name, weights_only=False)
    leaves = list(flatten(ref))
    ls = ckpt("ls", "-R", saved / name)
    assert ls.returncode == 0, ls.stderr
    tensors = objects = 0
    for elems, v in leaves:
        key = ".".join(elems)
        r = ckpt("cat", "-f", "--key", saved / name, key)
        assert r.returncode == 0, (key, r.stderr)
        if isinstance(v, torch.Tensor):
            assert r.stdout == tbytes(v), key
            tensors += 1
        else:
            assert r.stdout.decode().strip() == repr(v), key
            objects += 1
    assert tensors >= 6 and (name != "full.pt" or (tensors >= 20 and objects >= 10))
    info = ckpt("info", saved / name)
    assert info.returncode == 0 and f"entries:         {len(leaves)} " in info.stdout.decode(), \
        info.stdout.decode()
    v = ckpt("verify", saved / name)
    assert v.returncode == 0, v.stdout + v.stderr


def test_paths_keep_the_elements(saved):
    """A key with dots (a state_dict's 'weight' of module '0') is one path element."""
    r = ckpt("cat", "-f", "--path", saved / "full.pt", "model/0.weight")
    ref = torch.load(saved / "full.pt", weights_only=False)
    assert r.returncode == 0 and r.stdout == tbytes(ref["model"]["0.weight"]), r.stderr


def test_export_keeps_int_dict_keys(saved, tmp_path):
    """An optimizer state_dict's int keys (`state: {0: {...}}`) come back as ints from
    `ckpt export --format torch` of a torch.save file, as torch's own save/load gives them
    (paths stay decimal text; DCP's planner sees strs), so that a plain optimizer's
    load_state_dict finds every parameter's state (with str keys it silently finds none)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from test_export_torch import diff
    def plain(o):  # an OrderedDict (a module's state_dict) is written back as a dict
        return {k: plain(v) for k, v in o.items()} if isinstance(o, dict) else o
    ref = plain(torch.load(saved / "full.pt", weights_only=True))
    assert list(ref["optimizer"]["state"]) == list(range(len(ref["optimizer"]["state"])))
    out = tmp_path / "again.pt"
    r = ckpt("export", "-q", "--format", "torch", saved / "full.pt", out)
    assert r.returncode == 0, r.stderr
    got = torch.load(out, weights_only=True)
    d = diff(ref, got)
    assert not d, d[:5]
    assert all(type(k) is int for k in got["optimizer"]["state"])
    # the value at a path under an int key, and a plain AdamW loading the exported state
    sub = tmp_path / "optim.pt"
    assert ckpt("export", "-q", "--keys", "optimizer", saved / "full.pt", sub).returncode == 0
    osd = torch.load(sub, weights_only=True)
    assert not diff(ref["optimizer"], osd)
    model = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.LayerNorm(6),
                                torch.nn.Linear(6, 8))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    opt.load_state_dict(osd)
    state = opt.state_dict()["state"]
    assert sorted(state) == sorted(ref["optimizer"]["state"])
    for i, st in ref["optimizer"]["state"].items():
        for name, v in st.items():
            assert torch.equal(state[i][name], v), (i, name)
    # ckpt's paths for them are unchanged: decimal elements
    r = ckpt("cat", "-f", "--path", saved / "full.pt", "optimizer/state/0/exp_avg")
    assert r.returncode == 0 and r.stdout == tbytes(ref["optimizer"]["state"][0]["exp_avg"])


def test_legacy_file_is_refused_naming_it(saved):
    r = ckpt("ls", saved / "legacy.pt")
    assert r.returncode != 0 and r.returncode < 128
    assert "legacy.pt: a legacy torch.save file" in r.stderr.decode(), r.stderr


@pytest.mark.skipif(not FS_BIN, reason="ckptfs not built")
def test_mount_shows_the_file(saved):
    ref = torch.load(saved / "full.pt", weights_only=False)
    mnt = Path(tempfile.mkdtemp(prefix="ckpt-ts-mnt-"))
    proc = subprocess.Popen([FS_BIN, "-f", str(saved / "full.pt"), str(mnt)],
                            stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 30
        while not os.path.ismount(mnt):
            assert proc.poll() is None and time.time() < deadline, proc.stderr.read()
            time.sleep(0.05)
        for elems, v in flatten(ref):
            f = mnt.joinpath(*elems)
            if isinstance(v, torch.Tensor):
                assert f.read_bytes() == tbytes(v), elems
            else:
                assert f.read_text().strip() == repr(v), elems
        assert (mnt / ".raw" / "full.pt").read_bytes() == (saved / "full.pt").read_bytes()
        # the optimizer's int keys are ints again in .torch/ (as in an export)
        state = torch.load(mnt / ".torch" / "optimizer.pt", weights_only=True)["state"]
        assert list(state) == list(ref["optimizer"]["state"])
        assert all(torch.equal(state[i]["exp_avg"], st["exp_avg"])
                   for i, st in ref["optimizer"]["state"].items())
        del state
        # who may read: the file's own -rw-r--r-- in a 0755 directory
        assert os.stat(mnt / "step").st_mode & 0o777 == 0o444
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)])
        proc.wait(timeout=60)
        os.rmdir(mnt)


@pytest.fixture(scope="module")
def hf_bin(tmp_path_factory):
    """A HuggingFace-style directory of torch.save shards (what transformers' save_pretrained
    writes with safe_serialization=False): pytorch_model-0000k-of-00002.bin holding flat
    state_dicts, and pytorch_model.bin.index.json mapping each key to its file."""
    import json
    d = tmp_path_factory.mktemp("hfbin")
    d.chmod(0o755)
    g = torch.Generator().manual_seed(5)
    sd = {f"model.layers.{i}.mlp.weight": torch.randn(6, 4, generator=g) for i in range(3)}
    sd["lm_head.weight"] = torch.randn(7, 4, generator=g).to(torch.bfloat16)
    sd["model.embed.weight"] = sd["lm_head.weight"]  # tied: one storage, two keys
    keys = list(sd)
    shards = {"pytorch_model-00001-of-00002.bin": keys[:2],
              "pytorch_model-00002-of-00002.bin": keys[2:]}
    wm = {}
    for f, ks in shards.items():
        torch.save({k: sd[k] for k in ks}, d / f)
        wm.update({k: f for k in ks})
    (d / "pytorch_model.bin.index.json").write_text(
        json.dumps({"metadata": {"total_size": 0}, "weight_map": wm}))
    return d, sd


def test_hf_torch_bin_directory(hf_bin):
    d, sd = hf_bin
    info = ckpt("info", d).stdout.decode()
    assert "pytorch_model" in info and f"entries:         {len(sd)} " in info, info
    for k, v in sd.items():
        r = ckpt("cat", "-f", "--key", d, k)
        assert r.returncode == 0 and r.stdout == tbytes(v), (k, r.stderr)
    # the index names a key no shard holds: refused, naming the index and the key
    import json
    bad = d.parent / "hfbin-bad"
    subprocess.run(["cp", "-r", str(d), str(bad)], check=True)
    idx = json.loads((bad / "pytorch_model.bin.index.json").read_text())
    idx["weight_map"]["ghost.weight"] = "pytorch_model-00001-of-00002.bin"
    (bad / "pytorch_model.bin.index.json").write_text(json.dumps(idx))
    r = ckpt("ls", bad)
    assert r.returncode == 1 and b"ghost.weight" in r.stderr, r.stderr
    # a shard still missing (a copy under way): not a checkpoint yet
    (bad / "pytorch_model-00002-of-00002.bin").unlink()
    r = ckpt("ls", bad)
    assert r.returncode == 1 and b"pytorch_model-00002-of-00002.bin" in r.stderr, r.stderr


@pytest.mark.skipif(not FS_BIN, reason="ckptfs not built")
def test_mount_hf_torch_bin_steps(hf_bin, tmp_path):
    """A run directory whose steps are such directories: each step listed, `latest` the newest."""
    d, sd = hf_bin
    run = tmp_path / "run"
    run.mkdir()
    run.chmod(0o755)
    for step in ("checkpoint-100", "checkpoint-200"):
        subprocess.run(["cp", "-r", str(d), str(run / step)], check=True)
    mnt = Path(tempfile.mkdtemp(prefix="ckpt-ts-mnt-"))
    proc = subprocess.Popen([FS_BIN, "-f", str(run), str(mnt)], stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 30
        while not os.path.ismount(mnt):
            assert proc.poll() is None and time.time() < deadline, proc.stderr.read()
            time.sleep(0.05)
        assert sorted(p.name for p in mnt.iterdir()) == ["checkpoint-100", "checkpoint-200",
                                                         "latest"]
        assert os.readlink(mnt / "latest") == "checkpoint-200"
        for k, v in sd.items():
            assert (mnt / "latest" / k).read_bytes() == tbytes(v), k
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)])
        proc.wait(timeout=60)
        os.rmdir(mnt)


@pytest.mark.skipif(not FS_BIN, reason="ckptfs not built")
def test_by_id_names_do_not_collide(tmp_path):
    """A state_dict with an FQN-keyed optimizer `optim` (which gets `.torch/optim.by-id.pt`)
    and a top-level key `optim.by-id` of its own: that key's file is `optim%2Eby-id.pt`, so
    each name is one file and each loads as torch.load of the saved value says."""
    w = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    sd = {"optim": {"state": {"w": {"exp_avg": w * 2, "step": torch.tensor(3.0)}},
                    "param_groups": [{"params": ["w"], "lr": 0.5}]},
          "optim.by-id": {"x": w + 1},
          "@x.by-id": {"y": w - 1}}
    torch.save(sd, tmp_path / "sd.pt")
    mnt = Path(tempfile.mkdtemp(prefix="ckpt-byid-mnt-"))
    proc = subprocess.Popen([FS_BIN, "-f", str(tmp_path / "sd.pt"), str(mnt)],
                            stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 30
        while not os.path.ismount(mnt):
            assert proc.poll() is None and time.time() < deadline, proc.stderr.read()
            time.sleep(0.05)
        names = sorted(os.listdir(mnt / ".torch"))
        assert names == sorted(["@all.pt", "optim.pt", "optim.by-id.pt",
                                "optim%2Eby-id.pt", "%40x%2Eby-id.pt"]), names
        own = torch.load(mnt / ".torch" / "optim%2Eby-id.pt", weights_only=True)
        assert list(own) == ["x"] and torch.equal(own["x"], sd["optim.by-id"]["x"])
        at = torch.load(mnt / ".torch" / "%40x%2Eby-id.pt", weights_only=True)
        assert list(at) == ["y"] and torch.equal(at["y"], sd["@x.by-id"]["y"])
        by_id = torch.load(mnt / ".torch" / "optim.by-id.pt", weights_only=True)
        assert by_id["param_groups"][0]["params"] == [0]
        assert torch.equal(by_id["state"][0]["exp_avg"], w * 2)
        full = torch.load(mnt / ".torch" / "@all.pt", weights_only=True)
        assert set(full) == set(sd) and torch.equal(full["optim.by-id"]["x"], w + 1)
        assert (mnt / "optim.by-id" / "x").read_bytes() == tbytes(w + 1)
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)])
        proc.wait(timeout=60)
        os.rmdir(mnt)
