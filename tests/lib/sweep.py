"""sweep.py — how much of a parameter sweep one test run covers.

The optimised build runs every combination.  Sanitizer builds (meson sets CKPT_SWEEP=short
there: each process of an ASan+UBSan build costs several times more) run a subset that still
takes every value of the swept parameter somewhere: `rotate` gives each fixture (or other
outer case) its own slice of the inner combinations, so the outer cases together cover them
all; `cap` limits how many of a list a test takes.  The code paths a short sweep leaves out of
one fixture it runs on another, under the sanitizers, and the optimised build runs them all."""

from __future__ import annotations

import os

SHORT = os.environ.get("CKPT_SWEEP", "full") == "short"


def cap(full: int, short: int) -> int:
    """`full` in a full sweep, `short` in a short one."""
    return short if SHORT else full


def rotate(items, i: int, k: int) -> list:
    """All of `items` in a full sweep; in a short one, `k` of them, the slice of outer case
    `i` (consecutive cases take consecutive slices, wrapping around)."""
    items = list(items)
    if not SHORT or k >= len(items):
        return items
    return [items[(i * k + j) % len(items)] for j in range(k)]


def pick(items, i: int, k: int, keep=()) -> list:
    """rotate(items, i, k), and also every item of `keep` that is in `items` (cases a test
    always runs, e.g. the regression sizes), in the order of `items`."""
    chosen = rotate(items, i, k)
    return [x for x in items if x in chosen or x in keep]
