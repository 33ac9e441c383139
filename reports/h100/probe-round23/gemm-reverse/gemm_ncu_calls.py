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
