"""The time a chain of dependent kernels costs in one CUDA graph, whatever they do (issue 12).

A decode step of a small model is a chain of ~140 kernels (GPT-2 124M: 12 layers x 11, plus
embedding, final norm, lm_head and sampling), each moving a few MB. Replayed from a CUDA graph,
each kernel still waits for the previous one to drain and then ramps up its own blocks. This
measures that floor with kernels that do nothing: a 1-program Triton kernel reading and writing one
element of a shared buffer (so each depends on the last), and the same with 132 programs. The step
time of a chain of N kernels cannot fall below N times the per-kernel figure printed here. Each is
measured launched plainly and with programmatic dependent launch (rooflint.kernels._pdl:
blocks resident early, waiting in griddepcontrol.wait), which is what the decode kernels use on sm_90.
  python3 scripts/device/launch_floor.py > launch-floor.txt
"""

import torch
import triton
import triton.language as tl

from rooflint.engine.timing import time_cuda
from rooflint.kernels._pdl import pdl_enabled, pdl_launch, wait


@triton.jit
def _touch(ptr, PDL: tl.constexpr):
    if PDL:
        wait()
    tl.store(ptr + tl.program_id(0), tl.load(ptr + tl.program_id(0)) + 1.0)


def replay_us(kernels: int, programs: int, pdl: bool) -> float:
    """Median device time of one replay of a graph of ``kernels`` dependent launches, by the bench's
    own burst timer (engine.timing.time_cuda: a spin kernel queues the whole replay first)."""
    buf = torch.zeros(programs, device="cuda")
    _touch[(programs,)](buf, pdl, **pdl_launch(pdl))  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(kernels):
            _touch[(programs,)](buf, pdl, **pdl_launch(pdl))
    l2_bytes = torch.cuda.get_device_properties(0).L2_cache_size
    return time_cuda(graph.replay, l2_bytes=l2_bytes).median_ms * 1e3


def main() -> None:
    name = torch.cuda.get_device_name()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    print(f"{name}, {sms} SMs; median device time of one CUDA graph of N dependent kernels")
    print(f"{'kernels':>8} {'programs':>9} {'PDL':>4} {'graph us':>10} {'us per kernel':>14}")
    for pdl in sorted({False, pdl_enabled(torch.device("cuda"))}):
        for programs in (1, sms):
            for kernels in (1, 16, 64, 137):
                total = replay_us(kernels, programs, pdl)
                print(f"{kernels:>8} {programs:>9} {'on' if pdl else 'off':>4} {total:>10.1f} {total / kernels:>14.2f}")


if __name__ == "__main__":
    main()
