"""The decode paths people deploy, measured beside the kernel sets: HF's static cache with a
compiled, CUDA-graphed step, and a serving engine where one is installed.

hf_static_compile follows transformers' documented fast path: ``generate`` with
``cache_implementation="static"`` and a ``CompileConfig(mode="reduce-overhead")``. generate then
compiles the decoding forward itself and marks each step's start for the CUDA graph trees, so
no output of one replay is read after the next overwrote it (the naive form, a hand-compiled
``model.forward`` called in a loop that keeps the logits, raises "accessing tensor output of
CUDAGraphs that has been overwritten by a subsequent run"). Its decode step is
(generate(N) - generate(1)) / (N - 1): both calls prefill the same prompt, so the difference is
the N - 1 decode steps alone. transformers compiles only on a GPU, so a CPU run skips it.
"""

from __future__ import annotations

import importlib.util

import torch

from rooflint.engine.timing import summarize
from rooflint.models import measure
from rooflint.models.outcome import PhaseResult
from rooflint.models.rows import base_row, phase_floor, phase_of, total_cost
from rooflint.outputs.results import SKIPPED, ResultRow

SERVING_ENGINES = ("vllm", "sglang")


def hf_static_compiled(loaded, request, device, gpu_spec, prompt, log) -> dict[str, PhaseResult]:
    """{"hf_static_compile": its decode step}, on a GPU; {} elsewhere (skipped_peer_rows says why)."""
    if device.type != "cuda" or request.new_tokens < 2:
        return {}
    transformers = importlib.import_module("transformers")
    hf, new = loaded.hf, request.new_tokens
    hf.set_attn_implementation("sdpa") if hasattr(hf, "set_attn_implementation") else None
    mask = torch.ones_like(prompt)
    config = transformers.CompileConfig(mode="reduce-overhead", fullgraph=True)

    def generate(tokens: int):
        def run() -> None:
            with torch.no_grad():
                hf.generate(input_ids=prompt, attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens,
                            do_sample=False, pad_token_id=loaded.dims.vocab - 1, cache_implementation="static",
                            compile_config=config)  # fmt: skip

        return run

    try:
        log("HF static cache + torch.compile(mode='reduce-overhead') generate (compiling)")
        long, short = generate(new), generate(1)
        long()  # compiles and captures outside the timer
        short()
        whole, _ = measure.time_generation(long, lambda: None, 0, device, request.rep_ms)
        prefill, _ = measure.time_generation(short, lambda: None, 0, device, request.rep_ms)
    finally:
        if hasattr(hf, "set_attn_implementation"):
            hf.set_attn_implementation("eager")
    step_ms = max(whole.median_ms - prefill.median_ms, 0.0) / (new - 1)
    decode = phase_of("decode", request)
    costs = loaded.spec.op_costs(loaded.dims, decode, request.dtype)
    per_step = summarize([step_ms], whole.mode, False)
    return {
        "hf_static_compile": PhaseResult(decode, per_step, request.batch, costs, None,
                                         *phase_floor(total_cost(costs), gpu_spec, request.dtype)),
        "hf_static_compile_generate": PhaseResult(phase_of("generate", request), whole, request.batch * new, {}),
    }  # fmt: skip


def skipped_peer_rows(family: str, request, device) -> list[ResultRow]:
    """A skipped row, with the reason, for each peer this machine cannot run."""
    rows = []
    shape = f"op=step,phase=decode,B={request.batch},prompt={request.prompt},new={request.new_tokens}"
    static = None
    if device.type != "cuda":
        static = "transformers compiles generate's static-cache step only on a GPU"
    elif request.new_tokens < 2:  # hf_static_compiled measured nothing: the run had no row of it at all
        static = "its decode step is generate(N) - generate(1) over N - 1 steps: --new-tokens must be at least 2"
    if static is not None:
        row = base_row(family, "hf_static_compile", "compile", request.dtype, shape, SKIPPED)
        row.message = static
        rows.append(row)
    for engine in SERVING_ENGINES:
        row = base_row(family, engine, "library", request.dtype, shape, SKIPPED)
        if importlib.util.find_spec(engine) is None:
            row.message = f"{engine} is not installed (pip install {engine})"
        else:
            row.message = f"{engine} is installed, but rooflint does not drive a serving engine yet"
        rows.append(row)
    for row in rows:
        row.phase, row.batch, row.context = "decode", request.batch, request.prompt + request.new_tokens // 2
    if device.type != "cuda":
        # The compiled prefill peer: inductor on a CPU compiles a model for minutes (models/baseline.py).
        prefill = f"op=step,phase=prefill,B={request.batch},T={request.seq}"
        row = base_row(family, "hf_compile", "compile", request.dtype, prefill, SKIPPED)
        row.message = "HF + torch.compile prefill runs on a GPU only (inductor compiles a model for minutes on a CPU)"
        row.phase, row.batch, row.context = "prefill", request.batch, request.seq
        rows.append(row)
    return rows
