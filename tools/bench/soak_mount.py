#!/usr/bin/env python3
"""soak_mount.py — the mount under load while steps come and go (issue #22's soak).

  python3 tools/bench/soak_mount.py [--build build] [--seconds 600] [--threads 16]
                                    [--work /tmp/ckptfs-soak] [--json OUT.json]

A run directory holds stable steps (copies of the torch-written fixtures, with torch's
reference bytes beside them in tests/fixtures/data) and volatile ones.  One ckptfs mounts it
(default options).  --threads reader threads read random windows (pread) of random files of
every view of the stable steps: tensor files, .npy/ (data after the header), .layout/
dim0-of-3 and dim1-of-2 (torch.chunk slices of the reference), .safetensors/@all (each
tensor at the offsets its header gives), .raw/ (the shard files' own bytes), value files —
and compare every byte with what it must be.  Meanwhile a mutator adds a volatile step every
second (half of them copied .metadata first, the way rsync may order it), and removes the
oldest volatile step, so the top level is rescanned, steps are indexed and dropped, and
`latest` moves underneath the readers; readers also list the top level and read `latest`.

Prints (and with --json writes) reads, bytes, wrong bytes (must be 0), errors by errno and
view, and the daemon's RSS over time.  Exit status 1 if any byte was wrong or the daemon
died.  Nothing here is timed against a goal: it is a soak, not a speed benchmark.
"""
from __future__ import annotations

import argparse
import collections
import errno
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "data"
ITEM = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int8": 1, "int16": 2,
        "int32": 4, "int64": 8, "uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8, "bool": 1,
        "complex64": 8, "complex128": 16}
STABLE = ["fsdp2_ws1", "fsdp2_ws2", "fsdp2_ws3", "fsdp2_ws4", "tp_shard1", "hsdp", "zstd",
          "plain_replicated", "rank_local"]


def escape_elem(el: str) -> str:
    if el == "":
        return "%"
    if el in (".", ".."):
        return "%2E" * len(el)
    return "".join(f"%{ord(c):02X}" if c in "%/" or ord(c) < 0x20 or ord(c) == 0x7F else c
                   for c in el)


def reference(fx: Path) -> dict[str, tuple[str, tuple[int, ...], bytes]]:
    """tree path -> (dtype, shape, bytes), from the fixture's torch reference."""
    blob = (fx / "reference.bin").read_bytes()
    meta = json.loads((fx / "reference.json").read_text())
    elems = {e["key"]: e.get("path") for e in meta.get("entries", [])}
    out = {}
    for line in (fx / "reference.tsv").read_text().splitlines():
        f = line.split("\t")
        if f[0] != "T" or f[2] not in ITEM:
            continue
        el = elems.get(f[1])
        path = "/".join(escape_elem(str(x)) for x in el) if el else escape_elem(f[1])
        shape = tuple(int(x) for x in f[3].split(",")) if f[3] else ()
        out[path] = (f[2], shape, blob[int(f[4]):int(f[4]) + int(f[5])])
    return out


def chunk_slice(raw: bytes, dtype: str, shape, dim: int, n: int, r: int) -> bytes:
    """torch.chunk's piece r of n along dim (the whole tensor when dim >= ndim), C order."""
    if dim >= len(shape):
        return raw
    import numpy as np
    a = np.frombuffer(raw, dtype=np.uint8).reshape(*shape, ITEM[dtype])
    size = shape[dim]
    c = -(-size // n) if size else 0
    lo, hi = min(r * c, size), min((r + 1) * c, size)
    return np.ascontiguousarray(np.take(a, range(lo, hi), axis=dim)).tobytes()


class Expect:
    """Every file of a stable step the readers check: mount-relative path -> expected bytes
    (npy: data only, at the header's end; safetensors: filled per tensor from the header)."""

    def __init__(self, step: str, fx: Path, src: Path):
        self.fixture = fx.name
        self.files: list[tuple[str, str, bytes | None]] = []  # (view, rel path, bytes)
        ref = reference(fx)
        for p, (dt, shape, raw) in ref.items():
            self.files.append(("tensor", f"{step}/{p}", raw))
            self.files.append(("npy", f"{step}/.npy/{p}.npy", raw))
            for dim, n in ((0, 3), (1, 2)):
                for r in range(n):
                    self.files.append(("layout", f"{step}/.layout/dim{dim}-of-{n}/{r}/{p}",
                                       chunk_slice(raw, dt, shape, dim, n, r)))
        for f in sorted(src.iterdir()):
            if f.is_file():
                self.files.append(("raw", f"{step}/.raw/{f.name}", f.read_bytes()))
        self.files.append(("safetensors", f"{step}/.safetensors/@all.safetensors", None))
        self.tensors = ref


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.reads = 0
        self.bytes = 0
        self.wrong = 0
        self.wrong_where: list[str] = []
        self.errors = collections.Counter()
        self.listings = 0

    def add(self, n: int):
        with self.lock:
            self.reads += 1
            self.bytes += n

    def err(self, view: str, e: OSError):
        with self.lock:
            self.errors[f"{view}:{errno.errorcode.get(e.errno, e.errno)}"] += 1

    def bad(self, where: str):
        with self.lock:
            self.wrong += 1
            if len(self.wrong_where) < 20:
                self.wrong_where.append(where)


def check_window(stats: Stats, mnt: Path, view: str, rel: str, want: bytes, rng: random.Random):
    path = mnt / rel
    fd = os.open(path, os.O_RDONLY)
    try:
        base = 0
        if view.endswith("npy"):
            head = os.pread(fd, 10, 0)
            hlen = struct.unpack("<H", head[8:10])[0] if head[6] == 1 else \
                struct.unpack("<I", os.pread(fd, 12, 0)[8:12])[0]
            base = (10 if head[6] == 1 else 12) + hlen
        if not want:
            got = os.pread(fd, 16, base)
            stats.add(len(got))
            if got:
                stats.bad(f"{rel}: {len(got)} bytes past an empty tensor")
            return
        off = rng.randrange(len(want))
        n = rng.randrange(1, len(want) - off + 1)
        got = os.pread(fd, n, base + off)
        stats.add(len(got))
        if got != want[off:off + n]:
            stats.bad(f"{rel} [{off}, {off + n}): {len(got)} bytes, differ")
    finally:
        os.close(fd)


def check_safetensors(stats: Stats, mnt: Path, rel: str, tensors, rng: random.Random):
    fd = os.open(mnt / rel, os.O_RDONLY)
    try:
        hlen = struct.unpack("<Q", os.pread(fd, 8, 0))[0]
        header = json.loads(os.pread(fd, hlen, 8))
        names = [k for k in header if k != "__metadata__"]
        k = rng.choice(names)
        lo, hi = header[k]["data_offsets"]
        got = os.pread(fd, hi - lo, 8 + hlen + lo)
        stats.add(len(got) + hlen + 8)
        want = tensors.get(k)
        if want is not None and got != want[2]:
            stats.bad(f"{rel}: tensor {k} differs")
    finally:
        os.close(fd)


def reader(stop: threading.Event, stats: Stats, mnt: Path, expects: list[Expect], seed: int):
    rng = random.Random(seed)
    by_name = {ex.fixture: ex for ex in expects}
    while not stop.is_set():
        ex = rng.choice(expects)
        view, rel, want = rng.choice(ex.files)
        if rng.random() < 0.2:  # a volatile step (may be half-copied or gone: errors allowed)
            try:
                vols = [n for n in os.listdir(mnt) if n.startswith("vol-")]
            except OSError as e:
                stats.err("toplevel", e)
                continue
            if not vols:
                continue
            name = rng.choice(vols)
            ex = by_name.get(STABLE[int(name[4:]) % len(STABLE)])
            if not ex:
                continue
            view, rel, want = rng.choice([f for f in ex.files if f[0] != "raw"])
            rel = name + rel[rel.index("/"):]
            view = "volatile-" + view
        try:
            if rng.random() < 0.02:  # the top level moves underneath: list it, follow latest
                os.listdir(mnt)
                os.readlink(mnt / "latest")
                with stats.lock:
                    stats.listings += 1
            if view.endswith("safetensors"):
                check_safetensors(stats, mnt, rel, ex.tensors, rng)
            else:
                check_window(stats, mnt, view, rel, want, rng)
        except OSError as e:
            stats.err(view, e)


def mutator(stop: threading.Event, run: Path, stats: Stats, log: list[str]):
    """Adds a volatile step every second (half metadata-first), drops the oldest beyond 4."""
    donors = [FIXTURES / n / "ckpt" for n in STABLE]  # vol-(100000+i) is STABLE[that % len]
    live: list[Path] = []
    i = 0
    while not stop.wait(1.0):
        i += 1
        src = donors[(100000 + i) % len(donors)]
        dst = run / f"vol-{100000 + i}"
        if i % 2:  # whole, through a hidden name: appears complete
            tmp = run / f".vol-{i}.tmp"
            shutil.copytree(src, tmp)
            os.rename(tmp, dst)
        else:  # .metadata first, the shards a moment later
            dst.mkdir()
            meta = [f for f in src.iterdir() if f.name.endswith(".metadata")]
            for f in meta:
                shutil.copy(f, dst)
            time.sleep(0.3)
            for f in src.iterdir():
                if f not in meta:
                    shutil.copy(f, dst)
        live.append(dst)
        if len(live) > 4:
            shutil.rmtree(live.pop(0))
    log.append(f"mutator: {i} steps added, {i - len(live)} removed")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return -1


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--work", default="/tmp/ckptfs-soak")
    ap.add_argument("--json", default=None)
    ap.add_argument("--opt", action="append", default=[])
    a = ap.parse_args()
    daemon = Path(a.build).resolve() / "tools" / "ckptfs" / "ckptfs"
    work = Path(a.work)
    shutil.rmtree(work, ignore_errors=True)
    run = work / "run"
    run.mkdir(parents=True)
    expects = []
    for n in STABLE:
        if (FIXTURES / n / "ckpt").is_dir():
            shutil.copytree(FIXTURES / n / "ckpt", run / f"step-{n}")
            expects.append(Expect(f"step-{n}", FIXTURES / n, run / f"step-{n}"))
    mnt = Path(tempfile.mkdtemp(prefix="ckptfs-soak-"))
    args = [str(daemon), "-f", str(run), str(mnt)]
    for o in a.opt:
        args += ["-o", o]
    errlog = open(work / "daemon.log", "w")
    proc = subprocess.Popen(args, stderr=errlog)
    t0 = time.time()
    while not os.path.ismount(mnt):
        if proc.poll() is not None or time.time() > t0 + 30:
            print("mount failed; see", work / "daemon.log")
            return 1
        time.sleep(0.05)
    stats, stop, log = Stats(), threading.Event(), []
    threads = [threading.Thread(target=reader, args=(stop, stats, mnt, expects, s))
               for s in range(a.threads)]
    threads.append(threading.Thread(target=mutator, args=(stop, run, stats, log)))
    for t in threads:
        t.start()
    rss = []
    start = time.time()
    try:
        while time.time() - start < a.seconds and proc.poll() is None:
            time.sleep(min(10.0, a.seconds / 20))
            rss.append((round(time.time() - start), rss_kib(proc.pid)))
    finally:
        stop.set()
        for t in threads:
            t.join()
    alive = proc.poll() is None
    if alive:
        subprocess.run(["fusermount3", "-u", str(mnt)], check=False)
        proc.wait(timeout=60)
    os.rmdir(mnt)
    took = time.time() - start
    res = {"seconds": round(took, 1), "threads": a.threads, "reads": stats.reads,
           "bytes": stats.bytes, "wrong": stats.wrong, "wrong_where": stats.wrong_where,
           "errors": dict(stats.errors), "listings": stats.listings,
           "daemon_alive_to_end": alive, "daemon_exit": proc.returncode,
           "rss_kib_over_time": rss, "steps_stable": len(expects), "notes": log}
    print(json.dumps(res, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))
    return 0 if stats.wrong == 0 and alive and proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
