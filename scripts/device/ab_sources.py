"""A CUDA kernel's new source against an older one, timed side by side in one process.

For each FAMILY:VARIANT given, the variant is built twice: from the working tree and from the
.cu files under --old (a kernels folder exported from an earlier commit), beside the named peer
variants. Every build is checked against float64 first; then alternating rounds of
triton.testing.do_bench time them all, so a drifting clock spreads over every entry. Writes
ab.csv under $OUT.

    python3 scripts/device/ab_sources.py --old build/ab-old \\
        decode_attention:cuda:eager,triton_paged gelu_linear:cuda_hopper:eager,triton_wavefit
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
from pathlib import Path

import torch
from side_by_side import check_entries, time_rounds, write_csv

from rooflint.core.registry import get_family
from rooflint.engine import cuda_build


@contextlib.contextmanager
def sources_from(folder: Path | None):
    """Variants built inside this block load their .cu from ``folder`` (None: the working tree)."""
    original = cuda_build.family_source
    if folder is not None:
        cuda_build.family_source = lambda module_file, name=None: folder / f"{name or Path(module_file).stem}.cu"
    try:
        yield
    finally:
        cuda_build.family_source = original


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--old", type=Path, required=True, help="folder holding the older .cu files")
    parser.add_argument("--size", default="large")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("specs", nargs="+", help="FAMILY:VARIANT[:PEER,PEER...]")
    args = parser.parse_args()
    out_dir = Path(os.environ.get("OUT", "/tmp/ab"))
    out_dir.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda")
    rows = []
    for spec in args.specs:
        family_name, variant_name, *rest = spec.split(":")
        peers = rest[0].split(",") if rest else []
        family = get_family(family_name)
        for _, params in family.cases(args.size):
            case = family.build_case(args.size, params, "bf16", device, seed=0)
            reference = family.reference(case.inputs, params)
            entries = {}
            for peer in peers:
                entries[peer] = family.variants[peer].build(case)
            with sources_from(args.old):
                entries[f"{variant_name}@old"] = family.variants[variant_name].build(case)
            entries[f"{variant_name}@new"] = family.variants[variant_name].build(case)
            verdicts = check_entries(family, "bf16", entries, reference, f"{family_name} {params}")
            del reference
            times = time_rounds(entries, args.rounds)
            cost = case.cost
            for label in entries:
                ms = statistics.median(times[label])
                rows.append(
                    {
                        "family": family_name,
                        "shape": case.shape,
                        "entry": label,
                        "ms": ms,
                        "spread": (max(times[label]) - min(times[label])) / ms,
                        "gbps": cost.bytes / ms / 1e6,
                        "tflops": cost.flops / ms / 1e9,
                        "check": verdicts[label],
                    }
                )
                print(rows[-1], flush=True)
            del entries, case
            torch.cuda.empty_cache()
    write_csv(out_dir / "ab.csv", rows)


if __name__ == "__main__":
    main()
