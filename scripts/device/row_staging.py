"""Row-wise kernels with their rows staged in shared memory, beside the register kernels, on the
bench's burst timer (issue 14: on the H200 softmax, layernorm and layernorm_gelu run at 0.78-0.88 of
the read ceiling, while a 1:1 copy reaches 0.95; ncu-round18 puts it on rows held in registers, which
cap the rows in flight an SM and have none in flight while a row is reduced).

Per family at the large bf16 shape, each entry checked against float64 first, then timed in
alternating rounds by time_cuda (start state, L2 flushed, NVML clock):
- `stream`: torch.neg into a buffer of x's size, a 1:1 stream of the same bytes (read x, write y):
  what any kernel that reads and writes this shape can be held against;
- `eager`, `triton`, `cuda`: the family's own variants;
- `cuda staged sN tT`: row_staging_softmax.cu and row_staging_layernorm.cu (the ring of
  row_staging.cuh): a persistent block keeps N rows in flight in shared memory, copied by the copy
  engine (cp.async.bulk), and works on the oldest; T threads;
- `triton tma sN wW pP`: a persistent Triton kernel that loads each row by a TMA descriptor in a
  loop pipelined N stages deep (the row lands in shared memory), W warps, P programs an SM.
Writes row-staging.csv under $OUT (or /tmp/rooflint-sweeps).

Round 21 on an H200 (reports/h200/probe-round21): neither staged form beat the register kernels.
The CUDA ring lost 3-70%, more the fewer warps an SM it left (a block works its rows one after
another); the Triton TMA loop lost 3-9% at its best. The size-matched 1:1 stream ran at 0.951 of
the read ceiling at softmax's shape and 0.933 at layernorm's.

    python3 scripts/device/row_staging.py [--rounds 3] [--families softmax,layernorm,layernorm_gelu]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
import triton
import triton.language as tl
from side_by_side import burst_rounds, check_entries, gpu_timing_setup, median_of
from triton.tools.tensor_descriptor import TensorDescriptor

from rooflint.engine import cuda_build
from rooflint.kernels import cuda_dtype, sm_count
from rooflint.kernels import layernorm as ln
from rooflint.kernels._gelu import gelu_tanh, mufu_form

HERE = Path(__file__).parent

BOX = 256  # a TMA box is at most 256 elements a dimension: a row is loaded as [row / 256, 256]
# (probe kernels: row * cols is int32 arithmetic, fine below 2^31 elements)


@triton.jit
def _softmax_tma_kernel(x_desc, y_ptr, rows, R: tl.constexpr, C: tl.constexpr, STAGES: tl.constexpr):
    offs = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    for row in tl.range(tl.program_id(0), rows, tl.num_programs(0), num_stages=STAGES):
        x = tl.reshape(x_desc.load([row, 0, 0]), [R, C]).to(tl.float32)
        m = tl.max(tl.max(x, axis=1), axis=0)
        e = tl.exp(x - m)
        inv = 1.0 / tl.sum(tl.sum(e, axis=1), axis=0)
        tl.store(y_ptr + row * (R * C) + offs, (e * inv).to(y_ptr.dtype.element_ty))


@triton.jit
def _ln_tma_kernel(
    x_desc, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, rows, eps,
    R: tl.constexpr, C: tl.constexpr, GELU: tl.constexpr, MUFU: tl.constexpr, STATS: tl.constexpr,
    STAGES: tl.constexpr,
):  # fmt: skip
    offs = tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :]
    w = tl.load(w_ptr + offs).to(tl.float32)  # once a program: the grid is persistent
    b = tl.load(b_ptr + offs).to(tl.float32)
    for row in tl.range(tl.program_id(0), rows, tl.num_programs(0), num_stages=STAGES):
        x = tl.reshape(x_desc.load([row, 0, 0]), [R, C]).to(tl.float32)
        mean = tl.sum(tl.sum(x, axis=1), axis=0) / (R * C)
        centered = x - mean
        rstd = 1.0 / tl.sqrt(tl.sum(tl.sum(centered * centered, axis=1), axis=0) / (R * C) + eps)
        y = centered * rstd * w + b
        if GELU:
            y = gelu_tanh(y, MUFU)
        tl.store(y_ptr + row * (R * C) + offs, y.to(y_ptr.dtype.element_ty))
        if STATS:
            tl.store(mean_ptr + row, mean)
            tl.store(rstd_ptr + row, rstd)


def _descriptor(x):
    rows, cols = x.shape
    return TensorDescriptor.from_tensor(x.view(rows, cols // BOX, BOX), [1, cols // BOX, BOX])


def triton_tma_softmax(x, y, stages, warps, per_sm):
    rows, cols = x.shape
    grid = (min(rows, per_sm * sm_count(x.device, on_cpu=4)),)
    _softmax_tma_kernel[grid](_descriptor(x), y, rows, R=cols // BOX, C=BOX, STAGES=stages, num_warps=warps)
    return y


def triton_tma_layernorm(x, w, b, y, mean, rstd, gelu, stages, warps, per_sm):
    rows, hidden = x.shape
    grid = (min(rows, per_sm * sm_count(x.device, on_cpu=4)),)
    stats = mean is not None
    _ln_tma_kernel[grid](
        _descriptor(x), w, b, y, mean if stats else y, rstd if stats else y, rows, ln.EPS,
        R=hidden // BOX, C=BOX, GELU=gelu, MUFU=gelu and mufu_form(y.dtype), STATS=stats, STAGES=stages,
        num_warps=warps,
    )  # fmt: skip
    return y


def entries_for(name: str, family, case) -> dict:
    """label -> zero-argument call for one family's large case, the family's own variants first."""
    entries = {label: family.variants[label].build(case) for label in ("eager", "triton", "cuda")}
    x = case["x"].contiguous()
    y = torch.empty_like(x)
    rows, cols = x.shape
    if name == "softmax":
        staged = cuda_build.load(HERE / "row_staging_softmax.cu")
        for slots in (2, 3, 4, 6):
            entries[f"cuda staged s{slots} t256"] = lambda s=slots: (
                staged.launch("rooflint_softmax_staged", x, y, rows, cols, cuda_dtype(x.dtype), s) or y
            )
        for stages, warps, per_sm in ((2, 16, 1), (3, 16, 1), (2, 8, 2), (3, 32, 1)):
            label = f"triton tma s{stages} w{warps} p{per_sm}"
            entries[label] = lambda s=stages, w=warps, p=per_sm: triton_tma_softmax(x, y, s, w, p)
        return entries
    gelu = name == "layernorm_gelu"
    w, b = case["weight"], case["bias"]
    staged = cuda_build.load(HERE / "row_staging_layernorm.cu")
    stats = () if gelu else tuple(torch.empty(x.shape[0], dtype=torch.float32, device=x.device) for _ in range(2))

    def outputs(y_out):
        return (y_out, *stats) if stats else y_out

    for slots, threads in ((4, 128), (8, 128), (12, 128), (16, 128), (8, 256), (16, 256)):
        entries[f"cuda staged s{slots} t{threads}"] = lambda s=slots, t=threads: outputs(
            staged.launch("rooflint_layernorm_staged", x, w, b, y, *(stats or (y, y)), rows, cols, t, gelu,
                          bool(stats), cuda_dtype(x.dtype), float(ln.EPS), s) or y
        )  # fmt: skip
    for stages, warps, per_sm in ((2, 8, 2), (3, 8, 2), (4, 4, 4), (3, 8, 3)):
        label = f"triton tma s{stages} w{warps} p{per_sm}"
        entries[label] = lambda s=stages, w_=warps, p=per_sm: outputs(
            triton_tma_layernorm(x, w, b, y, *(stats or (None, None)), gelu, s, w_, p)
        )
    return entries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--families", default="softmax,layernorm,layernorm_gelu")
    args = parser.parse_args()
    rows: list[dict] = []
    for name in args.families.split(","):
        family, device, sampler, l2, path = gpu_timing_setup(name, "row-staging.csv")
        params = family.sizes["large"][0]
        case = family.build_case("large", params, "bf16", device)
        ideal = family.cost(params, "bf16").bytes
        entries = entries_for(name, family, case)
        checks = check_entries(family, "bf16", entries, family.reference(case.inputs, params), where=name)
        x = case["x"]
        buffer = torch.empty_like(x)
        entries = {"stream": lambda x=x, out=buffer: torch.neg(x, out=out), **entries}
        checks["stream"] = "not checked (a 1:1 stream of x's bytes, not the family's result)"
        stream_bytes = 2 * x.numel() * x.element_size()
        columns = {
            label: {"family": name, "check": checks[label], "bytes": stream_bytes if label == "stream" else ideal}
            for label in entries
        }
        burst_rounds(entries, args.rounds, l2, sampler, path, rows, columns)
    print("\nfamily entry median_ms GB/s")
    for name in args.families.split(","):
        mine = [r for r in rows if r["family"] == name]
        for label in dict.fromkeys(r["entry"] for r in mine):
            ms = median_of(mine, entry=label)
            nbytes = next(r["bytes"] for r in mine if r["entry"] == label)
            print(f"{name:15s} {label:28s} {ms:.4f} {nbytes / ms / 1e6:.0f}", flush=True)


if __name__ == "__main__":
    main()
