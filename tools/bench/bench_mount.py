#!/usr/bin/env python3
"""bench_mount.py — the mount's benchmarks (issue 3), every number side by side in one run.

  python3 tools/bench/bench_mount.py [--build build] [--work /tmp/ckptfs-mount-bench]
                                     [--gib 2.5] [--world 4] [--runs 3] [what ...]

what: stream (default all):
  stream   every tensor file read through the mount vs the same shard bytes read directly
           (source hot in the page cache) vs the shard files read through the same mount
           under .raw/ (the in-run FUSE ceiling); 1 and 2 readers; direct_io and page-cache
           modes (page cache: first read after a fresh mount, then the re-read).
  layout   rank r of dim0-of-3 and dim1-of-3 reading its .layout files vs preading its byte
           ranges straight from the shards (libckpt plans) vs the .raw ceiling.
  export   cp .safetensors/@all.safetensors vs torch's dcp_to_torch_save: wall time, and
           peak RSS of the daemon vs of the torch process.
All reads use tools/bench/bench_read (C, 1 MiB read(2) calls into a reused buffer). Best of
--runs for every cell. The checkpoint is written once by make_big_ckpt.py (real torch).
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


class Mount:
    def __init__(self, daemon: Path, src: Path, *opts: str):
        self.dir = Path(tempfile.mkdtemp(prefix="ckptfs-bench-"))
        args = [str(daemon), "-f", str(src), str(self.dir)]
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


def read_files(tool: Path, files: list[Path], jobs: int = 1) -> float:
    out = subprocess.run([str(tool), "files", "-j", str(jobs), *map(str, files)],
                         capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]) / float(out[1]) / 2**30  # GiB/s


def read_ranges(tool: Path, ckpt: Path, dim: int, n: int, rank: int) -> float:
    out = subprocess.run([str(tool), "ranges", str(ckpt), str(dim), str(n), str(rank), "model/"],
                         capture_output=True, text=True, check=True).stdout.split()
    return int(out[0]) / float(out[1]) / 2**30


def best(runs: int, fn) -> float:
    return max(fn() for _ in range(runs))


def tensor_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / "model").iterdir())


def bench_stream(a, daemon, tool, ckpt, rows):
    shards = sorted(ckpt.glob("*.distcp"))
    read_files(tool, shards)  # source hot
    for mode in ("direct_io", "page_cache"):
        for jobs in (1, 2):
            res = {"src": [], "raw": [], "mount": [], "mount_re": [], "raw_re": []}
            for _ in range(a.runs):
                res["src"].append(read_files(tool, shards, jobs))
                m = Mount(daemon, ckpt, mode)
                try:
                    raw = [m.dir / ".raw" / s.name for s in shards]
                    res["raw"].append(read_files(tool, raw, jobs))
                    if mode == "page_cache":
                        res["raw_re"].append(read_files(tool, raw, jobs))
                finally:
                    m.close()
                m = Mount(daemon, ckpt, mode)  # fresh: nothing of it in the page cache
                try:
                    files = tensor_files(m.dir)
                    res["mount"].append(read_files(tool, files, jobs))
                    if mode == "page_cache":
                        res["mount_re"].append(read_files(tool, files, jobs))
                finally:
                    m.close()
            b = {k: max(v) for k, v in res.items() if v}
            rows.append((f"stream, {mode}, {jobs} reader{'s' if jobs > 1 else ''}, first read",
                         b["mount"], b["raw"], b["src"]))
            if mode == "page_cache":
                rows.append((f"stream, {mode}, {jobs} reader{'s' if jobs > 1 else ''}, re-read",
                             b["mount_re"], b["raw_re"], b["src"]))


def bench_layout(a, daemon, tool, ckpt, rows):
    shards = sorted(ckpt.glob("*.distcp"))
    read_files(tool, shards)
    for mode in ("direct_io", "page_cache"):
        for dim in (0, 1):
            res = {"mount": [], "raw": [], "direct": []}
            for _ in range(a.runs):
                for rank in range(3):
                    res["direct"].append(read_ranges(tool, ckpt, dim, 3, rank))
                m = Mount(daemon, ckpt, mode)
                try:
                    res["raw"].append(read_files(tool, [m.dir / ".raw" / s.name for s in shards]))
                    for rank in range(3):
                        res["mount"].append(read_files(
                            tool, tensor_files(m.dir / ".layout" / f"dim{dim}-of-3" / str(rank))))
                finally:
                    m.close()
            rows.append((f"layout dim{dim}-of-3, {mode}, one rank", max(res["mount"]),
                         max(res["raw"]), max(res["direct"])))


def bench_export(a, daemon, ckpt, out):
    lines = []
    outdir = Path(a.work) / "export"
    outdir.mkdir(exist_ok=True)
    t_cp, rss, t_torch, rss_torch = [], [], [], []
    for _ in range(a.runs):
        m = Mount(daemon, ckpt)
        try:
            t = time.perf_counter()
            subprocess.run(["cp", str(m.dir / ".safetensors" / "@all.safetensors"),
                            str(outdir / "all.safetensors")], check=True)
            t_cp.append(time.perf_counter() - t)
            rss.append(m.peak_rss_mib())
        finally:
            m.close()
        code = ("import sys,resource,time;"
                "from torch.distributed.checkpoint.format_utils import dcp_to_torch_save;"
                "t=time.perf_counter();dcp_to_torch_save(sys.argv[1],sys.argv[2]);"
                "print(time.perf_counter()-t,"
                "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024)")
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
    lines.append(f"| export {size:.2f} GiB | cp through .safetensors: {min(t_cp):.2f} s "
                 f"(daemon peak RSS {max(rss):.0f} MiB) | dcp_to_torch_save: {min(t_torch):.2f} s "
                 f"(peak RSS {max(rss_torch):.0f} MiB) | {min(t_torch) / min(t_cp):.1f}x faster, "
                 f"same bytes: {ok} |")
    for f in outdir.iterdir():
        f.unlink()
    out.extend(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", nargs="*", default=["stream", "layout", "export"])
    ap.add_argument("--build", default="build")
    ap.add_argument("--work", default="/tmp/ckptfs-mount-bench")
    ap.add_argument("--gib", type=float, default=2.5)
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    build = Path(a.build).resolve()
    daemon, tool = build / "tools/ckptfs/ckptfs", build / "tools/bench/bench_read"
    ckpt = Path(a.work) / f"ckpt-{a.gib}g-{a.world}"
    if not (ckpt / ".metadata").exists():
        subprocess.run([sys.executable, str(HERE / "make_big_ckpt.py"), str(ckpt), str(a.gib),
                        str(a.world)], check=True)
    rows, extra = [], []
    if "stream" in a.what:
        bench_stream(a, daemon, tool, ckpt, rows)
    if "layout" in a.what:
        bench_layout(a, daemon, tool, ckpt, rows)
    if "export" in a.what:
        bench_export(a, daemon, ckpt, extra)
    print(f"\ncheckpoint: {ckpt} ({sum(f.stat().st_size for f in ckpt.iterdir()) / 2**30:.2f} "
          f"GiB, {a.world} ranks); best of {a.runs}\n")
    if rows:
        print("| case | mount GiB/s | .raw ceiling GiB/s | direct (no FUSE) GiB/s | "
              "mount / ceiling | mount / direct |")
        print("|---|---|---|---|---|---|")
        for name, m, c, d in rows:
            print(f"| {name} | {m:.2f} | {c:.2f} | {d:.2f} | {m / c:.2f} | {m / d:.2f} |")
    for line in extra:
        print(line)


if __name__ == "__main__":
    main()
