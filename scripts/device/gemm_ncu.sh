#!/usr/bin/env bash
# Nsight Compute (--set full) on the 8192^3 GEMMs side by side (issue 14, round 19): cuBLASLt's fused
# bias+GELU kernel (`eager`), the wave-fitted Triton tile (as `triton_wavefit` builds it) and the
# CUDA kernel with 1x2 multicast clusters. Round 19's call also profiled the tile with its tail wave
# cut along K (c206fae). One profiled call each, after two warm-up calls, inside
# an NVTX range `gemm` (the report's rows keep the order of the entries); --clock-control none (ncu would otherwise lock the clocks).
# Writes gemm-ncu-details.csv (ncu --page details) and gemm-ncu-raw.csv (every metric, base units).
#   OUT=dir bash scripts/device/gemm_ncu.sh
set -u
OUT=${OUT:?set OUT to the output directory}
python3 -m pip install -q --no-deps --no-build-isolation . >"$OUT/install.log" 2>&1 || echo "install failed"
cat >"$OUT/gemm_ncu_calls.py" <<'PY'
import torch

from rooflint.core.registry import get_family
from rooflint.engine import cuda_build
from rooflint.kernels import _gemm_small as gs
from rooflint.kernels import gelu_linear

family = get_family("gelu_linear")
case = family.build_case("custom", {"m": 8192, "k": 8192, "n": 8192}, "bf16", torch.device("cuda"), seed=11)
x, w, b = case["x"], case["w"], case["b"]
library = cuda_build.load(cuda_build.family_source(gelu_linear.__file__, "gelu_linear_hopper"))
out = torch.empty((8192, 8192), dtype=x.dtype, device="cuda")
calls = {
    "cublaslt": family.variants["eager"].build(case),
    "wavefit": gs.prepare(x, w, b, tile=gs.TILES[0]),
    "cuda_hopper-cluster2": lambda: gelu_linear.cuda_hopper_gelu_linear(library, x, w, b, out, 256, 2),
}
for name, call in calls.items():
    call(), call()
    torch.cuda.synchronize()
    print(name, flush=True)
    torch.cuda.nvtx.range_push("gemm")
    call()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
PY
timeout 400 ncu --nvtx --nvtx-include "gemm/" --clock-control none --set full \
  --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum,lts__t_sectors_srcunit_tex_op_read.sum \
  -o "$OUT/gemm-ncu" -f python3 "$OUT/gemm_ncu_calls.py" >"$OUT/gemm-ncu.log" 2>&1
echo "ncu exit $?"
ncu -i "$OUT/gemm-ncu.ncu-rep" --page details --csv >"$OUT/gemm-ncu-details.csv" 2>/dev/null
ncu -i "$OUT/gemm-ncu.ncu-rep" --page raw --csv --print-units base >"$OUT/gemm-ncu-raw.csv" 2>/dev/null
gzip -f "$OUT/gemm-ncu.ncu-rep"
ls -la "$OUT"
