"""Device-side extras for decode_attention and gelu_linear (run after `rooflint bench` on the H100).

Prints, for the perf notes: the CUDA GEMM's tile configurations timed one by one, the Triton GEMM's
autotuned config with its registers/smem and whether its PTX uses wgmma, SASS instruction counts
of the CUDA GEMM (HMMA vs HGMMA), SDPA's chosen and pinned backends for decode, and a small sweep
of the Triton decode kernel's tile/stage choices. Every timing uses triton.testing.do_bench, which
flushes L2 before each call. Usage: python3 scripts/dev/decode_gelu_linear.py [--budget SECONDS]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
from triton.testing import do_bench

from rooflint.core.registry import get_family
from rooflint.engine import cuda_build

START = time.time()


def ms(fn) -> float:
    return do_bench(fn, warmup=50, rep=300, return_mode="median")


def left(budget: float) -> bool:
    return time.time() - START < budget


def sass_section() -> None:
    source = Path("kernels/gelu_linear.cu")
    cubin = Path("/tmp/gelu_linear.cubin")
    nvcc, cuobjdump = cuda_build.nvcc_path(), shutil.which("cuobjdump")
    if not nvcc or not cuobjdump:
        print("sass: nvcc or cuobjdump missing")
        return
    build = [nvcc, "-O3", "-std=c++17", *cuda_build.gencode("sm_90a"), "-cubin", "-Xptxas", "-v", "-I", "kernels"]
    result = subprocess.run([*build, str(source), "-o", str(cubin)], capture_output=True, text=True)
    for line in result.stderr.splitlines():
        if "registers" in line or "spill" in line:
            print("  ptxas:", line.strip())
    sass = subprocess.run([cuobjdump, "-sass", str(cubin)], capture_output=True, text=True).stdout
    for op in ("HMMA", "HGMMA", "LDSM", "LDGSTS", "BAR.SYNC", "MUFU.EX2"):
        print(f"  sass {op}: {sass.count(op)}")


def decode_section(budget: float) -> None:
    from rooflint.kernels import decode_attention as da

    family = get_family("decode_attention")
    for params in family.sizes["large"]:
        if not left(budget):
            return
        decode_one(family, da, params, budget)
        torch.cuda.empty_cache()


def decode_one(family, da, params, budget) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    case = family.build_case("large", params, "bf16", torch.device("cuda"))
    q, k, v = case["q"], case["k"], case["v"]
    gqa = params["h"] != params["h_kv"]
    nbytes = family.cost(params, "bf16").bytes
    tag = f"decode h_kv={params['h_kv']}"
    try:
        choice = SDPBackend(torch._fused_sdp_choice(q, k, v, None, 0.0, False, enable_gqa=gqa)).name
    except Exception as error:  # private API
        choice = f"unknown ({error})"
    ws = da.DecodeWorkspace(q, k)
    print(f"{tag} SDPA default backend: {choice}; triton/cuda splits={ws.splits} chunk={ws.chunk}")
    for backend in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION", "MATH"):
        try:

            def run(backend=backend):
                with sdpa_kernel(getattr(SDPBackend, backend)):
                    return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)

            t = ms(run)
            print(f"{tag} sdpa {backend} {t:.4f} ms {nbytes / t / 1e9:.2f} TB/s")
        except Exception as error:
            print(f"{tag} sdpa {backend} unavailable: {str(error).splitlines()[0][:120]}")
    for block_n, stages, warps in ((64, 3, 4), (64, 4, 4), (128, 3, 4), (32, 4, 4), (64, 3, 8), (128, 2, 8)):
        if not left(budget):
            break
        da.triton_decode(q, k, v, ws, block_n=block_n, num_stages=stages, num_warps=warps)
        t = ms(lambda b=block_n, s=stages, w=warps: da.triton_decode(q, k, v, ws, b, s, w))
        print(f"{tag} triton BLOCK_N={block_n} stages={stages} warps={warps} {t:.4f} ms {nbytes / t / 1e9:.2f} TB/s")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=float, default=100.0, help="seconds before sections are skipped")
    # The GEMM sweep lives in gelu_linear_sweep.py, beside the kernel it tunes.
    parser.add_argument("--sections", default="sass,decode", help="comma-separated: sass, decode")
    args = parser.parse_args()
    sections = args.sections.split(",")
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__)
    if "sass" in sections:
        sass_section()
    if "decode" in sections:
        decode_section(args.budget)
    print(f"done in {time.time() - START:.0f} s")


if __name__ == "__main__":
    main()
