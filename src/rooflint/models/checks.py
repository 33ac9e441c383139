"""Correctness of a kernel set inside the model, against Hugging Face's eager model.

Two checks, both before anything is timed:
- logits: the prefill logits' norm-wise relative error. An fp32 run is compared with HF in fp32,
  within a tolerance. A reduced-precision run (fp16/bf16) is compared with HF evaluated in fp32 on
  the same weights (the exact answer, up to fp32 rounding), and must be no further from it than
  HF's own run in that dtype: error <= max(tolerance, REFERENCE_MARGIN x HF's error). HF's own
  bf16 run is no reference for a bf16 run: each drifts from the exact answer by its own rounding,
  and over 32 layers of a 4096-wide model they drift 0.09 apart while each is as close to fp32.
- greedy tokens: the first CHECK_TOKENS generated tokens against HF's greedy choice in the run's
  dtype. In fp32 they must all match; in fp16/bf16 one rounding difference at a near-tie changes
  every later token, so the match rate is reported and does not gate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

CHECK_TOKENS = 32
# Norm-wise relative error of the logits after the whole network: rounding compounds over the
# layers, so these sit above a single kernel's tolerances. In fp16/bf16 they are the floor of the
# gate, which otherwise follows HF's own distance from fp32. Measured (GPT-2 124M, random
# weights): eager vs HF eager ~1e-6 fp32, ~1e-2 bf16.
MODEL_TOLERANCES = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 5e-2}
# A reduced-precision set may sit this much further from fp32 than HF in the same dtype: the two
# round different sums in different orders, so their distances differ by a few percent.
REFERENCE_MARGIN = 1.25


@dataclass
class Reference:
    """What every kernel set of a run is checked against."""

    logits: torch.Tensor  # HF's prefill logits: in fp32 where hf_error is set, else in the run's dtype
    tokens: torch.Tensor  # HF's greedy tokens in the run's dtype
    hf_error: float | None = None  # HF in the run's dtype against ``logits``; None: ``logits`` are HF's own
    layers: int | None = None  # the fp32 reference is the first ``layers`` layers (memory); None: all
    total_layers: int = 0
    note: str = ""  # why a reduced-precision run has no fp32 reference


@dataclass
class CheckResult:
    rel_error: float
    tolerance: float  # the gate: fp32, the dtype's tolerance; fp16/bf16, gate() of HF's error
    token_matches: int
    tokens_compared: int
    gating_tokens: bool  # fp32: every token must match
    dtype: str = "fp32"
    hf_error: float | None = None  # HF in ``dtype`` against the fp32 reference
    layers: int | None = None  # the logits compared are of the first ``layers`` of ``total_layers``
    total_layers: int = 0
    note: str = ""

    @property
    def logits_ok(self) -> bool:
        return self.rel_error <= self.tolerance

    @property
    def tokens_ok(self) -> bool:
        return not self.gating_tokens or self.token_matches == self.tokens_compared

    @property
    def passed(self) -> bool:
        return self.logits_ok and self.tokens_ok

    @property
    def match_rate(self) -> float:
        return self.token_matches / self.tokens_compared if self.tokens_compared else math.nan

    def describe(self) -> str:
        if self.hf_error is None:
            text = f"logits rel err {self.rel_error:.3g} (tol {self.tolerance:g})"
        else:
            scope = f" on the first {self.layers} of {self.total_layers} layers" if self.layers is not None else ""
            text = (f"logits rel err {self.rel_error:.3g} vs fp32{scope} "
                    f"(HF {self.dtype}: {self.hf_error:.3g}; gate {self.tolerance:.3g})")  # fmt: skip
        if self.note:
            text += f" ({self.note})"
        if self.tokens_compared:
            text += f"; greedy tokens match HF {self.token_matches}/{self.tokens_compared}"
        if not self.logits_ok:
            text += (f": logits further from fp32 than HF {self.dtype}'s" if self.hf_error is not None
                     else ": logits differ from HF eager")  # fmt: skip
        elif not self.tokens_ok:
            text += ": fp32 greedy tokens differ from HF"
        return text


def relative_error(output: torch.Tensor, reference: torch.Tensor) -> float:
    """||out - ref|| / ||ref|| in float64, one batch row at a time (full logits are GBs in float64)."""
    num = den = 0.0
    for out_row, ref_row in zip(output, reference):
        out64, ref64 = out_row.double(), ref_row.double()
        if not bool(torch.isfinite(out64).all()):
            return math.inf
        num += float(torch.linalg.vector_norm(out64 - ref64)) ** 2
        den += float(torch.linalg.vector_norm(ref64)) ** 2
    return math.sqrt(num / den) if den > 0 else math.sqrt(num)


@torch.no_grad()
def hf_logits(hf, ids: torch.Tensor) -> torch.Tensor:
    return hf(input_ids=ids, use_cache=False).logits


@torch.no_grad()
def hf_greedy(hf, prompt: torch.Tensor, steps: int) -> torch.Tensor:
    """HF's greedy tokens [B, steps], each from a full forward over the sequence so far.

    Recomputing instead of using HF's cache keeps the reference free of any cache code path (and
    of its API, which changed between transformers 4 and 5).
    """
    ids = prompt
    chosen = []
    for _ in range(steps):
        token = hf(input_ids=ids, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
        chosen.append(token)
        ids = torch.cat([ids, token], dim=1)
    return torch.cat(chosen, dim=1) if chosen else prompt[:, :0]


def gate(dtype: str, hf_error: float | None) -> float:
    """The largest error a set may have: the dtype's tolerance, or HF's own distance from fp32 with
    REFERENCE_MARGIN where that is larger."""
    floor = MODEL_TOLERANCES[dtype]
    return floor if hf_error is None else max(floor, REFERENCE_MARGIN * hf_error)


def compare(logits: torch.Tensor, tokens: torch.Tensor, reference: Reference, dtype: str) -> CheckResult:
    """A set's prefill logits and greedy tokens against ``reference`` (its logits of the same layers)."""
    n = reference.tokens.shape[1]
    matches = int((tokens[:, :n] == reference.tokens).sum())
    return CheckResult(
        rel_error=relative_error(logits, reference.logits),
        tolerance=gate(dtype, reference.hf_error),
        token_matches=matches,
        tokens_compared=reference.tokens.numel(),
        gating_tokens=dtype == "fp32",
        dtype=dtype,
        hf_error=reference.hf_error,
        layers=reference.layers,
        total_layers=reference.total_layers,
        note=reference.note,
    )
