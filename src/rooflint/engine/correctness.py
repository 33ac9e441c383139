"""The correctness gate: every variant is compared with the float64 reference before it is timed."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch


def tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for item in value for t in tensors(item)]
    raise TypeError(f"a variant must return a tensor or a tuple of tensors, not {type(value).__name__}")


def relative_error(output: Any, reference: Any) -> float:
    """Norm-wise ||out - ref|| / ||ref||, the worst over a tuple of outputs; NaN or Inf gives inf.

    Norm-wise rather than element-wise because a few outputs near zero make element-wise
    relative error meaningless, while the norm still catches any wrong or unwritten block.
    """
    outs, refs = tensors(output), tensors(reference)
    if len(outs) != len(refs):
        raise ValueError(f"variant returned {len(outs)} tensors, reference has {len(refs)}")
    worst = 0.0
    for out, ref in zip(outs, refs):
        if tuple(out.shape) != tuple(ref.shape):
            raise ValueError(f"output shape {tuple(out.shape)} differs from reference {tuple(ref.shape)}")
        out64 = out.detach().to(device=ref.device, dtype=torch.float64)
        if not bool(torch.isfinite(out64).all()):
            return math.inf
        ref64 = ref.to(torch.float64)
        denominator = torch.linalg.vector_norm(ref64).item()
        numerator = torch.linalg.vector_norm(out64 - ref64).item()
        error = numerator / denominator if denominator > 0 else numerator
        worst = max(worst, error)
    return worst


@dataclass(frozen=True)
class Verdict:
    passed: bool
    error: float
    tolerance: float

    @property
    def message(self) -> str:
        return f"relative error {self.error:.3g} exceeds tolerance {self.tolerance:.3g}"


def check(family, dtype: str, output: Any, reference: Any) -> Verdict:
    if family.compare is not None:
        output, reference = family.compare(output, reference)
    error = relative_error(output, reference)
    tolerance = family.tolerances[dtype]
    return Verdict(error <= tolerance, error, tolerance)
