"""Hugging Face transformers as users run it, measured in the same process as the kernel sets.

- hf_sdpa, hf_eager: ``model(input_ids)`` prefill with SDPA or eager attention;
- hf_compile: ``torch.compile(model)`` prefill, SDPA (GPU only: inductor on a CPU compiles for minutes);
- hf_generate: ``model.generate`` greedy, the prompt plus N new tokens; tok/s = B * N / the call's time.
Same weights, same inputs, same timers as the kernel sets (models/measure.py).
"""

from __future__ import annotations

import torch

from rooflint.models import measure
from rooflint.models.outcome import PhaseResult
from rooflint.models.rows import phase_floor, phase_of, total_cost


def set_attention(hf, implementation: str) -> None:
    if hasattr(hf, "set_attn_implementation"):  # transformers >= 4.48
        hf.set_attn_implementation(implementation)
    else:
        hf.config._attn_implementation = implementation


def run_baselines(
    loaded, request, device, gpu_spec, ids, prompt, log, compiled: bool = False
) -> dict[str, PhaseResult]:
    """The quick baselines (SDPA, eager, generate), or with ``compiled`` the torch.compile one."""
    hf, dims, dtype = loaded.hf, loaded.dims, request.dtype
    batch, new = request.batch, request.new_tokens
    prefill = phase_of("prefill", request)
    costs = loaded.spec.op_costs(dims, prefill, dtype)
    floor = phase_floor(total_cost(costs), gpu_spec, dtype)
    results: dict[str, PhaseResult] = {}

    def prefill_result(fn) -> PhaseResult:
        with torch.no_grad():
            fn()  # compile / warm outside the timer
            timed = measure.time_prefill(fn, device, gpu_spec.l2_bytes, request.rep_ms)
        return PhaseResult(prefill, timed, batch * request.seq, costs, None, *floor)

    try:
        if compiled:
            if device.type == "cuda":
                log("HF + torch.compile prefill (compiling)")
                set_attention(hf, "sdpa")
                model = torch.compile(hf)
                results["hf_compile"] = prefill_result(lambda: model(input_ids=ids))
            return results
        for implementation in ("sdpa", "eager"):
            log(f"HF {implementation} prefill")
            set_attention(hf, implementation)
            results[f"hf_{implementation}"] = prefill_result(lambda: hf(input_ids=ids))

        set_attention(hf, "sdpa")
        log("HF generate")
        mask = torch.ones_like(prompt)

        def generate() -> None:
            with torch.no_grad():
                hf.generate(input_ids=prompt, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
                            do_sample=False, pad_token_id=dims.vocab - 1)  # fmt: skip

        timed, _ = measure.time_generation(generate, lambda: None, 0, device, request.rep_ms)
        results["hf_generate"] = PhaseResult(phase_of("generate", request), timed, batch * new, {})
    finally:
        set_attention(hf, "eager")
    return results
