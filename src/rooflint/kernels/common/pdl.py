"""Programmatic dependent launch (PDL, sm_90+) for the kernels of a decode step.

A decode step is a chain of ~60-100 dependent kernels of a few microseconds each, replayed from a
CUDA graph. Launched plainly, each kernel's blocks start only after the previous kernel has
drained, and each then waits a DRAM round trip for its first bytes. Launched with PDL, a kernel's
blocks become resident while the previous kernel still runs:
- a kernel that calls ``launch_next()`` at its start lets the next kernel's blocks in at once;
- before ``griddepcontrol.wait`` a block may only read memory no running kernel writes: weights,
  a block table, KV-cache rows of earlier steps. The decode GEMM (skinny_pdl.cu) and the decode
  attention's split kernel load those into registers there, so their stream runs while the
  kernels before them work; elsewhere a kernel asks for them into L2 (``prefetch_l2``);
- the wait blocks until the previous kernel has completed and its writes are visible. Each
  kernel waits before it reads another's output, so a chain of PDL kernels completes in order.
L2 is the GPU's point of coherence, so a line prefetched before the wait and written by the
previous kernel is read fresh after it; only L1 could be stale, and what a kernel reads of the
previous one's output after the wait it reads through L2 (".cg") or never loaded before.
"""

from __future__ import annotations

import contextlib
import functools
from contextvars import ContextVar

from rooflint.core.switches import switch
from rooflint.core.triton_compat import gdc_launch_dependents, gdc_wait, interpreting, tl, triton

# Set while a model's decode step launches its kernels (decode_chain): a chain of dependent kernels
# replayed from a CUDA graph, where PDL pays. A family benchmark times one kernel over and over
# and keeps its plain launches.
_IN_CHAIN: ContextVar[bool] = ContextVar("rooflint_pdl_chain", default=False)


@contextlib.contextmanager
def decode_chain():
    """Launch the kernels called inside with PDL where pdl_enabled allows it."""
    token = _IN_CHAIN.set(True)
    try:
        yield
    finally:
        _IN_CHAIN.reset(token)


def pdl_enabled(device) -> bool:
    """Whether kernels that support it launch with PDL: on sm_90+, not in the interpreter (which
    lacks griddepcontrol), inside decode_chain(); ROOFLINT_PDL=1 turns it on everywhere and
    ROOFLINT_PDL=0 off.

    On in a model's decode step since the GEMMs hold their weights in registers across the wait
    (kernels/gelu_linear/skinny_pdl.cu): GPT-2's step went from 0.422 to 0.298 ms on an H100
    (docs/perf-notes/models.md). Before that, with an L2 prefetch only, it bought nothing."""
    asked = switch("ROOFLINT_PDL")
    wanted = asked is True or (asked is None and _IN_CHAIN.get())
    if not wanted or device.type != "cuda" or interpreting() or gdc_wait is None:
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
def launch_next():
    """Let the next kernel's blocks become resident now, while this one runs (a kernel that calls
    this at its start and ``gdc_wait`` before reading another kernel's output). Its blocks then
    load what no running kernel writes (weights, old cache rows) into registers and wait: the next
    kernel's stream overlaps this one, and the hop between them is one wait, not a launch."""
    gdc_launch_dependents()


@triton.jit
def prefetch_l2(addresses, nbytes):
    """cp.async.bulk.prefetch.L2 (sm_90): start streaming ``nbytes`` (a multiple of 16) from each
    16-byte-aligned address into L2. A hint: nothing waits for it."""
    return tl.inline_asm_elementwise(
        "mov.u32 $0, 0;\n\tcp.async.bulk.prefetch.L2.global [$1], $2;", "=r,l,r", [addresses, nbytes],
        dtype=tl.int32, is_pure=False, pack=1,
    )  # fmt: skip
