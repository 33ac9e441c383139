"""Bisect why Triton LayerNorm times 3% slower under `rooflint bench` than in a bare script.

Each step changes one thing between the bench worker's path and the bare path, same process.
"""

import contextlib

import torch

from rooflint.core.registry import get_family
from rooflint.core.specs import current_gpu_spec
from rooflint.engine import timing
from rooflint.engine.worker import Task, Worker
from rooflint.kernels import layernorm as ln

L2 = torch.cuda.get_device_properties(0).L2_cache_size
params = {"rows": 16384, "hidden": 4096}
family = get_family("layernorm")


def bare(label, x, w, b):
    y, mean, rstd = torch.empty_like(x), torch.empty(x.shape[0], device="cuda"), torch.empty(x.shape[0], device="cuda")
    fn = lambda: ln.triton_layernorm(x, w, b, y, mean, rstd)  # noqa: E731
    print(f"{label:58s} {timing.time_cuda(fn, l2_bytes=L2).median_ms * 1e3:8.2f} us", flush=True)


g = torch.Generator(device="cuda").manual_seed(0)
x0 = torch.randn(16384, 4096, device="cuda", generator=g).bfloat16()
w0 = torch.randn(4096, device="cuda", generator=g).bfloat16()
b0 = torch.randn(4096, device="cuda", generator=g).bfloat16()
bare("1 bare script inputs", x0, w0, b0)
case = family.build_case("large", params, "bf16", torch.device("cuda"))
bare("2 bare, the family's inputs (make_inputs)", case["x"], case["weight"], case["bias"])
bare("3 bare, the family's x, script w/b", case["x"], w0, b0)
bare("4 bare, script x, family w/b", x0, case["weight"], case["bias"])
variant = family.variants["triton"].build(case)
print(f"{'5 the variant builder, bare timer':58s} {timing.time_cuda(variant, l2_bytes=L2).median_ms * 1e3:8.2f} us")
worker = Worker("cuda", current_gpu_spec())
task = Task("layernorm", "triton", "bf16", "large", params)
print(f"{'6 Worker.run (reference, check, nvtx, clocks)':58s} {worker.run(task).median_ms * 1e3:8.2f} us", flush=True)
timing.nvtx_range = lambda name: contextlib.nullcontext()
print(f"{'7 Worker.run without NVTX ranges':58s} {worker.run(task).median_ms * 1e3:8.2f} us", flush=True)
print("w stats family", case["weight"].float().abs().mean().item(), "script", w0.float().abs().mean().item())
