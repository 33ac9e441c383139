# ruff: noqa: B023  (each lambda is timed inside report() before the loop moves on)
"""Device sweep: LayerNorm forward (+GELU) warps, and LayerNorm backward programs per SM.

Times each config with rooflint's timer (device time, L2 flushed) and with triton.testing.do_bench,
so a disagreement between the two shows up beside the config.
"""

import torch
import torch.nn.functional as F
from triton.testing import do_bench

from rooflint.engine.timing import time_cuda
from rooflint.kernels import layernorm as ln
from rooflint.kernels import layernorm_backward as lnb

L2 = torch.cuda.get_device_properties(0).L2_cache_size
rows, hidden = 16384, 4096
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(rows, hidden, device="cuda", generator=g).bfloat16()
w = torch.randn(hidden, device="cuda", generator=g).bfloat16()
b = torch.randn(hidden, device="cuda", generator=g).bfloat16()
y = torch.empty_like(x)
mean = torch.empty(rows, device="cuda")
rstd = torch.empty(rows, device="cuda")


def report(name, fn):
    ours = time_cuda(fn, l2_bytes=L2).median_ms
    theirs = do_bench(fn, warmup=50, rep=300, return_mode="median")
    print(f"{name:40s} rooflint {ours * 1e3:8.2f} us   do_bench {theirs * 1e3:8.2f} us", flush=True)


def unfused_ln(t):
    m = t.float().mean(-1, keepdim=True)
    v = ((t.float() - m) ** 2).mean(-1, keepdim=True)
    return ((t.float() - m) * torch.rsqrt(v + 1e-5) * w.float() + b.float()).to(t.dtype)


for gelu in (False, True):
    compiled = torch.compile(lambda t: F.gelu(unfused_ln(t), approximate="tanh") if gelu else unfused_ln(t))
    report(f"compile gelu={gelu}", lambda: compiled(x))
    for warps in (4, 8, 16):
        report(
            f"triton ln gelu={gelu} warps={warps}",
            lambda: ln.triton_layernorm(x, w, b, y, mean, rstd, gelu=gelu, num_warps=warps),
        )
    report(f"triton ln gelu={gelu} default", lambda: ln.triton_layernorm(x, w, b, y, mean, rstd, gelu=gelu))

dy = torch.randn(rows, hidden, device="cuda", generator=g).bfloat16()
print("programs_per_sm chosen:", lnb._programs_per_sm(hidden, lnb.triton_config(hidden)[1], True, x.dtype, 0))
sms = torch.cuda.get_device_properties(0).multi_processor_count
for per_sm in (1, 2, 3, 4):
    for prefetch in (True, False):
        out = lnb.allocate(x, w, per_sm * sms)
        report(
            f"triton lnb per_sm={per_sm} prefetch={prefetch}",
            lambda: lnb.triton_layernorm_backward(x, dy, w, mean, rstd, out=out, prefetch=prefetch),
        )
