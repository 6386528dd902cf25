"""A gloo process group for the test and fixture workers (torch.multiprocessing.spawn,
torchrun), left the same way by all of them: on success every rank waits for the others,
tears the group down and exits 0 without the interpreter's finalization, where gloo's threads
can std::terminate a rank after every check passed ("terminate called without an active
exception", SIGABRT; seen in CI, and pytorch PR 179291 describes it).  On an exception the
group is torn down and the exception goes on (the rank fails as it would have).

    with gloo_group(rank=rank, world_size=world, init_method=f"file://{init}"):
        ...  # the rank's work; returning from the body ends the process with status 0
"""

from __future__ import annotations

import contextlib
import os
import sys

import torch.distributed as dist


@contextlib.contextmanager
def gloo_group(**init_kwargs):
    dist.init_process_group("gloo", **init_kwargs)
    try:
        yield
    except BaseException:
        dist.destroy_process_group()
        raise
    dist.barrier()  # no rank tears gloo down while a peer still uses it
    dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
