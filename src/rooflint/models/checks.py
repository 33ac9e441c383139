"""Correctness of a kernel set inside the model, against Hugging Face's eager model.

Two checks, both before anything is timed:
- logits: the prefill logits against HF eager attention's, norm-wise relative error within a
  per-dtype tolerance;
- greedy tokens: the first CHECK_TOKENS generated tokens against HF's greedy choice. In fp32 they
  must all match; in fp16/bf16 one rounding difference at a near-tie changes every later token,
  so the match rate is reported and does not gate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

CHECK_TOKENS = 32
# Norm-wise relative error of the logits against HF eager in the same dtype, after the whole
# network: rounding compounds over the layers, so these sit above a single kernel's tolerances.
# Measured (GPT-2 124M, random weights): eager vs HF eager ~1e-6 fp32, ~1e-2 bf16.
MODEL_TOLERANCES = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 5e-2}


@dataclass
class CheckResult:
    rel_error: float
    tolerance: float
    token_matches: int
    tokens_compared: int
    gating_tokens: bool  # fp32: every token must match

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
        text = f"logits rel err {self.rel_error:.3g} (tol {self.tolerance:g})"
        if self.tokens_compared:
            text += f"; greedy tokens match HF {self.token_matches}/{self.tokens_compared}"
        if not self.logits_ok:
            text += ": logits differ from HF eager"
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


def compare(
    logits: torch.Tensor, reference_logits: torch.Tensor, tokens: torch.Tensor, reference_tokens: torch.Tensor, dtype
) -> CheckResult:
    n = reference_tokens.shape[1]
    matches = int((tokens[:, :n] == reference_tokens).sum())
    return CheckResult(
        rel_error=relative_error(logits, reference_logits),
        tolerance=MODEL_TOLERANCES[dtype],
        token_matches=matches,
        tokens_compared=reference_tokens.numel(),
        gating_tokens=dtype == "fp32",
    )
