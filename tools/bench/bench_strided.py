#!/usr/bin/env python3
"""bench_strided.py — a _StridedShard after the first dim (issue 20: many-box requests):

  python3 tools/bench/bench_strided.py [--build build] [--base PATH_TO_OLD_CKPT]
                                       [--work /tmp/ckptfs-strided] [--rows "8192 32768"]
                                       [--specs "2x2:S1s2,R 4:S1"] [--runs 5]

Makes (once, under --work, with torch.distributed.checkpoint in one process) one checkpoint
holding a [ROWS, 512] float32 tensor `r<ROWS>` (one stored chunk) per --rows value; loads each
with `mpirun -np 4 ckpt load --layout SPEC --keys r<ROWS> --json` with this build's ckpt and,
with --base, an older build's (before and after interleaved in one run), --runs times each on
a hot page cache (one untimed load first).  Reported per row, medians over the runs: the
load's wall time (the slowest rank's execute), the slowest rank's planning time, the largest
peak RSS of a rank (/usr/bin/time, the whole process, the 4-8 MiB it loads into included) and
the plan counters (transfers of the job, peak plan bytes on a rank)."""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_read_bytes import MPIRUN  # noqa: E402


def make(work: Path, rows) -> Path:
    d = work / ("ckpt-" + "-".join(map(str, rows)))
    if (d / ".metadata").is_file():
        return d
    code = ("import sys, torch, torch.distributed.checkpoint as dcp\n"
            "sd = {f'r{n}': torch.arange(n * 512, dtype=torch.float32).reshape(n, 512)"
            " for n in map(int, sys.argv[2:])}\n"
            "dcp.save(sd, checkpoint_id=sys.argv[1], no_dist=True)\n")
    subprocess.run([sys.executable, "-c", code, str(d), *map(str, rows)], check=True,
                   capture_output=True)
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--base", help="an older build's ckpt binary (the 'before' rows)")
    ap.add_argument("--work", default="/tmp/ckptfs-strided")
    ap.add_argument("--rows", default="8192 32768")
    ap.add_argument("--specs", default="2x2:S1s2,R 4:S1")
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    rows = [int(x) for x in a.rows.split()]
    new = Path(a.build).resolve() / "tools" / "ckpt" / "ckpt"
    variants = [("after", new)] + ([("before", Path(a.base).resolve())] if a.base else [])
    ckpt = make(Path(a.work), rows)
    print("| tensor | layout × 4 | build | wall s | plan s | peak RSS per rank MB "
          "| plan transfers | plan bytes per rank |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in rows:
            for spec in a.specs.split():
                load(new, ckpt, spec, f"r{n}", tmp)  # warm the page cache
                got = {name: [] for name, _ in variants}
                for _ in range(a.runs):
                    for name, binary in variants:
                        got[name].append(load(binary, ckpt, spec, f"r{n}", tmp))
                for name, _ in variants:
                    rs = got[name]
                    med = {k: statistics.median(r[k] for r in rs)
                           for k in ("wall", "plan", "rss_mb")}
                    tr, pm = rs[0]["transfers"], rs[0]["plan_mem"]
                    print(f"| [{n}, 512] | {spec} | {name} | {med['wall']:.3f} | "
                          f"{med['plan']:.4f} | {med['rss_mb']:.0f} | {tr} | "
                          f"{pm / 1e3:.1f} kB |", flush=True)


def load(binary, ckpt, spec, key, tmp):
    """One `ckpt load` of key under spec over 4 ranks -> the slowest rank's times, the
    largest peak RSS, the plan counters."""
    inner = f'exec /usr/bin/time -f %M -o "{tmp}/rss.$OMPI_COMM_WORLD_RANK" "$0" load "$@"'
    r = subprocess.run([*MPIRUN, "-np", "4", "sh", "-c", inner, str(binary), str(ckpt),
                        "--layout", spec, "--keys", key, "--json"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"ckpt load failed:\n{r.stdout}{r.stderr}")
    per = json.loads(r.stdout.strip().splitlines()[-1])["per_rank"]
    rss = max(int(Path(tmp, f"rss.{k}").read_text().split()[-1]) for k in range(4))
    return {"wall": max(p["total_s"] for p in per), "plan": max(p["plan_s"] for p in per),
            "rss_mb": rss / 1024, "transfers": per[0].get("plan_transfers"),
            "plan_mem": max(p.get("plan_memory", 0) for p in per)}


if __name__ == "__main__":
    main()
