"""dtensor_ref.py — layout specs (`2x2:S0s2,S0`, docs/loader.md) and what torch's DTensor holds.

`parse_spec` reads a spec; `torch_placements` turns it into torch placements for a tensor of
`ndim` dims (a placement whose dim is not a dim of the tensor becomes Replicate(), our
documented rule where torch refuses); `expected_local` computes the local tensor of a rank
with torch's own splitting code (Shard/_StridedShard._split_tensor with_padding=False, as
distribute_tensor(..., src_data_rank=None) does) and `expected_offset` torch's
_compute_local_shape_and_global_offset — no process group needed.  gen_mesh_vectors.py checks
both against real DTensor under gloo.
"""
import re

import torch
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset
from torch.distributed.tensor.placement_types import _StridedShard

_ALIAS = re.compile(r"dim(\d+)-of-(\d+)$")


def parse_spec(spec):
    """-> (mesh sizes, [(kind, dim, split_factor)]) with kind 'R', 'S' or 'SS'."""
    m = _ALIAS.match(spec)
    if m:
        return [int(m.group(2))], [("S", int(m.group(1)), 1)]
    sizes, places = spec.split(":")
    mesh = [int(x) for x in sizes.split("x")]
    out = []
    for p in places.split(","):
        if p == "R":
            out.append(("R", 0, 1))
            continue
        m = re.fullmatch(r"S(\d+)(?:s(\d+))?", p)
        if not m:
            raise ValueError(f"bad placement {p!r} in {spec!r}")
        out.append(("SS", int(m.group(1)), int(m.group(2))) if m.group(2) else ("S", int(m.group(1)), 1))
    if len(out) != len(mesh):
        raise ValueError(f"{spec!r}: {len(out)} placements for {len(mesh)} mesh dims")
    return mesh, out


# the layouts the issue names (M != N, uneven and empty shards, several mesh dims on one
# tensor dim, _StridedShard shards of several boxes): the mount and loader tests use them all
SPECS = ["2x2:S0,S1", "2x2:S0s2,S0", "2x3:R,S0", "3x2:S1,R", "2:S0s2", "5:S0"]


def nranks(spec):
    """The number of ranks of a spec's mesh."""
    n = 1
    for m in parse_spec(spec)[0]:
        n *= m
    return n


def torch_placements(spec, ndim):
    _, places = parse_spec(spec)
    res = []
    for kind, d, k in places:
        if kind == "R" or d >= ndim:
            res.append(Replicate())
        elif kind == "S":
            res.append(Shard(d))
        else:
            res.append(_StridedShard(d, split_factor=k))
    return res


def coord_of(mesh, rank):
    c = []
    for n in reversed(mesh):
        c.append(rank % n)
        rank //= n
    return list(reversed(c))


def expected_local(full, spec, rank, ndim=None):
    """The local tensor rank `rank` holds of `full` (any tensor) under `spec`; with `ndim`,
    `full` is a tensor of that many dims with trailing dims added (the bytes of each element),
    which are never sharded."""
    mesh, _ = parse_spec(spec)
    coord = coord_of(mesh, rank)
    local = full
    for i, p in enumerate(torch_placements(spec, full.dim() if ndim is None else ndim)):
        if isinstance(p, Replicate):
            continue
        shards, _ = p._split_tensor(local, mesh[i], with_padding=False, contiguous=True)
        local = shards[coord[i]]
    return local.contiguous()


def expected_offset(shape, spec, rank):
    mesh, _ = parse_spec(spec)
    places = torch_placements(spec, len(shape))
    local_shape, offset = _compute_local_shape_and_global_offset(
        list(shape), mesh, coord_of(mesh, rank), places)
    return list(local_shape), list(offset)
