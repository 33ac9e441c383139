"""Where a GEMM's gap to cuBLASLt lives: `cuda_hopper` (one tile per CTA), `triton` (persistent) and
cuBLASLt's fused bias+GELU (`eager`) at 8192^3 and at K = 32768, where each tile's fixed costs (the
pipeline fill, the epilogue, a CTA's launch) weigh a quarter as much against its main loop. Checked
against float64 at 8192^3, then the bench's own timer in 5 alternating rounds (median printed).

    python3 scripts/device/gemm_long_k.py
"""

from __future__ import annotations

import sys
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).parent))

import torch  # noqa: E402
from side_by_side import bench_timer_ms, check_entries, time_rounds  # noqa: E402

from rooflint.core.registry import get_family  # noqa: E402


def main() -> None:
    family = get_family("gelu_linear")
    for params in ({"m": 8192, "k": 8192, "n": 8192}, {"m": 8192, "k": 32768, "n": 8192}):
        case = family.build_case("custom", params, "bf16", torch.device("cuda"))
        entries = {name: family.variants[name].build(case) for name in ("eager", "triton", "cuda_hopper")}
        if params["k"] == 8192:  # the float64 reference of the long-K shape would cost more than the timing
            print(check_entries(family, "bf16", entries, family.reference(case.inputs, params)))
        times = {name: median(ms) for name, ms in time_rounds(entries, 5, timer=bench_timer_ms).items()}
        print(params, {name: f"{ms:.4f} ms {times['eager'] / ms:.3f}x" for name, ms in times.items()}, flush=True)


if __name__ == "__main__":
    main()
