#!/usr/bin/env bash
# Nsight Compute on the 8192^3 GEMMs side by side (issue 14, rounds 19 and 23). The entries are
# gemm_energy.py's, by label: cuBLASLt's fused bias+GELU kernel always, then those whose label
# contains one of MATCH's comma-separated parts (default: round 19's wave-fitted Triton tile and the
# CUDA kernel with 1x2 multicast clusters). One profiled call each, after two warm-up calls, inside
# an NVTX range `gemm` (the report's rows keep the order of the entries); --clock-control none (ncu
# would otherwise lock the clocks). SET=full (default) collects every section; SET=dram only the
# DRAM and L2 counters and the duration, in seconds rather than minutes.
# Writes gemm-ncu-details.csv (ncu --page details) and gemm-ncu-raw.csv (every metric, base units).
#   OUT=dir [MATCH='triton_wavefit,cluster 2'] [SET=full|dram] bash scripts/device/gemm_ncu.sh
set -u
OUT=${OUT:?set OUT to the output directory}
MATCH=${MATCH:-triton_wavefit,cuda_hopper cluster 2}
SET=${SET:-full}
python3 -m pip install -q --no-deps --no-build-isolation . >"$OUT/install.log" 2>&1 || echo "install failed"
cat >"$OUT/gemm_ncu_calls.py" <<'PY'
import os
import sys

import torch

sys.path.insert(0, "scripts/device")
from gemm_energy import SHAPE, entries  # noqa: E402

from rooflint.core.registry import get_family  # noqa: E402

family = get_family("gelu_linear")
case = family.build_case("custom", SHAPE, "bf16", torch.device("cuda"), seed=11)
wanted = os.environ["MATCH"].split(",")
for name, make in entries(family).items():
    if not (name.startswith("cublas") or any(part in name for part in wanted)):
        continue
    call = make(case)
    call(), call()
    torch.cuda.synchronize()
    print(name, flush=True)
    torch.cuda.nvtx.range_push("gemm")
    call()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
PY
metrics=dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum,lts__t_sectors_srcunit_tex_op_read.sum
if [ "$SET" = dram ]; then
  sections=(--metrics "$metrics,lts__t_sector_op_read_hit_rate.pct,sm__cycles_elapsed.avg.per_second")
else
  sections=(--set full --metrics "$metrics")
fi
MATCH=$MATCH timeout 400 ncu --nvtx --nvtx-include "gemm/" --clock-control none "${sections[@]}" \
  -o "$OUT/gemm-ncu" -f python3 "$OUT/gemm_ncu_calls.py" >"$OUT/gemm-ncu.log" 2>&1
echo "ncu exit $?"
ncu -i "$OUT/gemm-ncu.ncu-rep" --page details --csv >"$OUT/gemm-ncu-details.csv" 2>/dev/null
ncu -i "$OUT/gemm-ncu.ncu-rep" --page raw --csv --print-units base >"$OUT/gemm-ncu-raw.csv" 2>/dev/null
gzip -f "$OUT/gemm-ncu.ncu-rep"
ls -la "$OUT"
