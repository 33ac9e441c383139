"""The Gluon attention (`triton_gluon`, rooflint.kernels._attention_gluon) beside cuDNN and
`triton_hopper` at the shapes of `bench attention --size large` (D = 64, 128, 256; N = 4096, and
16384 causal), after float64 checks at ragged N (both masks, fp16 and bf16) and a repeatability
check (20 calls, identical bits). Each head dim is timed with its TILES entry and with the other
key tiles and ring depths that fit in shared memory (CANDIDATES), so the choice in TILES is measured.

Gluon has no CPU interpreter: these checks and the GPU tier are its numerical tests. Round 12's two
lockstep versions (both consumer warpgroups meeting at a CTA barrier every tile; 0.78-0.88x cuDNN),
measured with this script beside the warp-specialized kernel, are in its history at commit cb648f5
(reports/h100/probe-round12).

    python3 scripts/device/gluon_attention.py            # on the GPU; writes gluon.csv under $OUT
"""

from __future__ import annotations

import statistics
from pathlib import Path

import torch

from rooflint.kernels import _attention_gluon

# Other key tiles and ring depths that fit in shared memory (tests/fixtures' compile reports them).
T = _attention_gluon.Tiles
CANDIDATES = {
    # Three 64-row consumers (192 query rows), as FA3 at D=64: with 128-key tiles a consumer needs
    # ~168 registers and 3 x 128 x 168 overflows the 64K register file (ptxas spills); with 64-key
    # tiles 160 suffice.
    64: (T(128, 3), T(64, 3, consumers=3, consumer_regs=160, producer_regs=24),
         T(64, 4, consumers=3, consumer_regs=160, producer_regs=24),
         T(128, 2, consumers=3, consumer_regs=168, producer_regs=24)),
    128: (T(64, 2, consumers=3, consumer_regs=160, producer_regs=24),
          T(64, 3, consumers=3, consumer_regs=160, producer_regs=24)),
}  # fmt: skip
CHECKS = ((777, False, "bf16"), (777, True, "bf16"), (1024, True, "fp16"), (130, False, "fp16"), (64, True, "bf16"))
SHAPES = (  # (B, H, N, D, causal): bench attention --size large
    (4, 32, 4096, 128, False), (4, 32, 4096, 128, True), (4, 64, 4096, 64, False), (4, 64, 4096, 64, True),
    (4, 16, 4096, 256, False), (4, 16, 4096, 256, True), (1, 32, 16384, 128, True),
)  # fmt: skip


def main() -> None:
    import functools
    import sys

    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from side_by_side import check_row, output_csv, repeat_row, time_rounds, write_rows

    from rooflint.core.registry import get_family
    from rooflint.kernels import _attention_hopper as ah

    family = get_family("attention")
    rows, csv_path = [], output_csv("gluon.csv")
    tiles_by_dim = {d: [tiles, *CANDIDATES.get(d, ())] for d, tiles in _attention_gluon.TILES.items()}
    for d, candidates in tiles_by_dim.items():
        for tiles in candidates:
            for n, causal, dtype in CHECKS:
                params = {"B": 2, "H": 3, "N": n, "D": d, "causal": causal}

                def attend(case, causal=causal, tiles=tiles):
                    return _attention_gluon.prepare(case["q"], case["k"], case["v"], causal, tiles)()

                name = f"check D={d} {tiles} N={n} causal={causal} {dtype}"
                check_row(family, params, dtype, attend, name, rows, csv_path, seed=n)
        # 20 calls, identical bits: no consumer reads a stage the producer is refilling.
        params = {"B": 4, "H": 8, "N": 2048, "D": d, "causal": True}
        case = family.build_case("custom", params, "bf16", torch.device("cuda"), seed=5)
        run = _attention_gluon.prepare(case["q"], case["k"], case["v"], True)
        repeat_row(run, 20, rows, csv_path, f"D={d} ")
    for b, h, n, d, causal in SHAPES:
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        entries = {
            "cudnn": functools.partial(F.scaled_dot_product_attention, q, k, v, is_causal=causal),
            "triton_hopper": ah.prepare(q, k, v, causal),
        }
        for tiles in tiles_by_dim[d]:
            entries[f"gluon {tiles}"] = _attention_gluon.prepare(q, k, v, causal, tiles)
        times = time_rounds(entries, 5, lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION))
        flops = 4 * b * h * n * n * d / (2 if causal else 1)
        med = {key: statistics.median(value) for key, value in times.items()}
        row = {"shape": f"B{b} H{h} N{n} D{d}" + (" causal" if causal else ""), "status": "ok"}
        for key, ms in med.items():
            row[f"{key}_tflops"] = flops / ms / 1e9
            row[f"{key}_x_cudnn"] = med["cudnn"] / ms
        rows.append(row)
        print(row, flush=True)
        write_rows(csv_path, rows)


if __name__ == "__main__":
    main()
