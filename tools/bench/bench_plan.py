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


def load(binary, ckpt, m, layout, mode, tmp):
    inner = f'exec /usr/bin/time -f %M -o "{tmp}/rss.$OMPI_COMM_WORLD_RANK" "$0" load "$@"'
    r = subprocess.run([*MPIRUN, "-np", str(m), "sh", "-c", inner, str(binary), str(ckpt),
                        "--layout", layout, "--mode", mode, "--json"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"ckpt load failed:\n{r.stdout}{r.stderr}")
    per = json.loads(r.stdout.strip().splitlines()[-1])["per_rank"]
    rss = max(int(Path(tmp, f"rss.{k}").read_text().split()[-1]) for k in range(m))
    return {"wall": max(p["total_s"] for p in per), "plan": max(p["plan_s"] for p in per),
            "rss_mb": rss / 1024, "transfers": per[0].get("plan_transfers"),
            "plan_mem": max((p["plan_memory"] for p in per if "plan_memory" in p), default=None)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--base", help="an older build's ckpt binary (the 'before' rows)")
    ap.add_argument("--work", default="/tmp/ckptfs-readbytes")
    ap.add_argument("--ranks", default="2 4")
    ap.add_argument("--which", default="tall,demo")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--layout", default="dim1")
    a = ap.parse_args()
    build, work = Path(a.build).resolve(), Path(a.work)
    new = build / "tools" / "ckpt" / "ckpt"
    variants = [("collective", new, "collective")]
    if a.base:
        variants.append(("collective (before)", Path(a.base).resolve(), "collective"))
    variants.append(("independent", new, "independent"))
    print("| checkpoint | layout | method | wall s | plan s | plan / wall | peak RSS per rank MB "
          "| plan transfers | plan bytes per rank |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for which in [w for w in a.which.split(",") if w]:
            ckpt = make(which, build, work)
            for m in map(int, a.ranks.split()):
                layout = a.layout
                best = {}
                load(new, ckpt, m, layout, "collective", tmp)  # warm the page cache
                for _ in range(a.runs):
                    for name, binary, mode in variants:
                        r = load(binary, ckpt, m, layout, mode, tmp)
                        if name not in best or r["wall"] < best[name]["wall"]:
                            best[name] = r
                for name, _, _ in variants:
                    r = best[name]
                    tr = "–" if r["transfers"] is None else str(r["transfers"])
                    pm = "–" if r["plan_mem"] is None else f"{r['plan_mem'] / 1e3:.1f} kB"
                    share = f"{100 * r['plan'] / r['wall']:.1f} %" if r["wall"] else "–"
                    print(f"| {which} | {layout} × {m} | {name} | {r['wall']:.3f} | "
                          f"{r['plan']:.3f} | {share} | {r['rss_mb']:.0f} | {tr} | {pm} |",
                          flush=True)


if __name__ == "__main__":
    main()
