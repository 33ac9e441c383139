"""Device-side tuning sweep for the rope and kv_cache Triton kernels (bf16, large sizes).

Run after `rooflint bench rope kv_cache --size large --dtype bf16` in the same session, so the
sweep's numbers sit beside the bench rows: python3 scripts/dev/rope_kv.py
Times with triton.testing.do_bench (L2 flushed, median) and prints one line per configuration.
"""

from __future__ import annotations

import torch
import triton

from rooflint.core.registry import get_family


def bench(fn):
    return triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")


def line(name, ms, nbytes):
    print(f"{name:48s} {ms:8.4f} ms {nbytes / ms / 1e6:8.1f} GB/s", flush=True)


def copy_ceiling():
    src = torch.randn(1 << 29, device="cuda").to(torch.bfloat16)
    dst = torch.empty_like(src)
    line("copy 2^29 bf16 (read + write)", bench(lambda: dst.copy_(src)), 2 * src.numel() * 2)


def kv_sweep():
    family = get_family("kv_cache")
    for params in family.sizes["large"]:
        kv_case(family, params)
        torch.cuda.empty_cache()  # the next op builds its own 4 GB of pools


def kv_case(family, params):
    from rooflint.kernels.kv_cache import BLOCK_SIZE, _dims, triton_kv_copy

    case = family.build_case("large", params, "bf16", torch.device("cuda"))
    _, _, tokens, row = _dims(params)
    nbytes = family.cost(params, "bf16").bytes
    scatter = params["op"] == "append"
    if scatter:
        k_src, v_src, index = case["k_new"], case["v_new"], case["slots"]
        k_dst, v_dst = case["k_pool"], case["v_pool"]
    else:
        k_src, v_src, index = case["k_pool"], case["v_pool"], case["block_table"]
        shape = (params["seqs"], params["pages_per_seq"] * BLOCK_SIZE, params["heads"], params["head_dim"])
        k_dst = torch.empty(shape, dtype=torch.bfloat16, device="cuda")
        v_dst = torch.empty(shape, dtype=torch.bfloat16, device="cuda")
    for block in (1024, 2048, 4096):
        for warps in (4, 8, 16):
            if block // (32 * warps) < 8:  # fewer than one 16-byte vector per thread
                continue
            ms = bench(
                lambda b=block, w=warps: triton_kv_copy(
                    k_src, v_src, k_dst, v_dst, index, tokens, row, scatter, block=b, num_warps=w
                )
            )
            line(f"kv {params['op']} triton block={block} warps={warps}", ms, nbytes)


def rope_sweep():
    from rooflint.kernels.rope import triton_rope

    family = get_family("rope")
    params = family.sizes["large"][0]
    case = family.build_case("large", params, "bf16", torch.device("cuda"))
    q, k, cos, sin = case["q"], case["k"], case["cos"], case["sin"]
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    nbytes = family.cost(params, "bf16").bytes
    for fused in (False, True):
        for tile in (1024, 2048, 4096):
            for warps in (2, 4, 8):
                ms = bench(
                    lambda t=tile, w=warps, f=fused: triton_rope(q, k, cos, sin, q_out, k_out, f, tile=t, num_warps=w)
                )
                line(f"rope {'fused' if fused else 'table'} triton tile={tile} warps={warps}", ms, nbytes)


if __name__ == "__main__":
    print(torch.cuda.get_device_name(), torch.__version__, triton.__version__, flush=True)
    copy_ceiling()
    kv_sweep()
    rope_sweep()
