"""strace_io.py — what a process's read syscalls returned, per file, from `strace -f -y` output.

Run the process as `strace -f -y -s 0 -e trace=read,pread64,readv,preadv,preadv2 -o FILE CMD`
(every thread, descriptors shown with their paths), then `tally(FILE, under)`: the bytes and
calls of the read-family syscalls on files below `under` that returned bytes, split into
metadata files (`*.metadata`, `*.json`) and data files (everything else there).  Handles the
`<unfinished ...>` / `<... resumed>` pairs strace writes when threads interleave.  Used by
tests/mpi/test_load_counters.py and tools/bench/bench_read_bytes.py."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass

CALLS = "read,pread64,readv,preadv,preadv2"
STRACE = ["strace", "-f", "-y", "-s", "0", "-e", f"trace={CALLS}"]

_START = re.compile(r"^(\d+)\s+(?:\d+:\d+:\d+(?:\.\d+)?\s+)?(read|pread64|readv|preadv|preadv2)"
                    r"\((\d+)<([^>]*)>")
_RESUMED = re.compile(r"^(\d+)\s+(?:\d+:\d+:\d+(?:\.\d+)?\s+)?<\.\.\. (\w+) resumed>")
_RESULT = re.compile(r"\)\s+=\s+(-?\d+)")


@dataclass
class Tally:
    data_bytes: int = 0
    data_calls: int = 0
    meta_bytes: int = 0
    meta_calls: int = 0


def is_metadata(path: str) -> bool:
    return path.endswith(".metadata") or path.endswith(".json")


def tally(trace: str, under: str) -> Tally:
    """Bytes and calls (returning > 0) of reads on files below `under` in strace output."""
    root = os.path.realpath(under).rstrip("/") + "/"
    pending: dict[str, str] = {}  # tid -> path of its unfinished read
    t = Tally()
    with open(trace, encoding="utf-8", errors="replace") as f:
        for line in f:
            path = None
            m = _START.match(line)
            if m:
                if "<unfinished ...>" in line:
                    pending[m.group(1)] = m.group(4)
                    continue
                path = m.group(4)
            else:
                m = _RESUMED.match(line)
                if not m or m.group(2) not in CALLS.split(","):
                    continue
                path = pending.pop(m.group(1), None)
                if path is None:
                    continue
            r = _RESULT.search(line)
            if not r or not path.startswith(root):
                continue
            n = int(r.group(1))
            if n <= 0:
                continue
            if is_metadata(path):
                t.meta_bytes += n
                t.meta_calls += 1
            else:
                t.data_bytes += n
                t.data_calls += 1
    return t
