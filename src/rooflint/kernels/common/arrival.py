"""Last-arrival combines: several programs each publish a partial, and the last to finish sums them.

reduce_sum's row splits, the skinny GEMM's K splits and the greedy argmax's vocabulary chunks all
finish this way instead of launching a second kernel: each program stores its partial, counts its
arrival on a per-output counter, and the program that arrives last reads every partial in a fixed
order (so the result does not depend on who finished first) and writes the output.
"""

from __future__ import annotations

from rooflint.core.triton_compat import tl, triton


@triton.jit
def last_to_arrive(count_ptr, index, arrivals):
    """Count this program's arrival at counter ``index``; true in the last of ``arrivals`` programs.

    Call it after the partial is stored. The barrier orders every thread's store before the
    acq_rel atomic that releases them; the last arrival then reads the partials with
    cache_modifier=".cg" (from L2, where the other SMs' stores landed, never a stale L1)."""
    tl.debug_barrier()
    return tl.atomic_add(count_ptr + index, 1, sem="acq_rel") == arrivals - 1


@triton.jit
def rearm(count_ptr, index):
    """The last arrival sets the counter back to zero, for the next call or CUDA-graph replay."""
    tl.atomic_xchg(count_ptr + index, 0)
