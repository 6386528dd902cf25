#!/usr/bin/env python3
"""bench_torch_view.py — the mount's `.torch/` view against torch's own ways of getting a DCP
checkpoint into a model (issue 23), one process each, side by side in one run:

  python3 tools/bench/bench_torch_view.py [--build build] [--work /tmp/ckptfs-torch-bench]
                                          [--gib 1.0] [--runs 3] [--export-dir /dev/shm]
                                          [--mount-opt torch_zero_crc]

The checkpoint (made on the first run under --work, dcp.save by this script, no process
group): an MLP of float32 Linear layers and its AdamW state after one step, as
torch.distributed.checkpoint.state_dict.get_state_dict gives them (`model` + `optim`, FQN
keys) — about --gib GiB, a third of it the model.  The source files are hot in the page cache
(read once before the rounds); each measurement runs in a fresh Python process that has
built the model (and optimizer) before its clock starts:

  model:   view      torch.load(".torch/model.pt", weights_only=True, mmap=True) +
                     model.load_state_dict
           convert   dcp_to_torch_save(ckpt, --export-dir/x.pt) + torch.load(x.pt,
                     weights_only=True, mmap=True) + model.load_state_dict(sd["model"])
           dcp.load  dcp.load({"model": model.state_dict()}) in place
  resume:  view      torch.load(".torch/@all.pt", ...) + set_state_dict(model, optim, ...)
           convert   dcp_to_torch_save + torch.load + set_state_dict
           dcp.load  dcp.load(get_state_dict(model, optim)) + set_state_dict
  cp:      cp .torch/@all.pt to --export-dir through a fresh mount (the daemon's peak RSS,
           VmHWM) vs dcp_to_torch_save alone (the process's peak RSS)

Every load ends by reading one element per 4 KiB page of every parameter and state tensor
(an optimizer's load_state_dict keeps a memory-mapped tensor as it is, unread).  Best wall
time of --runs (interleaved); each process's peak RSS (VmHWM); a digest of the model's
parameters (and the optimizer's state) after each load, which must agree."""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WIDTH = 2048  # Linear(WIDTH, WIDTH) layers: 16 MiB of float32 weight each


def layers_for(gib):
    return max(1, round(gib * (1 << 30) / 3 / (WIDTH * WIDTH * 4)))


def make_model(n):
    import torch
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(n)])


def make_checkpoint(ckpt, n):
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    model = make_model(n)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(4, WIDTH)).square().sum().backward()
    opt.step()
    msd, osd = get_state_dict(model, opt)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=str(ckpt), no_dist=True)


# ------------------------------------------------------------------ one measurement (child)

def digest(model, opt=None):
    import hashlib
    h = hashlib.sha256()
    for t in model.state_dict().values():
        h.update(t.contiguous().view(-1).view(__import__("torch").uint8).numpy().tobytes())
    if opt is not None:
        for st in opt.state_dict()["state"].values():
            for v in st.values():
                h.update(v.contiguous().view(-1).view(__import__("torch").uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def touch(model, opt):
    """Reads one element of every 4 KiB of every parameter and optimizer state tensor: an
    optimizer's load_state_dict keeps a tensor of the right dtype and device as it is, so a
    memory-mapped one would otherwise not be read until the first step."""
    ts = list(model.state_dict().values())
    if opt is not None:
        ts += [v for st in opt.state_dict()["state"].values() for v in st.values()]
    for t in ts:
        if t.numel():
            t.reshape(-1)[::4096 // t.element_size()].sum()


def peak_rss_mib(pid="self"):
    """VmHWM (reset by exec, unlike ru_maxrss, which a child inherits from its parent)."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child(a):
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    model = make_model(a.layers)
    opt = None
    if a.scenario == "resume":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        # materialise the optimizer's state (what a resumed job has before loading)
        model(torch.randn(4, WIDTH)).square().sum().backward()
        opt.step()
        opt.zero_grad()
    out = Path(a.export_dir) / f"ckptfs-bench-{os.getpid()}.pt"
    t0 = time.perf_counter()
    if a.method == "view":
        name = "model.pt" if a.scenario == "model" else "@all.pt"
        sd = torch.load(Path(a.mnt) / ".torch" / name, weights_only=True, mmap=True)
    elif a.method == "convert":
        dcp_to_torch_save(a.ckpt, out)
        sd = torch.load(out, weights_only=True, mmap=True)
    if a.scenario == "model":
        if a.method == "dcp.load":
            sd = {"model": model.state_dict()}
            dcp.load(sd, checkpoint_id=a.ckpt, no_dist=True)
        else:
            model.load_state_dict(sd if a.method == "view" else sd["model"])
    else:
        if a.method == "dcp.load":
            msd, osd = get_state_dict(model, opt)
            sd = {"model": msd, "optim": osd}
            dcp.load(sd, checkpoint_id=a.ckpt, no_dist=True)
        set_state_dict(model, opt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
    touch(model, opt)
    seconds = time.perf_counter() - t0
    del sd
    if out.exists():
        out.unlink()
    print(json.dumps({"seconds": seconds,
                      "maxrss_mib": peak_rss_mib(),
                      "digest": digest(model, opt)}))


# ------------------------------------------------------------------ the driver

class Mount:
    def __init__(self, daemon, src, work, opts=()):
        self.dir = Path(tempfile.mkdtemp(prefix="mnt-", dir=work))
        extra = [x for o in opts for x in ("-o", o)]
        self.proc = subprocess.Popen([daemon, "-f", *extra, str(src), str(self.dir)],
                                     stderr=subprocess.DEVNULL)
        deadline = time.time() + 30
        while not os.path.ismount(self.dir):
            if self.proc.poll() is not None or time.time() > deadline:
                raise SystemExit("ckptfs did not mount")
            time.sleep(0.02)

    def peak_rss_mib(self):
        return peak_rss_mib(self.proc.pid)

    def close(self):
        subprocess.run(["fusermount3", "-u", str(self.dir)], check=True)
        self.proc.wait(timeout=60)
        os.rmdir(self.dir)


def run_child(a, scenario, method, mnt):
    p = subprocess.run([sys.executable, __file__, "--child", "--scenario", scenario,
                        "--method", method, "--mnt", str(mnt), "--ckpt", str(a.ckpt),
                        "--layers", str(a.layers), "--export-dir", a.export_dir],
                       capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"{scenario}/{method} failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--work", default="/tmp/ckptfs-torch-bench")
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--export-dir", default="/dev/shm")
    ap.add_argument("--mount-opt", action="append", default=[],
                    help="a -o option for the view's mounts (e.g. torch_zero_crc)")
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--scenario")
    ap.add_argument("--method")
    ap.add_argument("--mnt")
    ap.add_argument("--ckpt")
    ap.add_argument("--layers", type=int)
    a = ap.parse_args()
    if a.child:
        return child(a)
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    a.layers = layers_for(a.gib)
    a.ckpt = work / f"ckpt-{a.layers}x{WIDTH}"
    if not (a.ckpt / ".metadata").exists():
        make_checkpoint(a.ckpt, a.layers)
    size = sum(f.stat().st_size for f in a.ckpt.iterdir())
    for f in a.ckpt.iterdir():  # the source hot in the page cache
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass
    daemon = str(Path(a.build) / "tools" / "ckptfs" / "ckptfs")
    print(f"checkpoint: {a.ckpt} ({size / (1 << 30):.2f} GiB, {a.layers} layers of "
          f"{WIDTH}x{WIDTH} + AdamW state); torch {__import__('torch').__version__}; "
          f"{os.cpu_count()} CPUs", flush=True)
    best = {}
    digests = {}
    for run in range(a.runs):
        for scenario in ("model", "resume"):
            for method in ("view", "convert", "dcp.load"):
                m = Mount(daemon, a.ckpt, work, a.mount_opt) if method == "view" else None
                try:
                    r = run_child(a, scenario, method, m.dir if m else "")
                finally:
                    if m:
                        m.close()
                k = (scenario, method)
                if k not in best or r["seconds"] < best[k]["seconds"]:
                    best[k] = r
                digests.setdefault(scenario, set()).add(r["digest"])
                print(f"  run {run}: {scenario:6} {method:8} {r['seconds']:.3f} s, "
                      f"peak RSS {r['maxrss_mib']:.0f} MiB", flush=True)
        # cp of @all.pt through a fresh mount vs dcp_to_torch_save alone
        m = Mount(daemon, a.ckpt, work, a.mount_opt)
        dst = Path(a.export_dir) / "ckptfs-bench-all.pt"
        try:
            t0 = time.perf_counter()
            shutil.copyfile(m.dir / ".torch" / "@all.pt", dst)
            t_cp = time.perf_counter() - t0
            rss = m.peak_rss_mib()
        finally:
            m.close()
            dst.unlink(missing_ok=True)
        p = subprocess.run([sys.executable, "-c",
                            "import sys, time, os\n"
                            "from torch.distributed.checkpoint.format_utils import "
                            "dcp_to_torch_save\n"
                            "t = time.perf_counter()\n"
                            "dcp_to_torch_save(sys.argv[1], sys.argv[2])\n"
                            "t = time.perf_counter() - t\n"
                            "hwm = [l for l in open('/proc/self/status') if "
                            "l.startswith('VmHWM:')][0].split()[1]\n"
                            "print(t, int(hwm) / 1024)\n"
                            "os.unlink(sys.argv[2])",
                            str(a.ckpt), str(dst)], capture_output=True, text=True, check=True)
        t_conv, rss_conv = map(float, p.stdout.split())
        for k, r in ((("cp", "view"), {"seconds": t_cp, "maxrss_mib": rss}),
                     (("cp", "convert"), {"seconds": t_conv, "maxrss_mib": rss_conv})):
            if k not in best or r["seconds"] < best[k]["seconds"]:
                best[k] = r
        print(f"  run {run}: cp .torch/@all.pt {t_cp:.3f} s (daemon peak RSS {rss:.0f} MiB), "
              f"dcp_to_torch_save {t_conv:.3f} s (peak RSS {rss_conv:.0f} MiB)", flush=True)
    print()
    print("| scenario | .torch view | dcp_to_torch_save + torch.load | dcp.load | view peak RSS | "
          "convert peak RSS | dcp.load peak RSS | same result |")
    print("|---|---|---|---|---|---|---|---|")
    for scenario in ("model", "resume"):
        v, c, d = (best[(scenario, m)] for m in ("view", "convert", "dcp.load"))
        print(f"| {scenario} | {v['seconds']:.2f} s | {c['seconds']:.2f} s | {d['seconds']:.2f} s "
              f"| {v['maxrss_mib']:.0f} MiB | {c['maxrss_mib']:.0f} MiB | "
              f"{d['maxrss_mib']:.0f} MiB | {len(digests[scenario]) == 1} |")
    v, c = best[("cp", "view")], best[("cp", "convert")]
    print(f"| cp @all.pt vs dcp_to_torch_save | {v['seconds']:.2f} s | {c['seconds']:.2f} s | | "
          f"daemon {v['maxrss_mib']:.0f} MiB | {c['maxrss_mib']:.0f} MiB | | |")


if __name__ == "__main__":
    main()
