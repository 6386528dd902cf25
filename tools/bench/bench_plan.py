#!/usr/bin/env python3
"""bench_plan.py — the collective loader's plan against the independent mode (issue 20 item 2):

  python3 tools/bench/bench_plan.py [--build build] [--base PATH_TO_OLD_CKPT]
                                    [--work /tmp/ckptfs-readbytes] [--ranks "2 4"]
                                    [--which tall,demo] [--runs 3] [--layout dim1]

Checkpoints (made once under --work, as bench_read_bytes.py makes them): `tall`, one
[1000000, 16] float32 tensor in one chunk; `demo`, the demo model + AdamW state (403 MB).
For each checkpoint and RANKS, `mpirun -np RANKS ckpt load --layout LAYOUT --json` runs in
the collective mode (this build's ckpt, and --base's, an older build, when given: before and
after in one run, interleaved) and in the independent mode, each --runs times on a hot page
cache (one untimed load first).  Reported per row, best run by wall time: the load's wall time
(the slowest rank's execute, process start-up excluded), the slowest rank's planning time, the
largest peak RSS of a rank (/usr/bin/time's maximum resident set, the whole process: the
buffers it loads into included), and the plan counters (transfers, peak plan bytes on a rank)
where the binary has them."""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_read_bytes import MPIRUN, make  # noqa: E402


def mpirun(single_copy):
    """bench_read_bytes' mpirun, with Open MPI's shared-memory single-copy mechanism `none`
    (its setting: copy-in/copy-out through the shared FIFO) or `cma` (process_vm_readv)."""
    i = MPIRUN.index("btl_vader_single_copy_mechanism") + 1
    return MPIRUN[:i] + [single_copy] + MPIRUN[i + 1:]


def load(binary, ckpt, m, layout, mode, tmp, single_copy="none"):
    inner = f'exec /usr/bin/time -f %M -o "{tmp}/rss.$OMPI_COMM_WORLD_RANK" "$0" load "$@"'
    r = subprocess.run([*mpirun(single_copy), "-np", str(m), "sh", "-c", inner, str(binary), str(ckpt),
                        "--layout", layout, "--mode", mode, "--json"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"ckpt load failed:\n{r.stdout}{r.stderr}")
    per = json.loads(r.stdout.strip().splitlines()[-1])["per_rank"]
    rss = max(int(Path(tmp, f"rss.{k}").read_text().split()[-1]) for k in range(m))
    return {"wall": max(p["total_s"] for p in per), "plan": max(p["plan_s"] for p in per),
            "rss_mb": rss / 1024, "transfers": per[0].get("plan_transfers"),
            "plan_mem": max((p["plan_memory"] for p in per if "plan_memory" in p), default=None),
            "read_s": max(p.get("read_s", 0) for p in per),
            "exchange_s": max(p.get("exchange_s", 0) for p in per),
            "sent_mb": max(p.get("sent", 0) for p in per) / 1e6,
            "rounds": max(p.get("rounds", 0) for p in per)}


def machine():
    """One line: CPUs, kernel, date, load average (the rows are only as good as the host)."""
    import os
    import platform
    import time
    la = " ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"nproc {os.cpu_count()}, Linux {platform.release()}, "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {la}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--base", help="an older build's ckpt binary (the 'before' rows)")
    ap.add_argument("--work", default="/tmp/ckptfs-readbytes")
    ap.add_argument("--ranks", default="2 4")
    ap.add_argument("--which", default="tall,demo")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--layout", default="dim1")
    ap.add_argument("--single-copy", choices=("none", "cma"), default="none",
                    help="Open MPI's btl_vader_single_copy_mechanism (default none, as "
                    "bench_read_bytes.py; cma: one copy per message, where ptrace is allowed)")
    a = ap.parse_args()
    build, work = Path(a.build).resolve(), Path(a.work)
    new = build / "tools" / "ckpt" / "ckpt"
    variants = [("collective", new, "collective")]
    if a.base:
        variants.append(("collective (before)", Path(a.base).resolve(), "collective"))
    variants.append(("independent", new, "independent"))
    print(f"{machine()}, btl_vader_single_copy_mechanism {a.single_copy}")
    print("| checkpoint | layout | method | wall s | × independent | plan s | plan / wall "
          "| read s | exchange s | sent MB per rank | rounds | peak RSS per rank MB "
          "| plan transfers | plan bytes per rank |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for which in [w for w in a.which.split(",") if w]:
            ckpt = make(which, build, work)
            for m in map(int, a.ranks.split()):
                layout = a.layout
                best = {}
                load(new, ckpt, m, layout, "collective", tmp, a.single_copy)  # warm the cache
                for _ in range(a.runs):
                    for name, binary, mode in variants:
                        r = load(binary, ckpt, m, layout, mode, tmp, a.single_copy)
                        if name not in best or r["wall"] < best[name]["wall"]:
                            best[name] = r
                ind = best.get("independent", {}).get("wall")
                for name, _, _ in variants:
                    r = best[name]
                    tr = "–" if r["transfers"] is None else str(r["transfers"])
                    pm = "–" if r["plan_mem"] is None else f"{r['plan_mem'] / 1e3:.1f} kB"
                    share = f"{100 * r['plan'] / r['wall']:.1f} %" if r["wall"] else "–"
                    ratio = f"{r['wall'] / ind:.2f}×" if ind else "–"
                    print(f"| {which} | {layout} × {m} | {name} | {r['wall']:.3f} | {ratio} | "
                          f"{r['plan']:.3f} | {share} | {r['read_s']:.3f} | "
                          f"{r['exchange_s']:.3f} | {r['sent_mb']:.1f} | {r['rounds']} | "
                          f"{r['rss_mb']:.0f} | {tr} | {pm} |", flush=True)


if __name__ == "__main__":
    main()
