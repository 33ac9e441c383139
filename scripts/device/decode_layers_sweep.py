"""GPT-2's decode step with its layers in one persistent kernel, against the kernel-per-op step (issue 12).

Builds the model once, runs the triton set's greedy loop with the persistent kernel off (the
reference tokens and time), then once per launch plan with it on: the share of the reference's
greedy tokens it reproduces, ms per step (CUDA graphs replayed back to back, the engine's measure)
and the phases' shares of the kernel from its own clock.
  python3 scripts/device/decode_layers_sweep.py [--plans 4x3x2,4x3x2-noprefetch]
A plan is WARPSxSTAGESxPER_SM (programs per SM), "-noprefetch" without the L2 prefetch of the next phases' bytes.
"""

from __future__ import annotations

import argparse
import gc
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from decode_probe import add_model_arguments, kernels_of, model_and_prompt, time_loop  # noqa: E402

from rooflint.kernels import _decode_layers  # noqa: E402
from rooflint.models.kernel_sets import make_kernel_set  # noqa: E402
from rooflint.models.runner import Runner  # noqa: E402


def run(loaded, prompt, args, persistent: bool, spec: str = ""):
    device = prompt.device
    eps = loaded.spec.norm_eps(loaded.hf.config)
    kernels = make_kernel_set("triton", torch.bfloat16, device, loaded.dims.head_dim, eps)
    kernels.persistent = persistent
    if spec:
        warps, stages, per_sm = (int(v) for v in spec.split("-")[0].split("x"))
        base = _decode_layers.plan
        sms = torch.cuda.get_device_properties(device).multi_processor_count
        regs = 65536 // (per_sm * 32 * warps) // 8 * 8 if per_sm > 2 else None
        _decode_layers.default_plan = lambda dev, stack, _=1: base(stack.hidden, stack.ffn, per_sm * sms, warps, stages,
                                                                   regs)  # fmt: skip
        prefetch = _can_prefetch_original
        _decode_layers._can_prefetch = (lambda *a: False) if "noprefetch" in spec else prefetch
    runner = Runner(loaded, kernels, args.batch, args.prompt, args.new_tokens)
    runner.start(prompt)
    runner.capture()
    tokens = runner.generate(prompt)
    ms = time_loop(runner, prompt, args.new_tokens - 1)
    runner.start(prompt)
    middle = args.new_tokens // 2
    in_graph = kernels_of(runner.graphs[middle - 1].replay)
    runner.start(prompt)
    runner.step(middle)
    torch.cuda.synchronize()
    shares = kernels.phase_shares() if persistent else None
    runner.release()
    del runner, kernels
    gc.collect()
    torch.cuda.empty_cache()
    return tokens, ms, in_graph, shares


_can_prefetch_original = _decode_layers._can_prefetch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--plans", default="4x3x2,4x3x2-noprefetch,4x3x1,4x3x1-noprefetch")
    add_model_arguments(parser)
    args = parser.parse_args()
    device = torch.device("cuda")
    loaded, prompt = model_and_prompt(args, device)
    ref, ref_ms, ref_kernels, _ = run(loaded, prompt, args, False)
    print(f"== kernel per op: {ref_ms * 1e3:.1f} us/step, {len(ref_kernels)} kernels per step", flush=True)
    for spec in args.plans.split(","):
        tokens, ms, in_graph, shares = run(loaded, prompt, args, True, spec)
        first = (tokens[:, :2] == ref[:, :2]).float().mean().item()
        match = (tokens == ref).float().mean().item()
        busy = sum(k[2] for k in in_graph)
        print(f"== persistent {spec}: {ms * 1e3:.1f} us/step ({ref_ms / ms:.2f}x); tokens 0-1 match {first:.0%}, "
              f"all {match:.0%}; graph: {len(in_graph)} kernels, busy {busy:.1f} us", flush=True)  # fmt: skip
        for name, _, dur in in_graph:
            print(f"   {name[:70]:<70} {dur:8.1f} us")
        if shares:
            print("   phases: " + ", ".join(f"{name} {share:.1%}" for name, (share, _) in shares.items()))


if __name__ == "__main__":
    main()
