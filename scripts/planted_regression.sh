#!/usr/bin/env bash
# The red build, shown on two CSVs: NEW is BASE with one variant made 20% slower.
#
#   scripts/planted_regression.sh                      # BASE synthesized: H100-like rows, 1% spread
#   scripts/planted_regression.sh reports/x.csv triton # BASE is a real results file; plant in `triton`
#
# Expected: `rooflint compare` prints a FAIL table with the planted rows marked slower and exits 1.
set -u
base_in=${1:-}
variant=${2:-triton}
work=$(mktemp -d)

python3 - "$work" "$base_in" "$variant" <<'EOF'
import sys
from pathlib import Path

from rooflint.core.family import Cost
from rooflint.outputs.merge import write_frame
from rooflint.outputs.results import ResultWriter, ResultRow, read_results
from rooflint.core.roofline import analyse
from rooflint.core.specs import get_spec

work, base_in, variant = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
if base_in:
    base = read_results(base_in)
else:
    # Two families on an H100 at the large size, timed with a 1% p20-p80 spread as a quiet GPU gives.
    h100 = get_spec("h100_sxm")
    n, m, k = 1 << 28, 4096, 8192
    cases = [
        ("vector_add", f"n={n}", Cost(cuda_flops=n, bytes=3 * n * 2), {"eager": 0.560, "triton": 0.548}),
        ("softmax", f"M={m},N={k}", Cost(cuda_flops=5 * m * k, bytes=4 * m * k), {"eager": 0.061, "triton": 0.047}),
    ]
    writer = ResultWriter(work / "synth")
    for family, shape, cost, times in cases:
        for name, ms in times.items():
            point = analyse(cost, ms / 1e3, h100, "bf16")
            writer.append(ResultRow(
                family=family, variant=name, kind=name, dtype="bf16", size="large", shape=shape, status="ok",
                n_samples=100, median_ms=ms, p20_ms=ms * 0.99, p80_ms=ms * 1.01, tensor_flops=0.0,
                cuda_flops=cost.cuda_flops, ideal_bytes=cost.bytes, gpu="h100_sxm",
                achieved_tflops=point.achieved_tflops, achieved_gbps=point.achieved_gbps,
                ai_flop_per_byte=point.ai_flop_per_byte, pct_of_roof=point.pct_of_roof, bound=point.bound,
                timestamp="2026-11-22T09:00:00+00:00",
            ))
    writer.close()
    base = read_results(writer.csv_path)
write_frame(base, work / "base.csv")
new = base.copy()
planted = new["variant"] == variant
if not planted.any():
    sys.exit(f"no rows of variant {variant!r} in the base file")
for column in ("median_ms", "p20_ms", "p80_ms"):  # 20% more time per call
    new.loc[planted, column] *= 1.2
for column in ("achieved_tflops", "achieved_gbps", "pct_of_roof", "speedup_vs_eager"):
    new.loc[planted, column] /= 1.2
write_frame(new, work / "new.csv")
print(f"planted a 20% slowdown in {int(planted.sum())} '{variant}' rows: {work}/base.csv -> {work}/new.csv")
EOF
[ -f "$work/new.csv" ] || exit 2

echo "\$ rooflint compare base.csv new.csv --threshold 5%"
(cd "$work" && rooflint compare base.csv new.csv --threshold 5% --out diff.md)
rc=$?
echo "exit code: $rc (1 = regression: the CI job goes red)"
exit "$rc"
