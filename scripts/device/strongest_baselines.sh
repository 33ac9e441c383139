#!/usr/bin/env bash
# Every PyTorch peer row on a GPU: each SDPA backend pinned, each torch.compile spelling (compile_unfused,
# compile_max, compile_builtin), at the large size, with the declared baseline first. From the checkout root:
#   bash scripts/device/strongest_baselines.sh                       # all eight families (about 6 min on an H100)
#   bash scripts/device/strongest_baselines.sh attention decode_attention   # or some of them
# Writes $OUT/strongest-baselines/results.csv and $OUT/strongest-baselines.md: per family and shape, the
# fastest eager-kind and compile-kind rows, and every row that did not come out ok (a skip says why).
set -u
. scripts/device_setup.sh
out=${OUT:-/tmp/rooflint-strongest}
mkdir -p "$out"
families=${*:-attention decode_attention softmax gelu gelu_linear layernorm layernorm_gelu layernorm_backward}
# shellcheck disable=SC2086
rooflint bench $families --size large -V eager,eager_unfused,compile --out "$out/strongest-baselines" \
  >"$out/strongest-baselines.log" 2>&1
code=$?
python3 - "$out" <<'PY'
import sys
from pathlib import Path

import pandas as pd

out = Path(sys.argv[1])
frame = pd.read_csv(out / "strongest-baselines" / "results.csv")
lines = ["| family | shape | dtype | baseline ms | fastest eager | fastest compile |", "|---|---|---|---|---|---|"]
ok = frame[frame.status == "ok"]
for (family, shape, dtype), group in ok.groupby(["family", "shape", "dtype"], sort=False):
    base = group[group.speedup_vs_eager == 1.0]
    cells = []
    for kind in ("eager", "compile"):
        rows = group[group.kind == kind].sort_values("median_ms")
        cells.append(f"{rows.iloc[0].variant} {rows.iloc[0].median_ms:.4g} ms" if len(rows) else "-")
    baseline = f"{base.median_ms.iloc[0]:.4g}" if len(base) else "-"
    lines.append(f"| {family} | {shape} | {dtype} | {baseline} | {cells[0]} | {cells[1]} |")
other = frame[frame.status != "ok"]
lines += ["", "Rows not ok:", ""]
lines += [f"- {r.family}/{r.variant} {r.shape}: {r.status}: {r.message}" for r in other.itertuples()] or ["- none"]
text = "\n".join(lines) + "\n"
(out / "strongest-baselines.md").write_text(text)
print(text)
PY
echo "bench exit $code"
exit $code
