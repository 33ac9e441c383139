"""Launch parameters of the memory-bound Triton and CUDA kernels, swept on one GPU (issue 14's "choose
launch parameters per GPU"): on the H200 most of these kernels miss 0.95x of the memory ceiling that
they reach on the H100, and the H200 needs ~1.48x the bytes in flight per SM (same 132 SMs, a
ceiling 1.48x higher). Each knob that sets how much a thread or a program keeps in flight (warps,
tile, rows in flight) is timed at the `--size large` shape in bf16 beside the kernel's default,
after a float64 check of every config. Timer: do_bench (L2 flushed), alternating rounds, so a
drifting clock spreads over all configs. Writes memory-knobs.csv under $OUT.

    python3 scripts/device/memory_knobs.py            # on the GPU
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import torch

ROUNDS = 5


def configs(family_name: str, case, kernels) -> dict:
    """label -> zero-argument call, the default first, for one family's large case."""
    gelu, kv_cache, layernorm = kernels["gelu"], kernels["kv_cache"], kernels["layernorm"]
    rope, softmax = kernels["rope"], kernels["softmax"]
    out: dict = {}
    if family_name == "softmax":
        x = case["x"]
        y = torch.empty_like(x)
        for warps in (None, 4, 8, 32):
            out[f"triton warps={warps or 'default'}"] = lambda w=warps: softmax.triton_softmax(x, y, num_warps=w)
        for threads in (0, 256, 512, 1024):
            out[f"cuda threads={threads or 'default'}"] = lambda t=threads: softmax.cuda_softmax(x, y, threads=t)
    elif family_name in ("layernorm", "layernorm_gelu"):
        g = family_name == "layernorm_gelu"
        x, w, b = case["x"].contiguous(), case["weight"], case["bias"]
        y = torch.empty_like(x)
        # layernorm also writes mean and rstd (its variants' outputs); layernorm_gelu writes y only.
        stats = () if g else tuple(torch.empty(x.shape[0], dtype=torch.float32, device=x.device) for _ in range(2))
        lib = kernels["cuda_build"].load(kernels["cuda_build"].family_source(layernorm.__file__))

        def outputs(y_out):
            return (y_out, *stats) if stats else y_out

        for warps in (None, 2, 4, 8, 16):
            out[f"triton warps={warps or 'default'}"] = lambda n=warps: outputs(
                layernorm.triton_layernorm(x, w, b, y, *stats, gelu=g, num_warps=n)
            )
        for threads in (0, 128, 256, 512, 1024):
            out[f"cuda threads={threads or 'default'}"] = lambda t=threads: outputs(
                layernorm.cuda_layernorm(lib, x, w, b, y, *stats, gelu=g, threads=t)
            )
    elif family_name == "gelu":
        x, bias, scale = case["x"], case["bias"], case["scale"]
        y = torch.empty_like(x)
        for block_r, block_c, warps in ((None, None, None), (16, 1024, 8), (16, 1024, 16), (4, 1024, 4), (8, 2048, 8)):
            label = f"triton tile={block_r}x{block_c} warps={warps}" if block_r else "triton default"
            out[label] = lambda r=block_r, c=block_c, n=warps: gelu.triton_gelu(x, bias, scale, y, r, c, n)
        for rows in (0, 2, 4, 8):  # 0: the default (one row)
            out[f"cuda rows_in_flight={rows or 'default'}"] = lambda r=rows: gelu.cuda_gelu(x, bias, scale, y, r)
    elif family_name == "rope":
        q, k, cos, sin = case["q"], case["k"], case["cos"], case["sin"]
        qo, ko = torch.empty_like(q), torch.empty_like(k)
        for fused in (True, False):
            form = "fused" if fused else "table"
            for tile, warps in ((None, None), (2048, 2), (2048, 4), (2048, 8), (4096, 8), (1024, 8)):
                label = f"triton_{form} tile={tile or 'default'} warps={warps or 'default'}"
                out[label] = lambda f=fused, t=tile, n=warps: rope.triton_rope(q, k, cos, sin, qo, ko, f, t, n)
    elif family_name == "kv_cache":
        _, _, tokens, row = kv_cache._dims(case.params)
        k_src, v_src, k_dst, v_dst, index, result = kv_cache._operands(case)
        scatter = case.params["op"] == "append"

        def copy(block, warps):
            kv_cache.triton_kv_copy(k_src, v_src, k_dst, v_dst, index, tokens, row, scatter, block, warps)
            return result

        for block, warps in ((4096, None), (4096, 16), (2048, 4), (1024, 4), (1024, 2)):
            out[f"triton block={block} warps={warps or 'default'}"] = lambda bl=block, n=warps: copy(bl, n)
    return out


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from side_by_side import output_csv, time_rounds, write_rows

    from rooflint.core.registry import get_family
    from rooflint.engine import cuda_build
    from rooflint.engine.ceilings import dram_copy_gbps
    from rooflint.engine.correctness import check
    from rooflint.kernels import gelu, kv_cache, layernorm, rope, softmax

    kernels = {"gelu": gelu, "kv_cache": kv_cache, "layernorm": layernorm, "rope": rope, "softmax": softmax,
               "cuda_build": cuda_build}  # fmt: skip
    rows, csv_path = [], output_csv("memory-knobs.csv")
    copy_gbps = dram_copy_gbps()  # the 1:1 kernels' own limit, as `rooflint ceilings` measures it
    rows.append({"family": "copy", "shape": "2 GiB", "config": "dram_copy_gbps", "gbps": round(copy_gbps, 1)})
    for family_name in ("softmax", "layernorm", "layernorm_gelu", "gelu", "rope", "kv_cache"):
        family = get_family(family_name)
        for size, params in family.cases("large"):
            case = family.build_case(size, params, "bf16", torch.device("cuda"))
            reference = family.reference(case.inputs, params)
            entries = {}
            for label, call in configs(family_name, case, kernels).items():
                try:
                    verdict = check(family, "bf16", call(), reference)
                    status = "ok" if verdict.passed else f"wrong: {verdict.message}"
                except Exception as error:  # a config this kernel refuses (say, too many threads)
                    status = f"failed: {type(error).__name__}: {str(error)[:120]}"
                if status == "ok":
                    entries[label] = call
                else:
                    rows.append({"family": family_name, "shape": case.shape, "config": label, "status": status})
            del reference
            times = time_rounds(entries, ROUNDS)
            defaults = {}
            for label in entries:
                ms = statistics.median(times[label])
                impl = label.split(" ")[0]
                defaults.setdefault(impl, ms)  # each implementation's default is its first entry
                rows.append({
                    "family": family_name, "shape": case.shape, "config": label, "status": "ok",
                    "us": round(ms * 1e3, 2), "gbps": round(case.cost.bytes / ms / 1e6, 1),
                    "of_copy": round(case.cost.bytes / ms / 1e6 / copy_gbps, 3),
                    "x_default": round(defaults[impl] / ms, 3),
                    "rounds_us": " ".join(f"{t * 1e3:.1f}" for t in times[label]),
                })  # fmt: skip
                print(rows[-1], flush=True)
            write_rows(csv_path, rows)
            del case, entries
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
