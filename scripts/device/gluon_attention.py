"""The Gluon attention (`triton_gluon`, rooflint.kernels._attention_gluon) beside cuDNN and
`triton_hopper` at the D=128 shapes of `bench attention --size large`, after float64 checks at
ragged N (both masks, fp16 and bf16) and a repeatability check (20 calls, identical bits).

Gluon has no CPU interpreter: these checks and the GPU tier are its numerical tests. Round 12's two
lockstep versions (both consumer warpgroups meeting at a CTA barrier every tile; 0.78-0.88x cuDNN),
measured with this script beside the warp-specialized kernel, are in its history at commit cb648f5
(reports/h100/probe-round12).

    python3 scripts/device/gluon_attention.py            # on the GPU; writes gluon.csv under $OUT
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path

import torch

from rooflint.kernels import _attention_gluon


def main() -> None:
    import functools
    import sys

    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from side_by_side import time_rounds, write_rows

    from rooflint.core.registry import get_family
    from rooflint.engine.correctness import check
    from rooflint.kernels import _attention_hopper as ah

    out_dir = Path(os.environ.get("OUT", "/tmp/gluon-attention"))
    out_dir.mkdir(parents=True, exist_ok=True)
    family = get_family("attention")
    rows = []
    for n, causal, dtype in ((777, False, "bf16"), (777, True, "bf16"), (1024, True, "fp16"), (130, False, "fp16")):
        params = {"B": 2, "H": 3, "N": n, "D": 128, "causal": causal}
        case = family.build_case("custom", params, dtype, torch.device("cuda"), seed=n)
        out = _attention_gluon.prepare(case["q"], case["k"], case["v"], causal)()
        verdict = check(family, dtype, out, family.reference(case.inputs, params))
        status = "ok" if verdict.passed else verdict.message
        name = f"check N={n} causal={causal} {dtype}"
        rows.append({"shape": name, "status": status, "rel_err": verdict.error})
        print(rows[-1], flush=True)
        if not verdict.passed:
            write_rows(out_dir / "gluon.csv", rows)
            raise SystemExit(f"gluon attention wrong: {name}: {verdict.message}")
    # 20 calls, identical bits: no consumer reads a stage the producer is refilling.
    params = {"B": 4, "H": 8, "N": 2048, "D": 128, "causal": False}
    case = family.build_case("custom", params, "bf16", torch.device("cuda"), seed=5)
    run = _attention_gluon.prepare(case["q"], case["k"], case["v"], False)
    first = run().clone()
    same = all(torch.equal(run(), first) for _ in range(20))
    rows.append({"shape": "repeatable over 20 calls", "status": "ok" if same else "differs"})
    print(rows[-1], flush=True)
    for b, h, n, causal in ((4, 32, 4096, False), (4, 32, 4096, True), (1, 32, 16384, True)):
        q, k, v = (torch.randn(b, h, n, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        entries = {
            "cudnn": functools.partial(F.scaled_dot_product_attention, q, k, v, is_causal=causal),
            "triton_hopper": ah.prepare(q, k, v, causal),
            "gluon": _attention_gluon.prepare(q, k, v, causal),
        }
        times = time_rounds(entries, 5, lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION))
        flops = 4 * b * h * n * n * 128 / (2 if causal else 1)
        med = {key: statistics.median(value) for key, value in times.items()}
        row = {"shape": f"B{b} H{h} N{n} D128" + (" causal" if causal else ""), "status": "ok"}
        for key, ms in med.items():
            row[f"{key}_tflops"] = flops / ms / 1e9
        row["gluon_x_cudnn"] = med["cudnn"] / med["gluon"]
        row["triton_hopper_x_cudnn"] = med["cudnn"] / med["triton_hopper"]
        rows.append(row)
        print(row, flush=True)
    write_rows(out_dir / "gluon.csv", rows)


if __name__ == "__main__":
    main()
