"""Programmatic dependent launch (PDL, sm_90+) for the kernels of a decode step.

A decode step is a chain of ~60-100 dependent kernels of a few microseconds each, replayed from a
CUDA graph. Launched plainly, each kernel's blocks start only after the previous kernel has
drained, and each then waits a DRAM round trip for its first bytes. Launched with PDL, a kernel's
blocks become resident while the previous kernel still runs:
- before ``griddepcontrol.wait`` they may only read memory no running kernel writes: weights, a
  block table, KV-cache pages of earlier steps. They ask for those bytes into L2 (``prefetch_l2``),
  so the stream starts during the previous kernel's tail;
- ``wait()`` blocks until the previous kernel has completed and its writes are visible, then lets
  the next kernel's blocks launch. Each kernel calls it before touching anything else, so a
  chain of PDL kernels still completes in order.
L2 is the GPU's point of coherence, so a line prefetched before the wait and written by the
previous kernel is read fresh after it; only L1 would be stale, and the prefetch bypasses it.
"""

from __future__ import annotations

import functools
import os

from rooflint.core.triton_compat import gdc_launch_dependents, gdc_wait, interpreting, tl, triton


def pdl_enabled(device) -> bool:
    """Whether kernels that support it launch with PDL: only with ROOFLINT_PDL=1, on sm_90+, not in
    the interpreter (which lacks griddepcontrol).

    Off by default, because on an H100 it bought nothing: GPT-2's decode step took 0.4894 ms with
    it and 0.4880 ms without (docs/perf-notes/kernels-at-limit.md), while a profiled step with it
    shows each kernel's wait as its own time, which breaks the per-op attribution."""
    if os.environ.get("ROOFLINT_PDL") != "1" or device.type != "cuda" or interpreting() or gdc_wait is None:
        return False
    return _capability(device.index)[0] >= 9


def pdl_launch(pdl: bool) -> dict:
    """The launch keyword that asks Triton's launcher for PDL (omitted when off)."""
    return {"launch_pdl": True} if pdl else {}


@functools.cache
def _capability(index):
    import torch

    return torch.cuda.get_device_capability(index)


@triton.jit
def wait():
    """Wait for the previous kernel (its writes visible), then let the next kernel's blocks launch."""
    gdc_wait()
    gdc_launch_dependents()


@triton.jit
def prefetch_l2(addresses, nbytes):
    """cp.async.bulk.prefetch.L2 (sm_90): start streaming ``nbytes`` (a multiple of 16) from each
    16-byte-aligned address into L2. A hint: nothing waits for it."""
    return tl.inline_asm_elementwise(
        "mov.u32 $0, 0;\n\tcp.async.bulk.prefetch.L2.global [$1], $2;", "=r,l,r", [addresses, nbytes],
        dtype=tl.int32, is_pure=False, pack=1,
    )  # fmt: skip
