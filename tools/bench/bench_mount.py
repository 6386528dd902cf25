#!/usr/bin/env python3
"""bench_mount.py — the mount's benchmarks (issue 3), every number side by side in one run.

  python3 tools/bench/bench_mount.py [--build build] [--work /tmp/ckptfs-mount-bench]
                                     [--gib 2.5] [--world 4] [--runs 3] [what ...]

what: stream (default all):
  stream   every tensor file read through the mount vs the same shard bytes read directly
           (source hot in the page cache) vs the shard files read through the same mount
           under .raw/ (the in-run FUSE ceiling); 1 and 2 readers; direct_io and page-cache
           modes (page cache: first read after a fresh mount, then the re-read).  Also the
           like-for-like ceiling: the tensors' own bytes, at their offsets in the shards,
           read through .raw/ in 1 MiB preads (bench_read ranges -b, -j readers): torch's
           items start anywhere in a page, and the kernel's copy of FUSE replies is slower
           for some misalignments of source and destination.
  layout   rank r of dim0-of-3 and dim1-of-3 reading its .layout files vs preading its byte
           ranges straight from the shards (libckpt plans) vs the .raw ceiling, and vs the
           same byte ranges read through .raw/ in 1 MiB preads.
  export   cp .safetensors/@all.safetensors (default options, -o page_cache, -o direct_io)
           vs torch's dcp_to_torch_save: wall time, and peak RSS of the daemon vs of the
           torch process.
  strace   (not in the default set) strace -c -f on the daemon while one reader streams
           every tensor file with -o direct_io: are READ replies spliced?
  maxread  (not in the default set) -o direct_io, one reader, every tensor file and the .raw
           ceiling, with the daemon's default max_read (1015808) and max_read=1032192, each read
           with 1 MiB and with 992 KiB read(2) calls (a 1 MiB read over a 992 KiB max_read is
           two READs: 992 KiB + 32 KiB); all combinations interleaved, best of --runs.
  pipes    (not in the default set) the daemon's default (max_read 1 MiB when it may make
           2 MiB splice pipes, else 768 KiB) vs -o no_pipe_probe (768 KiB: a 1 MiB read(2) is
           two READs), interleaved in every round, best of --runs: direct_io (.raw ceiling,
           tensor files with 1 and 2 readers, .layout dim0/dim1-of-3 rank 1), page_cache (the
           same, first read after a fresh mount and re-read), and cp of @all.safetensors in
           both modes.  The max_read each mount got is read back from /proc/self/mountinfo.
  readahead (not in the default set) page-cache mode, one reader, every tensor file: first read
           after a fresh mount, then the re-read, with -o readahead_kb=128, 1024 (default), 4096;
           interleaved, best of --runs, beside the direct read of the shards.
  listing  (not in the default set) `ls -lR`, `getfattr -R -d` and a listxattr of every
           entry (what the ACL check of newer `ls -l` adds per file) over a checkpoint of 5·P
           entries (--params P, default 20000: ~100 k; written by make_many_entries, the C
           saver) vs the same commands on a local-filesystem tree of empty files with the same
           names (and the same user.* xattrs, for getfattr), built under --work; the mount
           first right after mounting (nothing in the kernel's caches), then again (cached);
           the local tree warm. Also the like-for-like baseline: the same local tree copied
           (with its xattrs) once into an ext4 image file under --work (mkfs.ext4, sparse),
           loop-mounted read-only afresh for each first command (unmounting drops that
           filesystem's dentries and inodes, no global drop_caches; the image file is read
           once before the rounds so its blocks are hot, like the shard files of the mount):
           first `ls -lR` vs first, again vs again, first getfattr vs first. Interleaved,
           best of --runs. --loop FLAGS (repeatable) compares daemon configurations (e.g.
           --loop '' --loop -s) in the same rounds. Needs root (mount -o loop).
  realistic (not in the default set) the README demo's GPT model + AdamW state (403 MB, 280
           entries, about half under 64 KiB; written by tools/demo/demo_gpt_save under mpirun
           into --work): every entry file read through a fresh mount, 1 and 2 readers, vs
           the shard files read through the same mount's .raw/ and directly, files/s and
           GiB/s; the small entry files alone (<= 64 KiB: files/s, first read after a fresh
           mount and the re-read), also through latest/ of the run directory; requests per
           file from the daemon's -d trace (cat of every file, every opcode, small and large
           files apart, plain and through latest/); `cp -r model/` vs `cp` of the shard
           files out of .raw/.  --daemon-b BUILD (repeatable) compares other builds' daemons in
           the same rounds.
  readers  (not in the default set) 1, 2, 8, 16 concurrent readers (--readers), threads and
           forked processes, of every entry file (1 MiB preadv, files shared by size) vs the
           shard files through .raw/ (cut into pieces so that any number of readers shares
           them), each on a fresh mount, back to back in every round; and `cp -r` of the entry
           tree vs `cp` of the shards out of .raw/ (into /dev/shm, removed after each copy).  The demo GPT model + AdamW (as realistic)
           and an FSDP2-like LLM with AdamW written by torch (make_llm_ckpt.py: vocab 32000,
           12 layers, 819 MiB), both under --work.  min / median / max of the rounds' ratios.
  passthrough (not in the default set) the shard files of readers' two checkpoints read
           directly, through .raw/ with FUSE passthrough (the kernel reads the source itself)
           and through .raw/ with -o no_passthrough, --readers threads and `cp`, back to back.
  layoutranks (not in the default set) M = 2, 4 ranks at once, each reading every file of its
           .layout/dim<d>-of-M/<r>/ (model and optimizer) vs the same ranks preading their
           byte ranges from the shard files directly (bench_read ranges), readers' two
           checkpoints, d = 0, 1.
--opt O (repeatable) adds -o O to every mount (e.g. --opt max_read=1032192).
All reads use tools/bench/bench_read (C, 1 MiB read(2) calls into a reused buffer). Best of
--runs for every cell. The checkpoint is written once by make_big_ckpt.py (real torch).
"""
from __future__ import annotations

import argparse
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


class Mount:
    def __init__(self, daemon: Path, src: Path, *opts: str, flags: tuple[str, ...] = ()):
        self.dir = Path(tempfile.mkdtemp(prefix="ckptfs-bench-"))
        args = [str(daemon), "-f", *flags, str(src), str(self.dir)]
        for o in opts:
            args += ["-o", o]
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE)
        t = time.time() + 30
        while not os.path.ismount(self.dir):
            if self.proc.poll() is not None or time.time() > t:
                raise SystemExit(f"mount failed: {self.proc.stderr.read().decode()}")
            time.sleep(0.02)

    def peak_rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def close(self):
        subprocess.run(["fusermount3", "-u", str(self.dir)], check=True)
        self.proc.wait(timeout=60)
        os.rmdir(self.dir)


def read_files(tool: Path, files: list[Path], jobs: int = 1, block: int = 1 << 20) -> float:
    out = subprocess.run([str(tool), "files", "-j", str(jobs), "-b", str(block),
                          *map(str, files)],
                         capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]) / float(out[1]) / 2**30  # GiB/s


def read_ranges(tool: Path, ckpt: Path, dim: int, n: int, rank: int, block: int = 0,
                jobs: int = 1) -> float:
    """What rank `rank` of Shard(dim) over n needs of every tensor under model/, pread from
    the shard files of `ckpt` (a checkpoint, or a mount's .raw/): into each tensor's
    destination, or (block) in reads of `block` bytes into one reused buffer per thread."""
    opt = ["-b", str(block), "-j", str(jobs)] if block else []
    out = subprocess.run([str(tool), "ranges", *opt, str(ckpt), str(dim), str(n), str(rank),
                          "model/"],
                         capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]) / float(out[1]) / 2**30


def best(runs: int, fn) -> float:
    return max(fn() for _ in range(runs))


def tensor_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / "model").iterdir())


def bench_strace(a, daemon, tool, ckpt, out):
    shards = sorted(ckpt.glob("*.distcp"))
    read_files(tool, shards)
    m = Mount(daemon, ckpt, "direct_io", *a.opt)
    log = Path(a.work) / "strace.txt"
    try:
        files = tensor_files(m.dir)
        st = subprocess.Popen(["strace", "-c", "-f", "-o", str(log), "-p", str(m.proc.pid)],
                              stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # attached to every thread
        gib = read_files(tool, files)
        st.send_signal(2)
        st.wait(timeout=30)
    finally:
        m.close()
    out.append(f"\nstrace -c -f of the daemon, -o direct_io {' '.join(a.opt)}, one reader, "
               f"every tensor file ({gib:.2f} GiB/s under strace):\n")
    out.append(log.read_text())


def bench_maxread(a, daemon, tool, ckpt, out):
    shards = sorted(ckpt.glob("*.distcp"))
    read_files(tool, shards)
    combos = [(mr, b) for mr in (None, 1032192) for b in (1 << 20, 1015808)]
    res = {c: {"mount": [], "raw": []} for c in combos}
    for _ in range(a.runs):
        for mr, b in combos:
            opts = ["direct_io"] + ([f"max_read={mr}"] if mr else [])
            m = Mount(daemon, ckpt, *opts)
            try:
                res[(mr, b)]["raw"].append(
                    read_files(tool, [m.dir / ".raw" / s.name for s in shards], 1, b))
                res[(mr, b)]["mount"].append(read_files(tool, tensor_files(m.dir), 1, b))
            finally:
                m.close()
    out.append("\n| -o direct_io, 1 reader | read(2) size | mount GiB/s | .raw ceiling GiB/s | "
               "mount / ceiling |")
    out.append("|---|---|---|---|---|")
    for mr, b in combos:
        mm, rr = max(res[(mr, b)]["mount"]), max(res[(mr, b)]["raw"])
        out.append(f"| max_read={mr or '1015808 (default)'} | {b} | {mm:.2f} | {rr:.2f} | "
                   f"{mm / rr:.2f} |")


def mount_max_read(mnt: Path) -> str:
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        f = line.split()
        if f[4] == str(mnt):
            for o in f[-1].split(","):
                if o.startswith("max_read="):
                    return o[9:]
    return "?"


def bench_pipes(a, daemon, tool, ckpt, out):
    shards = sorted(ckpt.glob("*.distcp"))
    read_files(tool, shards)
    outdir = Path(a.export_dir) if a.export_dir else Path(a.work) / "export"
    outdir.mkdir(parents=True, exist_ok=True)
    cfgs = {"no_pipe_probe": ["no_pipe_probe"], "default": []}
    res: dict[tuple[str, str], list[float]] = {}
    got: dict[str, set[str]] = {c: set() for c in cfgs}

    def add(cfg, case, v):
        res.setdefault((cfg, case), []).append(v)

    def layout(m, d):
        return tensor_files(m.dir / ".layout" / f"dim{d}-of-3" / "1")

    def mounted(cfg, mode):
        m = Mount(daemon, ckpt, mode, *cfgs[cfg], *a.opt)
        got[cfg].add(mount_max_read(m.dir))
        return m

    for _ in range(a.runs):
        for cfg in cfgs:
            m = mounted(cfg, "direct_io")
            try:
                add(cfg, "direct_io .raw ceiling, 1 reader",
                    read_files(tool, [m.dir / ".raw" / s.name for s in shards]))
                for j in (1, 2):
                    add(cfg, f"direct_io tensors, {j} reader{'s' * (j > 1)}",
                        read_files(tool, tensor_files(m.dir), j))
                for d in (0, 1):
                    add(cfg, f"direct_io layout dim{d}-of-3 rank 1", read_files(tool, layout(m, d)))
            finally:
                m.close()
            m = mounted(cfg, "page_cache")
            try:
                add(cfg, "page_cache .raw ceiling, 1 reader, first read",
                    read_files(tool, [m.dir / ".raw" / s.name for s in shards]))
                for d in (0, 1):
                    add(cfg, f"page_cache layout dim{d}-of-3 rank 1, first read",
                        read_files(tool, layout(m, d)))
            finally:
                m.close()
            for j in (1, 2):
                m = mounted(cfg, "page_cache")
                try:
                    r = f"{j} reader{'s' * (j > 1)}"
                    add(cfg, f"page_cache tensors, {r}, first read",
                        read_files(tool, tensor_files(m.dir), j))
                    add(cfg, f"page_cache tensors, {r}, re-read",
                        read_files(tool, tensor_files(m.dir), j))
                finally:
                    m.close()
            for mode in ("page_cache", "direct_io"):
                m = mounted(cfg, mode)
                try:
                    t = time.perf_counter()
                    subprocess.run(["cp", str(m.dir / ".safetensors" / "@all.safetensors"),
                                    str(outdir / "all.safetensors")], check=True)
                    # as GiB/s so that "best" is the max like the other cells
                    add(cfg, f"export cp @all.safetensors, {mode} (GiB/s of output)",
                        (outdir / "all.safetensors").stat().st_size / 2**30
                        / (time.perf_counter() - t))
                finally:
                    m.close()
                (outdir / "all.safetensors").unlink()
    names = list(cfgs)
    out.append(f"\nmax_read per configuration (from mountinfo): "
               + "; ".join(f"{c}: {', '.join(sorted(got[c]))}" for c in names))
    out.append(f"\n| case | {names[0]} GiB/s | {names[1]} GiB/s | {names[1]} / {names[0]} |")
    out.append("|---|---|---|---|")
    for case in dict.fromkeys(k for _, k in res):
        o, n = max(res[(names[0], case)]), max(res[(names[1], case)])
        out.append(f"| {case} | {o:.2f} | {n:.2f} | {n / o:.2f} |")


def bench_readahead(a, daemon, tool, ckpt, out):
    shards = sorted(ckpt.glob("*.distcp"))
    read_files(tool, shards)
    kbs = (128, 1024, 4096)
    src, res = [], {k: ([], []) for k in kbs}
    for _ in range(a.runs):
        src.append(read_files(tool, shards))
        for kb in kbs:
            m = Mount(daemon, ckpt, "page_cache", f"readahead_kb={kb}", *a.opt)
            try:
                files = tensor_files(m.dir)
                res[kb][0].append(read_files(tool, files))
                res[kb][1].append(read_files(tool, files))
            finally:
                m.close()
    d = max(src)
    out.append(f"\n| page_cache, 1 reader | first read GiB/s | re-read GiB/s | direct GiB/s | "
               f"first / direct | re-read / direct |")
    out.append("|---|---|---|---|---|---|")
    for kb in kbs:
        f, r = max(res[kb][0]), max(res[kb][1])
        out.append(f"| readahead_kb={kb} | {f:.2f} | {r:.2f} | {d:.2f} | {f / d:.2f} | {r / d:.2f} |")


def bench_stream(a, daemon, tool, ckpt, rows):
    shards = sorted(ckpt.glob("*.distcp"))
    read_files(tool, shards)  # source hot
    for mode in ("direct_io", "page_cache"):
        for jobs in (1, 2):
            res = {"src": [], "raw": [], "mount": [], "mount_re": [], "raw_re": [], "same": [],
                   "same_re": []}
            for _ in range(a.runs):
                res["src"].append(read_files(tool, shards, jobs))
                m = Mount(daemon, ckpt, mode, *a.opt)
                try:
                    raw = [m.dir / ".raw" / s.name for s in shards]
                    res["raw"].append(read_files(tool, raw, jobs))
                    if mode == "page_cache":
                        res["raw_re"].append(read_files(tool, raw, jobs))
                finally:
                    m.close()
                m = Mount(daemon, ckpt, mode, *a.opt)  # the tensors' bytes at their offsets
                try:
                    raw = m.dir / ".raw"
                    res["same"].append(read_ranges(tool, raw, 0, 1, 0, 1 << 20, jobs))
                    if mode == "page_cache":
                        res["same_re"].append(read_ranges(tool, raw, 0, 1, 0, 1 << 20, jobs))
                finally:
                    m.close()
                m = Mount(daemon, ckpt, mode, *a.opt)  # fresh: nothing of it in the page cache
                try:
                    files = tensor_files(m.dir)
                    res["mount"].append(read_files(tool, files, jobs))
                    if mode == "page_cache":
                        res["mount_re"].append(read_files(tool, files, jobs))
                finally:
                    m.close()
            b = {k: max(v) for k, v in res.items() if v}
            rows.append((f"stream, {mode}, {jobs} reader{'s' if jobs > 1 else ''}, first read",
                         b["mount"], b["raw"], b["src"], b.get("same")))
            if mode == "page_cache":
                rows.append((f"stream, {mode}, {jobs} reader{'s' if jobs > 1 else ''}, re-read",
                             b["mount_re"], b["raw_re"], b["src"], b.get("same_re")))


def bench_layout(a, daemon, tool, ckpt, rows):
    shards = sorted(ckpt.glob("*.distcp"))
    read_files(tool, shards)
    for mode in ("direct_io", "page_cache"):
        for dim in (0, 1):
            res = {"mount": [], "raw": [], "direct": [], "same": []}
            for _ in range(a.runs):
                for rank in range(3):
                    res["direct"].append(read_ranges(tool, ckpt, dim, 3, rank))
                m = Mount(daemon, ckpt, mode, *a.opt)
                try:
                    res["raw"].append(read_files(tool, [m.dir / ".raw" / s.name for s in shards]))
                finally:
                    m.close()
                m = Mount(daemon, ckpt, mode, *a.opt)  # the rank's bytes at their offsets
                try:
                    for rank in range(3):
                        res["same"].append(read_ranges(tool, m.dir / ".raw", dim, 3, rank, 1 << 20))
                finally:
                    m.close()
                m = Mount(daemon, ckpt, mode, *a.opt)
                try:
                    for rank in range(3):
                        res["mount"].append(read_files(
                            tool, tensor_files(m.dir / ".layout" / f"dim{dim}-of-3" / str(rank))))
                finally:
                    m.close()
            rows.append((f"layout dim{dim}-of-3, {mode}, one rank", max(res["mount"]),
                         max(res["raw"]), max(res["direct"]), max(res["same"])))


def bench_export(a, daemon, ckpt, out):
    # both tools write their 2.5 GiB to the same place; tmpfs keeps disk writeback (the same
    # for both, and noisy on these VMs) out of the comparison
    outdir = Path(a.export_dir) if a.export_dir else Path(a.work) / "export"
    outdir.mkdir(parents=True, exist_ok=True)
    code = ("import sys,resource,time;"
            "from torch.distributed.checkpoint.format_utils import dcp_to_torch_save;"
            "t=time.perf_counter();dcp_to_torch_save(sys.argv[1],sys.argv[2]);"
            "print(time.perf_counter()-t,"
            "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024)")
    res = {m: ([], []) for m in ("default", "page_cache", "direct_io")}
    t_torch, rss_torch, t_raw = [], [], []
    shards = sorted(ckpt.glob("*.distcp"))
    for _ in range(a.runs):
        t = time.perf_counter()  # the floor: the shard files themselves, copied to the same place
        with open(outdir / "raw.bin", "wb") as dst:
            for f in shards:
                with open(f, "rb") as src:
                    while chunk := src.read(1 << 20):
                        dst.write(chunk)
        t_raw.append(time.perf_counter() - t)
        (outdir / "raw.bin").unlink()
        for mode in res:
            m = Mount(daemon, ckpt, *(() if mode == "default" else (mode,)), *a.opt)
            try:
                t = time.perf_counter()
                subprocess.run(["cp", str(m.dir / ".safetensors" / "@all.safetensors"),
                                str(outdir / "all.safetensors")], check=True)
                res[mode][0].append(time.perf_counter() - t)
                res[mode][1].append(m.peak_rss_mib())
            finally:
                m.close()
        r = subprocess.run([sys.executable, "-c", code, str(ckpt), str(outdir / "all.pt")],
                           capture_output=True, text=True, check=True)
        tt, rr = r.stdout.split()[-2:]
        t_torch.append(float(tt))
        rss_torch.append(float(rr))
    # the exported file is right: one tensor against torch's own consolidation
    check = ("import sys,torch;from safetensors.torch import load_file;"
             "a=load_file(sys.argv[1]);b=torch.load(sys.argv[2]);k='model/layers.3.weight';"
             "print(torch.equal(a[k],b['model']['layers.3.weight']))")
    ok = subprocess.run([sys.executable, "-c", check, str(outdir / "all.safetensors"),
                         str(outdir / "all.pt")], capture_output=True, text=True).stdout.strip()
    size = (outdir / "all.safetensors").stat().st_size / 2**30
    out.append(f"\nexport of {size:.2f} GiB to {outdir} (same bytes as torch's consolidation: {ok}); "
               "times include writing the output file\n")
    out.append("| method | wall s | peak RSS MiB | torch time / this |")
    out.append("|---|---|---|---|")
    tt = min(t_torch)
    for mode, (ts, rs) in res.items():
        how = "default options" if mode == "default" else f"-o {mode}"
        out.append(f"| cp .safetensors/@all.safetensors, {how} | {min(ts):.2f} | "
                   f"{max(rs):.0f} (daemon) | {tt / min(ts):.2f}x |")
    out.append(f"| torch dcp_to_torch_save | {tt:.2f} | {max(rss_torch):.0f} | 1.00x |")
    out.append(f"| (floor) copying the .distcp files themselves to the same place | "
               f"{min(t_raw):.2f} | - | {tt / min(t_raw):.2f}x |")
    for f in outdir.iterdir():
        f.unlink()


def timed(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t


def visible_tops(root: Path) -> list[str]:
    return sorted(str(root / n) for n in os.listdir(root) if not n.startswith("."))


def copy_tree(mnt: Path, local: Path) -> int:
    """Empty files and directories with the mount's visible names, and its user.* xattrs."""
    n = 0
    for top in visible_tops(mnt):
        for dirpath, _, files in os.walk(top):
            rel = os.path.relpath(dirpath, mnt)
            (local / rel).mkdir(parents=True, exist_ok=True)
            n += 1
            for f in files:
                dst = local / rel / f
                dst.touch()
                for name in os.listxattr(os.path.join(dirpath, f)):
                    os.setxattr(dst, name, os.getxattr(os.path.join(dirpath, f), name))
                n += 1
    return n


class LoopMount:
    """An ext4 image file mounted through a loop device (mount -o loop: the device is
    detached again by the unmount)."""

    def __init__(self, image: Path, ro: bool = True):
        self.dir = Path(tempfile.mkdtemp(prefix="ckptfs-bench-ext4-"))
        try:
            subprocess.run(["mount", "-t", "ext4", "-o", "loop,ro" if ro else "loop",
                            str(image), str(self.dir)], check=True)
        except BaseException:
            os.rmdir(self.dir)
            raise

    def source(self) -> tuple[str, str]:
        """(fstype, device) from /proc/self/mountinfo."""
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            f = line.split()
            if f[4] == str(self.dir):
                sep = f.index("-")
                return f[sep + 1], f[sep + 2]
        return "?", "?"

    def close(self):
        if subprocess.run(["umount", str(self.dir)]).returncode != 0:
            subprocess.run(["umount", "-l", str(self.dir)])  # never leave it mounted
            raise SystemExit(f"umount {self.dir} failed (lazily unmounted)")
        os.rmdir(self.dir)


def xattrs_of(root: Path) -> dict[str, dict[str, bytes]]:
    res = {}
    for dirpath, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(dirpath, n)
            res[os.path.relpath(p, root)] = {k: os.getxattr(p, k, follow_symlinks=False)
                                             for k in os.listxattr(p, follow_symlinks=False)}
    return res


def make_ext4_image(local: Path, image: Path, entries: int):
    """The local tree, xattrs included, copied into a fresh ext4 image file (sparse)."""
    tmp = image.with_name(image.name + ".tmp")
    tmp.unlink(missing_ok=True)
    with open(tmp, "wb") as f:
        f.truncate(max(2 << 30, entries * (16 << 10)))  # a 4 KiB block per dir/xattr, and room
    subprocess.run(["mkfs.ext4", "-q", "-F", "-N", str(entries + entries // 8 + 1024),
                    "-E", "lazy_itable_init=0,lazy_journal_init=0", str(tmp)], check=True)
    m = LoopMount(tmp, ro=False)
    try:
        os.rmdir(m.dir / "lost+found")  # the same names as the local tree, no more
        subprocess.run(["cp", "-a", f"{local}/.", f"{m.dir}/"], check=True)
        want, got = xattrs_of(local), xattrs_of(m.dir)
        if want != got:
            raise SystemExit(f"{image}: the copy differs from {local} "
                             f"({len(got)} vs {len(want)} names, or their xattrs)")
        n = sum(k.startswith("user.ckpt.") for x in got.values() for k in x)
        if not n:
            raise SystemExit(f"{image}: no user.ckpt.* xattrs on the copy")
    finally:
        m.close()
    tmp.rename(image)


def read_data(path: Path) -> int:
    """Read the data extents of a sparse file (not its holes) into the page cache."""
    n = 0
    with open(path, "rb") as f:
        fd, end, off = f.fileno(), os.fstat(f.fileno()).st_size, 0
        while off < end:
            try:
                off = os.lseek(fd, off, os.SEEK_DATA)
            except OSError:  # ENXIO: no data after off
                break
            hole = os.lseek(fd, off, os.SEEK_HOLE)
            while off < hole:
                b = os.pread(fd, min(1 << 20, hole - off), off)
                off += len(b)
                n += len(b)
    return n


def bench_listing(a, build, out):
    ckpt = Path(a.work) / f"many-{a.params}"
    if not (ckpt / ".metadata").exists():
        ckpt.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([str(build / "tools/bench/make_many_entries"), str(ckpt), str(a.params)],
                       check=True)
    daemon = build / "tools/ckptfs/ckptfs"
    local = Path(a.work) / f"many-{a.params}-local"
    if not local.exists():
        m = Mount(daemon, ckpt, *a.opt)
        try:
            tmp = local.with_name(local.name + ".tmp")
            subprocess.run(["rm", "-rf", str(tmp)], check=True)
            copy_tree(m.dir, tmp)
            tmp.rename(local)
        finally:
            m.close()
    fstype = subprocess.run(["stat", "-f", "-c", "%T", str(local)], capture_output=True,
                            text=True).stdout.strip()
    entries = sum(len(d) + len(f) for _, d, f in os.walk(local))
    image = Path(a.work) / f"many-{a.params}-ext4.img"
    if not image.exists():
        make_ext4_image(local, image, entries)
    ls = ["ls", "-lR"]
    gf = ["getfattr", "-R", "-d"]
    # listxattr of every entry, as the ACL check of newer `ls -l` (gnulib since late 2023)
    # makes it; the walk itself is answered from the caches after an `ls -lR`
    lx = [sys.executable, "-c", "import os,sys\n"
          "for top in sys.argv[1:]:\n"
          " for d, ds, fs in os.walk(top):\n"
          "  for n in ds + fs:\n"
          "   try: os.listxattr(os.path.join(d, n), follow_symlinks=False)\n"
          "   except OSError: pass\n"]
    loops = a.loop or [""]
    res: dict[tuple[str, str], list[float]] = {}

    def add(c, k, v):
        res.setdefault((c, k), []).append(v)

    def mount(c):
        return Mount(daemon, ckpt, *a.opt, flags=tuple(shlex.split(c)))

    def lists(c):  # getfattr -d lists nothing (and fails) under -o no_listxattr
        return "no_listxattr" not in c + " " + " ".join(a.opt)

    timed(ls + [str(local)])  # warm the local tree's dentries and inodes
    hot = read_data(image)  # the image's blocks hot, like the mount's shard files
    dev = ("?", "?")
    try:
        for _ in range(a.runs):
            for c in loops:
                t = time.perf_counter()
                m = mount(c)
                add(c, "mount", time.perf_counter() - t)
                try:
                    add(c, "ls cold", timed(ls + [str(m.dir)]))
                    add(c, "ls warm", timed(ls + [str(m.dir)]))
                    add(c, "lx after ls", timed(lx + visible_tops(m.dir)))
                    if lists(c):
                        add(c, "gf after ls", timed(gf + visible_tops(m.dir)))
                finally:
                    m.close()
                if lists(c):
                    m = mount(c)
                    try:
                        add(c, "gf cold", timed(gf + visible_tops(m.dir)))
                    finally:
                        m.close()
            # ext4, mounted afresh: none of its dentries and inodes cached, its blocks hot
            t = time.perf_counter()
            e = LoopMount(image)
            add("", "ext4 mount", time.perf_counter() - t)
            try:
                dev = e.source()
                add("", "ext4 ls cold", timed(ls + [str(e.dir)]))
                add("", "ext4 ls warm", timed(ls + [str(e.dir)]))
                add("", "ext4 lx after ls", timed(lx + visible_tops(e.dir)))
                add("", "ext4 gf after ls", timed(gf + visible_tops(e.dir)))
            finally:
                e.close()
            e = LoopMount(image)
            try:
                add("", "ext4 gf cold", timed(gf + visible_tops(e.dir)))
            finally:
                e.close()
            add("", "ls local", timed(ls + [str(local)]))
            add("", "lx local", timed(lx + visible_tops(local)))
            add("", "gf local", timed(gf + visible_tops(local)))
    finally:
        left = subprocess.run(["losetup", "-j", str(image)], capture_output=True,
                              text=True).stdout.strip()
        if left:
            print(f"loop devices still attached to {image}:\n{left}", file=sys.stderr)
    b = {k: min(v) for k, v in res.items()}
    med = {k: sorted(v)[len(v) // 2] for k, v in res.items()}
    out.append(f"\nlisting: {entries} entries ({a.params} parameters), local tree on {fstype} "
               f"(warm); mount options: {' '.join(a.opt) or 'defaults'}; best of {a.runs} "
               f"(median in brackets); mounting (indexing) took "
               f"{min(b[(c, 'mount')] for c in loops):.2f} s")
    out.append(f"ext4 baseline: the local tree copied into {image} ({dev[0]}, "
               f"{image.stat().st_size / 2**30:.1f} GiB sparse file, its {hot / 2**20:.0f} MiB of "
               f"data read once so they are hot), loop-mounted ro from that file ({dev[1]}), "
               f"mounted afresh before each first command (mount took "
               f"{b[('', 'ext4 mount')]:.2f} s); loop devices left: {left or 'none'}\n")
    out.append("| command | daemon flags | mount s | local s | mount / local | "
               "mount / local `ls -lR` | fresh ext4 s | mount / fresh ext4 |")
    out.append("|---|---|---|---|---|---|---|---|")
    for name, mk, lk, ek in (
            ("ls -lR, first after mounting", "ls cold", "ls local", "ext4 ls cold"),
            ("ls -lR, again", "ls warm", "ls local", "ext4 ls warm"),
            ("listxattr of every entry, after ls -lR", "lx after ls", "lx local",
             "ext4 lx after ls"),
            ("getfattr -R -d, first after mounting", "gf cold", "gf local", "ext4 gf cold"),
            ("getfattr -R -d, after ls -lR", "gf after ls", "gf local", "ext4 gf after ls")):
        for c in loops:
            if (c, mk) not in b:
                out.append(f"| {name} | {c or 'default'} | – (no listxattr) | | | | | |")
                continue
            v, lv, ll, ev = b[(c, mk)], b[("", lk)], b[("", "ls local")], b[("", ek)]
            out.append(f"| {name} | {c or 'default'} | {v:.2f} ({med[(c, mk)]:.2f}) | "
                       f"{lv:.2f} ({med[('', lk)]:.2f}) | {v / lv:.2f} | {v / ll:.2f} | "
                       f"{ev:.2f} ({med[('', ek)]:.2f}) | {v / ev:.2f} |")

def entry_files(root: Path) -> list[Path]:
    out = []
    for top in sorted(p for p in root.iterdir() if not p.name.startswith(".")):
        out += sorted(p for p in top.rglob("*") if p.is_file()) if top.is_dir() else [top]
    return out


SMALL = 64 << 10


def request_counts(daemon: Path, src: Path, opts: list[str],
                   sub: str = "") -> tuple[dict[str, int], dict[str, dict[str, float]]]:
    """Requests per entry file, by opcode, when `cat` reads every entry file once (after a
    stat of each, so LOOKUP is not counted), from the daemon's -d trace: small (<= SMALL
    bytes) and large files apart, and the small ones read again.  `sub`: the files are read
    under this directory of the mount (latest/ of a run directory)."""
    import re
    log = tempfile.TemporaryFile()
    mnt = Path(tempfile.mkdtemp(prefix="ckptfs-bench-"))
    args = [str(daemon), "-d", str(src), str(mnt)]
    for o in opts:
        args += ["-o", o]
    proc = subprocess.Popen(args, stderr=log, stdout=subprocess.DEVNULL)
    counts, out = {}, {}
    try:
        t = time.time() + 30
        while not os.path.ismount(mnt):
            if proc.poll() is not None or time.time() > t:
                raise SystemExit("mount failed")
            time.sleep(0.02)
        files = entry_files(mnt / sub)
        small = [f for f in files if f.stat().st_size <= SMALL]
        groups = {"small": small, "small again": small,
                  "large": [f for f in files if f.stat().st_size > SMALL]}
        counts = {k: len(v) for k, v in groups.items()}
        for name, group in groups.items():
            time.sleep(0.3)
            at = log.seek(0, 2)
            for f in group:
                subprocess.run(["cat", str(f)], stdout=subprocess.DEVNULL, check=True)
            time.sleep(0.3)
            log.seek(at)
            ops: dict[str, float] = {}
            for op in re.findall(r"opcode: (\w+)", log.read().decode(errors="replace")):
                ops[op] = ops.get(op, 0) + 1 / len(group)
            out[name] = ops
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], check=True)
        proc.wait(timeout=60)
        os.rmdir(mnt)
    return counts, out


def read_small(tool: Path, daemon: Path, src: Path, opts: list[str], sub: str,
               jobs: int) -> tuple[float, float]:
    """files/s reading every small entry file (under `sub` of a fresh mount of `src`, after a
    stat of each): the first read, then the re-read."""
    m = Mount(daemon, src, *opts)
    try:
        files = [f for f in entry_files(m.dir / sub) if f.stat().st_size <= SMALL]
        nbytes = sum(f.stat().st_size for f in files)
        # bench_read's own time (open, read, close of every file), not its start-up
        return tuple(len(files) / (nbytes / (read_files(tool, files, jobs) * 2**30))
                     for _ in range(2))
    finally:
        m.close()


def copy_time(src: list[Path], dst: Path) -> float:
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    t = time.perf_counter()
    subprocess.run(["cp", "-r", *map(str, src), str(dst)], check=True)
    dt = time.perf_counter() - t
    shutil.rmtree(dst)
    return dt


def bench_realistic(a, build, tool, out):
    work = Path(a.work)
    run = work / "demo"
    ckpt = run / "step-1000"
    if not (ckpt / ".metadata").exists():
        run.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4",
                        str(build / "tools/demo/demo_gpt_save"), str(run), "step-1000"],
                       check=True, stdout=subprocess.DEVNULL)
    daemons = {"this build": build / "tools/ckptfs/ckptfs"}
    for i, b in enumerate(a.daemon_b):
        daemons["B" if len(a.daemon_b) == 1 else f"B{i + 1}"] = \
            Path(b).resolve() / "tools/ckptfs/ckptfs"
    shards = sorted(ckpt.glob("*.distcp"))
    read_files(tool, shards)  # source hot
    nbytes = sum(s.stat().st_size for s in shards)
    out.append(f"\nrealistic checkpoint: {ckpt} ({nbytes / 2**20:.0f} MiB in {len(shards)} "
               f"shard files), best of {a.runs}")
    out.append("requests per entry file, `cat` of each (after a stat of each), from the -d "
               "trace:\n\n| daemon | mode | files | n | requests per file |\n|---|---|---|---|---|")
    for name, daemon in daemons.items():
        for opts, src, sub in (([], ckpt, ""), (["direct_io"], ckpt, ""), ([], run, "latest")):
            n, res = request_counts(daemon, src, [*opts, *a.opt], sub)
            for group, ops in res.items():
                total = sum(ops.values())
                out.append(f"| {name} | {' '.join(opts) or 'default'}{' latest/' if sub else ''} "
                           f"| {group} | {n[group]} | {total:.2f}: " +
                           ", ".join(f"{k} {v:.2f}" for k, v in sorted(ops.items())) + " |")
    out.append("\nsmall entry files (<= 64 KiB) alone, files/s, fresh mount: first read / "
               "re-read\n\n| daemon | readers | plain | plain re-read | latest/ | "
               "latest/ re-read |\n|---|---|---|---|---|---|")
    for name, daemon in daemons.items():
        for jobs in (1, 2):
            r = [[read_small(tool, daemon, src, a.opt, sub, jobs)
                  for src, sub in ((ckpt, ""), (run, "latest"))] for _ in range(a.runs)]
            cells = [max(x[i][j] for x in r) for i in (0, 1) for j in (0, 1)]
            out.append(f"| {name} | {jobs} | " + " | ".join(f"{c:.0f}" for c in cells) + " |")
    out.append("")
    out.append("| daemon | readers | entry files GiB/s | files/s | .raw GiB/s | direct GiB/s | "
               "entries / .raw | cp -r model/ GiB/s | cp .raw shards GiB/s | cp model / cp shards |")
    out.append("|---|---|---|---|---|---|---|---|---|---|")
    for name, daemon in daemons.items():
        for jobs in (1, 2):
            res = {"files": [], "raw": [], "src": [], "cp_model": [], "cp_raw": []}
            nfiles = mbytes = 0
            for _ in range(a.runs):
                res["src"].append(read_files(tool, shards, jobs))
                m = Mount(daemon, ckpt, *a.opt)
                try:
                    res["raw"].append(read_files(tool, [m.dir / ".raw" / s.name for s in shards],
                                                 jobs))
                finally:
                    m.close()
                m = Mount(daemon, ckpt, *a.opt)  # fresh: nothing of it cached
                try:
                    files = entry_files(m.dir)
                    nfiles = len(files)
                    mbytes = sum(f.stat().st_size for f in files)
                    t = time.perf_counter()
                    gib = read_files(tool, files, jobs)
                    res["files"].append((gib, nfiles / (time.perf_counter() - t)))
                finally:
                    m.close()
                if jobs == 1:
                    m = Mount(daemon, ckpt, *a.opt)
                    try:
                        res["cp_model"].append(copy_time([m.dir / "model"], work / "cp-out"))
                        res["cp_raw"].append(copy_time([m.dir / ".raw" / s.name for s in shards],
                                                       work / "cp-out"))
                        model_bytes = sum(f.stat().st_size
                                          for f in (m.dir / "model").rglob("*") if f.is_file())
                    finally:
                        m.close()
            fg, fps = max(res["files"])
            raw, src = max(res["raw"]), max(res["src"])
            cp = "- | - | -"
            if res["cp_model"]:
                cm = model_bytes / min(res["cp_model"]) / 2**30
                cr = nbytes / min(res["cp_raw"]) / 2**30
                cp = f"{cm:.2f} | {cr:.2f} | {cm / cr:.2f}"
            out.append(f"| {name} | {jobs} | {fg:.2f} | {fps:.0f} | {raw:.2f} | {src:.2f} | "
                       f"{fg / raw:.2f} | {cp} |")
    out.append(f"({nfiles} entry files, {mbytes / 2**20:.0f} MiB; cp: bytes copied per second, "
               "`cp -r` of the model/ directory vs `cp` of the shard files out of .raw/)")


# ------------------------------------------------------------------ many readers (issue 25)

def split_jobs(items: list[tuple[str, int, int]], n: int) -> list[list[tuple[str, int, int]]]:
    """Byte ranges (path, offset, length) shared among n readers, largest first onto the
    least loaded, so every reader has about the same bytes."""
    parts: list[list] = [[] for _ in range(n)]
    load = [0] * n
    for it in sorted(items, key=lambda x: -x[2]):
        i = load.index(min(load))
        parts[i].append(it)
        load[i] += it[2]
    return parts


def read_jobs(jobs: list[tuple[str, int, int]], block: int = 1 << 20) -> int:
    """Reads every range with 1 MiB preadv into one reused page-aligned buffer; bytes read."""
    import mmap
    buf = mmap.mmap(-1, block)
    total = 0
    for path, off, length in jobs:
        fd = os.open(path, os.O_RDONLY)
        try:
            end = off + length
            while off < end:
                n = os.preadv(fd, [buf] if end - off >= block else [memoryview(buf)[:end - off]],
                              off)
                if n <= 0:
                    break
                off += n
                total += n
        finally:
            os.close(fd)
    return total


def many_readers(jobs: list[tuple[str, int, int]], n: int, procs: bool) -> float:
    """GiB/s of n readers (threads of this process, or forked processes) sharing `jobs`, from
    a common start (every reader ready first) to the last one's end."""
    import threading
    parts = split_jobs(jobs, n)
    if not procs:
        done = [0] * n
        go = threading.Barrier(n + 1)

        def run(i):
            go.wait()
            done[i] = read_jobs(parts[i])
        ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
        for t in ts:
            t.start()
        go.wait()
        t0 = time.perf_counter()
        for t in ts:
            t.join()
        return sum(done) / (time.perf_counter() - t0) / 2**30
    r, w = os.pipe()
    ready_r, ready_w = os.pipe()
    pids = []
    for i in range(n):
        pid = os.fork()
        if pid == 0:
            os.close(w)
            os.write(ready_w, b"x")
            os.read(r, 1)
            try:
                got = read_jobs(parts[i])
            except BaseException:
                os._exit(2)
            os._exit(0 if got == sum(x[2] for x in parts[i]) else 3)
        pids.append(pid)
    for _ in range(n):
        os.read(ready_r, 1)
    t0 = time.perf_counter()
    os.write(w, b"x" * n)
    bad = 0
    for pid in pids:
        bad += os.waitpid(pid, 0)[1] != 0
    dt = time.perf_counter() - t0
    for fd in (r, w, ready_r, ready_w):
        os.close(fd)
    if bad:
        raise SystemExit(f"{bad} reader process(es) failed")
    return sum(x[2] for x in jobs) / dt / 2**30


def raw_jobs(shards: list[Path], n: int) -> list[tuple[str, int, int]]:
    """The shard files cut into n·4 pieces of about the same size (1 MiB multiples), so that
    any number of readers can share them as they share the entry files."""
    out = []
    for s in shards:
        size = s.stat().st_size
        step = max(1 << 20, (size // max(1, n)) >> 20 << 20)
        out += [(str(s), o, min(step, size - o)) for o in range(0, size, step)]
    return out


def make_llm(work: Path) -> Path:
    ckpt = work / "llm"
    if not (ckpt / ".metadata").exists():
        subprocess.run([sys.executable, str(HERE / "make_llm_ckpt.py"), str(ckpt)], check=True)
    return ckpt


def make_demo(build: Path, work: Path) -> Path:
    run = work / "demo"
    ckpt = run / "step-1000"
    if not (ckpt / ".metadata").exists():
        run.mkdir(parents=True, exist_ok=True)
        subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4",
                        str(build / "tools/demo/demo_gpt_save"), str(run), "step-1000"],
                       check=True, stdout=subprocess.DEVNULL)
    return ckpt


def bench_readers(a, build, out):
    """1, 2, 8, 16 readers (threads, processes) of every entry file vs the shard files through
    .raw/ (the same mount kind, each measurement on a fresh mount so that no small file is
    read from an earlier pass's page cache), and `cp -r` of the entry tree vs `cp` of the
    shards out of .raw/; the demo model and a torch-written LLM (make_llm_ckpt.py).  In every
    round each cell's entries and .raw measurements run back to back; min / median / max of
    the rounds' ratios and the best of each rate."""
    import statistics
    daemon = build / "tools/ckptfs/ckptfs"
    work = Path(a.work)
    ckpts = {"demo GPT + AdamW": make_demo(build, work), "LLM FSDP2 + AdamW": make_llm(work)}
    counts = [int(x) for x in a.readers.split(",")]
    res: dict = {}
    cps: dict = {}
    # copies go to memory (tmpfs) when there is one: the reads are measured, not a disk's writes
    cp_out = (Path("/dev/shm") if os.path.isdir("/dev/shm") else work) / f"ckptfs-cp-{os.getpid()}"
    for rnd in range(a.runs):
        for name, ckpt in ckpts.items():
            shards = sorted(ckpt.glob("*.distcp"))
            read_files(build / "tools/bench/bench_read", shards)  # source hot
            for n in counts:
                for procs in (False, True):
                    key = (name, n, "processes" if procs else "threads")
                    m = Mount(daemon, ckpt, *a.opt)
                    try:
                        files = entry_files(m.dir)
                        ej = [(str(f), 0, f.stat().st_size) for f in files]
                        e = many_readers(ej, n, procs)
                    finally:
                        m.close()
                    m = Mount(daemon, ckpt, *a.opt)
                    try:
                        r = many_readers(raw_jobs([m.dir / ".raw" / s.name for s in shards], n),
                                         n, procs)
                    finally:
                        m.close()
                    res.setdefault(key, []).append((e, r, len(files)))
            m = Mount(daemon, ckpt, *a.opt)
            try:
                tops = [Path(t) for t in visible_tops(m.dir)]
                nb = sum(f.stat().st_size for f in entry_files(m.dir))
                ct = copy_time(tops, cp_out)
                cr = copy_time([m.dir / ".raw" / s.name for s in shards], cp_out)
                sb = sum(s.stat().st_size for s in shards)
                cps.setdefault(name, []).append((nb / ct / 2**30, sb / cr / 2**30))
            finally:
                m.close()
    out.append(f"\nmany readers: {a.runs} rounds, 1 MiB preadv per reader into its own buffer, "
               f"mount options: {' '.join(a.opt) or 'default'}\n")
    out.append("| checkpoint | readers | kind | entry files GiB/s (best) | .raw GiB/s (best) | "
               "entries / .raw: min, median, max |\n|---|---|---|---|---|---|")
    for (name, n, kind), v in res.items():
        ratios = sorted(e / r for e, r, _ in v)
        out.append(f"| {name} | {n} | {kind} | {max(e for e, _, _ in v):.2f} | "
                   f"{max(r for _, r, _ in v):.2f} | {ratios[0]:.2f}, "
                   f"{statistics.median(ratios):.2f}, {ratios[-1]:.2f} |")
    out.append("\n| checkpoint | `cp -r` of the entry tree GiB/s (best) | `cp` of the .raw shards "
               "GiB/s (best) | ratio: min, median, max |\n|---|---|---|---|")
    for name, v in cps.items():
        ratios = sorted(x / y for x, y in v)
        out.append(f"| {name} | {max(x for x, _ in v):.2f} | {max(y for _, y in v):.2f} | "
                   f"{ratios[0]:.2f}, {statistics.median(ratios):.2f}, {ratios[-1]:.2f} |")
    for name, ckpt in ckpts.items():
        shards = sorted(ckpt.glob("*.distcp"))
        out.append(f"({name}: {ckpt}, {sum(s.stat().st_size for s in shards) / 2**20:.0f} MiB "
                   f"in {len(shards)} shard files, "
                   f"{next(iter(v for k, v in res.items() if k[0] == name))[0][2]} entry files)")


def bench_passthrough(a, build, out):
    """The shard files read directly (no FUSE), through .raw/ with FUSE passthrough (the
    default where the kernel offers it) and through .raw/ with -o no_passthrough (the daemon
    splices every READ), 1, 2 and 8 readers (threads; 1 MiB preadv, the files cut into pieces
    as in readers), each on a fresh mount, back to back in every round; and `cp` of the shards
    out of each.  The demo model and the torch-written LLM of readers."""
    import statistics
    daemon = build / "tools/ckptfs/ckptfs"
    work = Path(a.work)
    ckpts = {"demo GPT + AdamW": make_demo(build, work), "LLM FSDP2 + AdamW": make_llm(work)}
    counts = [int(x) for x in a.readers.split(",")]
    cp_out = (Path("/dev/shm") if os.path.isdir("/dev/shm") else work) / f"ckptfs-cp-{os.getpid()}"
    ways = (("direct", None), ("passthrough", ()), ("daemon", ("no_passthrough",)))
    res: dict = {}
    for rnd in range(a.runs):
        for name, ckpt in ckpts.items():
            shards = sorted(ckpt.glob("*.distcp"))
            read_files(build / "tools/bench/bench_read", shards)  # source hot
            for n in counts + ["cp"]:
                row = []
                for way, opts in ways:
                    m = Mount(daemon, ckpt, *a.opt, *opts) if opts is not None else None
                    try:
                        files = [m.dir / ".raw" / s.name for s in shards] if m else shards
                        if n == "cp":
                            row.append(sum(f.stat().st_size for f in files) /
                                       copy_time(files, cp_out) / 2**30)
                        else:
                            row.append(many_readers(raw_jobs(files, n), n, False))
                    finally:
                        if m:
                            m.close()
                res.setdefault((name, n), []).append(row)
    out.append(f"\n.raw/ with and without FUSE passthrough: {a.runs} rounds, hot page cache, "
               f"mount options: {' '.join(a.opt) or 'default'}\n")
    out.append("| checkpoint | readers | direct GiB/s (best) | .raw passthrough GiB/s (best) | "
               ".raw through the daemon GiB/s (best) | passthrough / direct: min, median, max | "
               "daemon / direct: min, median, max |\n|---|---|---|---|---|---|---|")
    for (name, n), v in res.items():
        def span(i):
            r = sorted(x[i] / x[0] for x in v)
            return f"{r[0]:.2f}, {statistics.median(r):.2f}, {r[-1]:.2f}"
        label = "`cp` to /dev/shm" if n == "cp" else f"{n} threads"
        out.append(f"| {name} | {label} | {max(x[0] for x in v):.2f} | "
                   f"{max(x[1] for x in v):.2f} | {max(x[2] for x in v):.2f} | {span(1)} | "
                   f"{span(2)} |")


def concurrent(cmds: list[list[str]]) -> tuple[int, float]:
    """Runs every command at once (one process per rank, each printing "bytes seconds" as
    bench_read does); the bytes of all and the wall time from the first start to the last
    end (process start-up included, the same for every method)."""
    t = time.perf_counter()
    ps = [subprocess.Popen(c, stdout=subprocess.PIPE, text=True) for c in cmds]
    outs = [p.communicate()[0] for p in ps]
    dt = time.perf_counter() - t
    if any(p.returncode for p in ps):
        raise SystemExit(f"a rank failed: {cmds[0][:3]}")
    return sum(int(o.split()[0]) for o in outs), dt


def bench_layout_ranks(a, build, out):
    """M ranks at once, each reading every file of its .layout/dim<d>-of-M/<r>/ directory
    (the whole state: model and optimizer) through a fresh mount, against the same M ranks
    preading their byte ranges straight from the shard files (bench_read ranges: libckpt's
    plan of each tensor's box, no FUSE), back to back in every round; the demo model and the
    torch-written LLM of readers (saved at 4 ranks), M = 2 and 4, d = 0 and 1."""
    import statistics
    daemon, tool = build / "tools/ckptfs/ckptfs", build / "tools/bench/bench_read"
    work = Path(a.work)
    ckpts = {"demo GPT + AdamW": make_demo(build, work), "LLM FSDP2 + AdamW": make_llm(work)}
    res: dict = {}
    for rnd in range(a.runs):
        for name, ckpt in ckpts.items():
            read_files(tool, sorted(ckpt.glob("*.distcp")))  # source hot
            for m_ranks in (2, 4):
                for dim in (0, 1):
                    nd, td = concurrent([[str(tool), "ranges", str(ckpt), str(dim), str(m_ranks),
                                          str(r), ""] for r in range(m_ranks)])
                    m = Mount(daemon, ckpt, *a.opt)
                    try:
                        spec = m.dir / ".layout" / f"dim{dim}-of-{m_ranks}"
                        lists = [sorted(str(f) for f in (spec / str(r)).rglob("*") if f.is_file())
                                 for r in range(m_ranks)]
                        nm, tm = concurrent([[str(tool), "files", *fs] for fs in lists])
                    finally:
                        m.close()
                    res.setdefault((name, m_ranks, dim), []).append((nd / td, nm / tm, nd, nm))
    out.append(f"\n.layout/ ranks at once: {a.runs} rounds, hot page cache, mount options: "
               f"{' '.join(a.opt) or 'default'}\n")
    out.append("| checkpoint | ranks | layout | byte ranges, direct GiB/s (best) | "
               ".layout files GiB/s (best) | mount / direct: min, median, max | bytes per job "
               "(direct, mount) |\n|---|---|---|---|---|---|---|")
    for (name, m_ranks, dim), v in res.items():
        r = sorted(x[1] / x[0] for x in v)
        out.append(f"| {name} | {m_ranks} | dim{dim}-of-{m_ranks} | "
                   f"{max(x[0] for x in v) / 2**30:.2f} | {max(x[1] for x in v) / 2**30:.2f} | "
                   f"{r[0]:.2f}, {statistics.median(r):.2f}, {r[-1]:.2f} | "
                   f"{v[0][2] / 2**20:.0f}, {v[0][3] / 2**20:.0f} MiB |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", nargs="*", default=["stream", "layout", "export"])
    ap.add_argument("--build", default="build")
    ap.add_argument("--work", default="/tmp/ckptfs-mount-bench")
    ap.add_argument("--gib", type=float, default=2.5)
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--params", type=int, default=20000, help="listing: parameters (5 entries each)")
    ap.add_argument("--export-dir", default="/dev/shm/ckptfs-export" if os.path.isdir("/dev/shm")
                    else None, help="where both exports write (default: tmpfs)")
    ap.add_argument("--opt", action="append", default=[], help="extra -o option for every mount")
    ap.add_argument("--daemon-b", action="append", default=[],
                    help="realistic: another build directory whose daemon runs in the same "
                    "rounds (repeatable: B1, B2, ...)")
    ap.add_argument("--readers", default="1,2,8,16",
                    help="readers: the reader counts (comma-separated)")
    ap.add_argument("--loop", action="append", default=[],
                    help="listing: daemon flags of one configuration, e.g. '-s' or "
                    "'-o max_idle_threads=1' (repeatable: interleaved in every round)")
    a = ap.parse_args()
    build = Path(a.build).resolve()
    daemon, tool = build / "tools/ckptfs/ckptfs", build / "tools/bench/bench_read"
    ckpt = Path(a.work) / f"ckpt-{a.gib}g-{a.world}"
    big = set(a.what) - {"listing", "realistic", "readers", "passthrough", "layoutranks"}
    if big and not (ckpt / ".metadata").exists():
        subprocess.run([sys.executable, str(HERE / "make_big_ckpt.py"), str(ckpt), str(a.gib),
                        str(a.world)], check=True)
    rows, extra = [], []
    if "stream" in a.what:
        bench_stream(a, daemon, tool, ckpt, rows)
    if "layout" in a.what:
        bench_layout(a, daemon, tool, ckpt, rows)
    if "export" in a.what:
        bench_export(a, daemon, ckpt, extra)
    if "readahead" in a.what:
        bench_readahead(a, daemon, tool, ckpt, extra)
    if "pipes" in a.what:
        bench_pipes(a, daemon, tool, ckpt, extra)
    if "maxread" in a.what:
        bench_maxread(a, daemon, tool, ckpt, extra)
    if "strace" in a.what:
        bench_strace(a, daemon, tool, ckpt, extra)
    if "listing" in a.what:
        bench_listing(a, build, extra)
    if "realistic" in a.what:
        bench_realistic(a, build, tool, extra)
    if "readers" in a.what:
        bench_readers(a, build, extra)
    if "passthrough" in a.what:
        bench_passthrough(a, build, extra)
    if "layoutranks" in a.what:
        bench_layout_ranks(a, build, extra)
    if big:
        print(f"\ncheckpoint: {ckpt} ({sum(f.stat().st_size for f in ckpt.iterdir()) / 2**30:.2f} "
              f"GiB, {a.world} ranks); best of {a.runs}; extra mount options: "
              f"{' '.join(a.opt) or 'none'}\n")
    if rows:
        print("| case | mount GiB/s | .raw ceiling GiB/s | direct (no FUSE) GiB/s | "
              "mount / ceiling | mount / direct | .raw, same offsets GiB/s | "
              "mount / same offsets |")
        print("|---|---|---|---|---|---|---|---|")
        for name, m, c, d, same in rows:
            sc = f"{same:.2f} | {m / same:.2f}" if same else "- | -"
            print(f"| {name} | {m:.2f} | {c:.2f} | {d:.2f} | {m / c:.2f} | {m / d:.2f} | {sc} |")
    for line in extra:
        print(line)


if __name__ == "__main__":
    main()
