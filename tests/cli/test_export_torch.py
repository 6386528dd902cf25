"""test_export_torch.py — `ckpt export --format torch` against torch: every fixture exported
whole is read by torch.load(weights_only=True), with mmap=True and without, into the same
nested state_dict that torch's own dcp_to_torch_save writes (dict key order, list positions,
dtypes, shapes, bit patterns, value types), or — where torch cannot read its own checkpoint
(HuggingFace storage, rank-local metadata, Megatron's flattened keys) — into torch's reference
tensors by path; torch's own offset arithmetic (calculate_storage_offsets, debug-checked)
agrees with the layout; the archive passes zipfile's CRC test; `--keys` gives the value at a
path (a dict, a list, one tensor); a state_dict written by torch with every dtype, empty and
0-d tensors, lists of tensors and every kind of plain value round-trips, the values
weights_only refuses left out with a warning; `-` writes the same bytes to stdout; `.pt` and
`.pth` choose the format; failures leave no file."""

from __future__ import annotations

import math
import os
import subprocess
import zipfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

BIN = os.environ.get("CKPT_BIN")
FIXTURES = Path(os.environ.get("CKPT_FIXTURES") or os.environ.get("CKPT_FIXTURES_DEFAULT")
                or Path(__file__).resolve().parents[1] / "fixtures" / "data")
if not BIN:
    pytest.skip("CKPT_BIN is not set", allow_module_level=True)
NAMES = sorted(p.name for p in FIXTURES.iterdir() if (p / "reference.tsv").is_file())
TORCH_DT = {n: getattr(torch, n) for n in (
    "float64", "float32", "float16", "bfloat16", "int8", "int16", "int32", "int64", "uint8",
    "uint16", "uint32", "uint64", "bool", "complex64", "complex128", "float8_e4m3fn",
    "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e8m0fnu") if hasattr(torch, n)}


def export(*args):
    return subprocess.run([BIN, "export", *map(str, args)], capture_output=True, timeout=300)


def skipped_paths(stderr: bytes) -> set[str]:
    """Tree paths the export warned it left out ("warning: PATH: why, not exported")."""
    out = set()
    for line in stderr.decode().splitlines():
        if line.startswith("ckpt: warning: ") and line.endswith(", not exported"):
            out.add(line[len("ckpt: warning: "):].split(": ", 1)[0])
    return out


def tbytes(t) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""


def diff(want, got, path="", skipped=frozenset()):
    """Differences between two loaded state_dicts, strictly: the same container types (a
    tuple for a tuple), dict keys in the same order, tensors of the same dtype, shape and
    bytes, floats with the same bits."""
    if path.lstrip("/") in skipped:
        return []
    if isinstance(want, torch.Tensor) or isinstance(got, torch.Tensor):
        if not (isinstance(want, torch.Tensor) and isinstance(got, torch.Tensor)):
            return [f"{path}: {type(want).__name__} vs {type(got).__name__}"]
        if want.dtype != got.dtype or want.shape != got.shape:
            return [f"{path}: {want.dtype}{tuple(want.shape)} vs {got.dtype}{tuple(got.shape)}"]
        return [] if tbytes(want) == tbytes(got) else [f"{path}: bytes differ"]
    if type(want) is not type(got):
        return [f"{path}: {type(want).__name__} vs {type(got).__name__}"]
    if isinstance(want, dict):
        wk = [k for k in want if f"{path}/{k}".lstrip("/") not in skipped]
        if wk != list(got):
            return [f"{path}: keys {wk} vs {list(got)}"]
        return [d for k in wk for d in diff(want[k], got[k], f"{path}/{k}", skipped)]
    if isinstance(want, (list, tuple)):
        if len(want) != len(got):
            return [f"{path}: {len(want)} items vs {len(got)}"]
        return [d for i, (a, b) in enumerate(zip(want, got))
                for d in diff(a, b, f"{path}/{i}", skipped)]
    if isinstance(want, float):
        same = (math.isnan(want) and math.isnan(got)) or \
            (want == got and math.copysign(1, want) == math.copysign(1, got))
        return [] if same else [f"{path}: {want!r} vs {got!r}"]
    if isinstance(want, (set, frozenset)):
        return [] if want == got else [f"{path}: {want!r} vs {got!r}"]
    return [] if want == got else [f"{path}: {want!r} vs {got!r}"]


def torch_reading(ckpt: Path, tmp: Path):
    """torch's own conversion of a DCP checkpoint (dcp_to_torch_save), or None where torch
    cannot read the checkpoint itself (no global .metadata: with rank-local metadata it reads
    rank 0's only and leaves the other ranks' pieces uninitialised)."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    if not (Path(ckpt) / ".metadata").is_file():
        return None
    out = tmp / "torch_own.pt"
    try:
        dcp_to_torch_save(ckpt, out)
    except (Exception, BaseException) as e:  # noqa: BLE001 - CheckpointException is one
        if isinstance(e, KeyboardInterrupt):
            raise
        return None  # HF storage, rank-local metadata, Megatron's classes, ...
    return torch.load(out, weights_only=False)


def reference_tensors(fixture: Path):
    """tree path -> tensor, from the fixture's reference.bin (torch's reading at generation)."""
    blob = (fixture / "reference.bin").read_bytes()
    out = {}
    for line in (fixture / "reference.tsv").read_text().splitlines():
        f = line.split("\t")
        if f[0] != "T":
            continue
        shape = [int(x) for x in f[3].split(",")] if f[3] else []
        n = int(f[5])
        raw = torch.frombuffer(bytearray(blob[int(f[4]):int(f[4]) + n]) or bytearray(1),
                               dtype=torch.uint8)[:n]
        out[f[6]] = raw.view(TORCH_DT[f[2]]).reshape(shape) if n else \
            torch.empty(shape, dtype=TORCH_DT[f[2]])
    return out


def leaves(obj, path=""):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from leaves(v, f"{path}/{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from leaves(v, f"{path}/{i}")
    else:
        yield path.lstrip("/"), obj


def load_checked(pt: Path, monkeypatch):
    """torch.load(weights_only=True) of pt, with mmap (torch computing every record's offset
    itself and debug-checking it against the zip's) and without; both must agree."""
    from torch.utils.serialization import config
    monkeypatch.setenv("TORCH_SERIALIZATION_DEBUG", "1")
    before = config.load.calculate_storage_offsets
    config.load.calculate_storage_offsets = True
    try:
        mapped = torch.load(pt, weights_only=True, mmap=True)
    finally:
        config.load.calculate_storage_offsets = before
    plain = torch.load(pt, weights_only=True)
    assert not diff(plain, mapped)
    return mapped


@pytest.mark.parametrize("name", NAMES)
def test_export_whole_checkpoint(name, tmp_path, monkeypatch):
    fx = FIXTURES / name
    out = tmp_path / "all.pt"
    r = export("-q", "--format", "torch", fx / "ckpt", out)
    assert r.returncode == 0, r.stderr
    assert zipfile.ZipFile(out).testzip() is None  # real CRC-32s in a file export
    got = load_checked(out, monkeypatch)
    warned = skipped_paths(export("--format", "torch", fx / "ckpt", tmp_path / "w.pt").stderr)
    assert isinstance(got, dict)
    want = torch_reading(fx / "ckpt", tmp_path)
    if want is not None:
        d = diff(want, got, skipped=warned)
        assert not d, d[:10]
        # nothing is left out of a checkpoint torch wrote with plain values (those holding
        # tensors included: noflatten_per_item's cfg)
        assert not warned, warned
        return
    # torch cannot read it: every reference tensor is there, by path, bit for bit
    ref = reference_tensors(fx)
    flat = dict(leaves(got))
    for p, t in ref.items():
        if p in warned:
            continue
        assert p in flat, p
        assert not diff(t, flat[p], p), p
    assert not warned


def test_keys_give_the_value_at_a_path(tmp_path, monkeypatch):
    fx = FIXTURES / "fsdp2_ws4"
    want = torch_reading(fx / "ckpt", tmp_path)
    for keys, sub in (("model", want["model"]), ("optim", want["optim"]),
                      ("optim/param_groups", want["optim"]["param_groups"]),
                      ("optim/param_groups/0", want["optim"]["param_groups"][0]),
                      ("model/output.weight", want["model"]["output.weight"]),
                      ("optim/state/mix/", want["optim"]["state"]["mix"])):
        out = tmp_path / "k.pt"
        r = export("-q", "--format", "torch", "--keys", keys, fx / "ckpt", out)
        assert r.returncode == 0, r.stderr
        got = load_checked(out, monkeypatch)
        d = diff(sub, got)
        assert not d, (keys, d[:5])
    # the model's state_dict loads into a module of those shapes, strictly
    out = tmp_path / "model.pt"
    assert export("-q", "--keys", "model", fx / "ckpt", out).returncode == 0
    sd = torch.load(out, weights_only=True, mmap=True)
    module = torch.nn.Module()
    for k, t in sd.items():
        parent = module
        *pre, last = k.split(".")
        for el in pre:
            if not hasattr(parent, el):
                parent.add_module(el, torch.nn.Module())
            parent = getattr(parent, el)
        parent.register_parameter(last, torch.nn.Parameter(torch.zeros_like(t)))
    assert not module.load_state_dict(sd, strict=True).missing_keys
    for k, t in module.state_dict().items():
        assert tbytes(t) == tbytes(want["model"][k]), k


def tricky_state_dict():
    g = torch.Generator().manual_seed(23)
    tensors = {n: (torch.randn(5, 3, generator=g) * 100).to(dt) if dt.is_floating_point or
               dt.is_complex else torch.randint(0, 100, (5, 3), generator=g).to(dt)
               for n, dt in TORCH_DT.items()}
    return {
        "model": {"w": torch.randn(4, 6, generator=g), "empty": torch.zeros(0, 3),
                  "scalar": torch.tensor(2.5, dtype=torch.float64), "dtypes": tensors,
                  "col": torch.randn(6, 4, generator=g).t().contiguous(),
                  "list": [torch.ones(2), torch.zeros(3, dtype=torch.int16)],
                  "nested": {"deeper": {"t": torch.arange(7, dtype=torch.int64)}}},
        "values": {"none": None, "t": True, "f": False, "int": -7, "big": 2 ** 100,
                   "float": -0.0, "nan": float("nan"), "inf": float("-inf"),
                   "str": "ünïcode ✓", "bytes": b"\x00\xff raw", "tuple": (1, (2.5, "x")),
                   "list": [1, [2, None], {"k": "v"}], "set": {3, 1, 2},
                   "dict": {1: "one", (2, 3): [4], "s": {"n": 1}},
                   "empty_bytes": b"", "frozen": frozenset({1, 2})},
        "step": 12,
    }


def test_a_state_dict_torch_wrote_round_trips(tmp_path, monkeypatch):
    import torch.distributed.checkpoint as dcp
    ckpt = tmp_path / "ckpt"
    dcp.save(tricky_state_dict(), checkpoint_id=str(ckpt), no_dist=True)
    out = tmp_path / "t.pt"
    r = export("--format", "torch", ckpt, out)
    assert r.returncode == 0, r.stderr
    warned = skipped_paths(r.stderr)
    # empty bytes pickle as builtins.bytes() and a frozenset as builtins.frozenset: both
    # refused by weights_only, so left out and named
    assert warned == {"values/empty_bytes", "values/frozen"}, r.stderr
    got = load_checked(out, monkeypatch)
    want = torch_reading(ckpt, tmp_path)
    d = diff(want, got, skipped=warned)
    assert not d, d[:10]
    assert r.stdout.startswith(b"exported %d tensors" % (7 + len(TORCH_DT))), r.stdout


def test_stdout_and_format_by_suffix(tmp_path):
    ckpt = FIXTURES / "fsdp2_ws2" / "ckpt"
    a = tmp_path / "a.pt"
    assert export("-q", "--format", "torch", ckpt, a).returncode == 0
    r = subprocess.run([BIN, "export", "--format", "torch", str(ckpt), "-"], capture_output=True)
    assert r.returncode == 0 and r.stdout == a.read_bytes()
    assert b"exported" in r.stderr
    for name in ("b.pt", "c.pth"):
        assert export("-q", ckpt, tmp_path / name).returncode == 0
        assert (tmp_path / name).read_bytes() == a.read_bytes()
    # the same layout every time: same bytes
    assert export("-q", "--format", "torch", ckpt, tmp_path / "d.pt").returncode == 0
    assert (tmp_path / "d.pt").read_bytes() == a.read_bytes()
    # and a .safetensors name keeps the default format
    assert export("-q", ckpt, tmp_path / "e.safetensors").returncode == 0
    assert (tmp_path / "e.safetensors").read_bytes()[8:9] == b"{"


def test_full_disk_names_the_output_file(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8k", "tmpfs", str(disk)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        r = export("--format", "torch", FIXTURES / "fsdp2_ws4" / "ckpt", disk / "all.pt")
        assert r.returncode == 1, r.stdout + r.stderr
        assert b"all.pt" in r.stderr and b"No space left on device" in r.stderr, r.stderr
        assert not list(disk.iterdir())
    finally:
        subprocess.run(["umount", str(disk)], check=True)


def test_failures_leave_nothing(tmp_path):
    ckpt = FIXTURES / "fsdp2_ws1" / "ckpt"
    r = export("--format", "torch", "--keys", "no/such", ckpt, tmp_path / "x.pt")
    assert r.returncode == 1 and b"no entries under no/such" in r.stderr, r.stderr
    r = export("--format", "torch", "--dtype", "bf16", ckpt, tmp_path / "x.pt")
    assert r.returncode == 2 and b"--dtype" in r.stderr
    r = export("--format", "onnx", ckpt, tmp_path / "x.pt")
    assert r.returncode == 2 and b"--format" in r.stderr
    assert not list(tmp_path.iterdir())


def module_of(sd):
    """A plain module whose parameters are sd's keys (dotted FQNs), in sd's order."""
    module = torch.nn.Module()
    for k, t in sd.items():
        parent = module
        *pre, last = k.split(".")
        for el in pre:
            if not hasattr(parent, el):
                parent.add_module(el, torch.nn.Module())
            parent = getattr(parent, el)
        parent.register_parameter(last, torch.nn.Parameter(t.clone()))
    return module


def test_by_id_loads_into_a_plain_optimizer(tmp_path):
    """--by-id: torch.optim's own form of the FSDP2 run's FQN-keyed AdamW state; a plain
    AdamW over the model's parameters loads it, and its next step equals the one torch takes
    after its own conversion (set_state_dict from the FQN-keyed state)."""
    from torch.distributed.checkpoint.state_dict import set_state_dict
    fx = FIXTURES / "fsdp2_ws4"
    want = torch_reading(fx / "ckpt", tmp_path)
    out = tmp_path / "optim.by-id.pt"
    r = export("-q", "--by-id", "--keys", "optim", fx / "ckpt", out)
    assert r.returncode == 0, r.stderr
    byid = torch.load(out, weights_only=True, mmap=True)
    fqns = want["optim"]["param_groups"][0]["params"]
    assert byid["param_groups"][0]["params"] == list(range(len(fqns)))
    assert list(byid["state"]) == sorted(byid["state"])
    for i, fqn in enumerate(fqns):
        if fqn in want["optim"]["state"]:
            assert not diff(want["optim"]["state"][fqn], byid["state"][i], fqn)
    ours = module_of(want["model"])
    theirs = module_of(want["model"])
    assert [n for n, _ in ours.named_parameters()] == fqns
    opt_ours = torch.optim.AdamW(ours.parameters())
    opt_ours.load_state_dict(byid)
    opt_theirs = torch.optim.AdamW(theirs.parameters())
    set_state_dict(theirs, opt_theirs, model_state_dict=want["model"],
                   optim_state_dict=want["optim"])
    a, b = opt_ours.state_dict(), opt_theirs.state_dict()
    assert a["param_groups"] == b["param_groups"]
    assert not diff({k: dict(sorted(v.items())) for k, v in b["state"].items()},
                    {k: dict(sorted(v.items())) for k, v in a["state"].items()})
    g = torch.Generator().manual_seed(5)
    for _ in range(2):
        for p, q in zip(ours.parameters(), theirs.parameters()):
            p.grad = torch.randn(p.shape, generator=g)
            q.grad = p.grad.clone()
        opt_ours.step()
        opt_theirs.step()
    for (n, p), q in zip(ours.named_parameters(), theirs.parameters()):
        assert tbytes(p.detach()) == tbytes(q.detach()), n
    # not an optimizer state_dict: refused, naming what is missing
    r = export("--by-id", "--keys", "model", fx / "ckpt", tmp_path / "m.pt")
    assert r.returncode == 1 and b"no param_groups list" in r.stderr, r.stderr
    r = export("--by-id", "--format", "safetensors", fx / "ckpt", tmp_path / "m.pt")
    assert r.returncode == 2
    assert not (tmp_path / "m.pt").exists()
