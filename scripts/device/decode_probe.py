"""Where a GPT-2 decode step's time goes, kernel by kernel, inside its CUDA graph (issue 12).

`rooflint model` attributes a decode step from one step launched op by op; the step time comes from
the CUDA-graph replays. This replays one step's graph under torch.profiler, which sees every kernel
of the replay in capture order, and prints each kernel's device time beside the idle gap before it,
and beside the same kernel's time in the op-by-op step. It runs the kernel sets in the order given,
in one process, as `rooflint model` does, so an order effect shows.
  python3 scripts/device/decode_probe.py --sets eager,triton [--config gpt2] [--ncu-step]
--ncu-step runs one op-by-op decode step of the last set between cudaProfilerStart/Stop and exits:
for `ncu --profile-from-start off`.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from functools import partial

import torch
from torch.profiler import ProfilerActivity, profile

from rooflint.models.base import build
from rooflint.models.kernel_sets import make_kernel_set
from rooflint.models.registry import get_model
from rooflint.models.runner import Runner


def kernels_of(fn) -> list[tuple[str, float, float]]:
    """(name, start us, duration us) of every kernel ``fn`` runs on the GPU, in start order."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    out = []
    for e in prof.profiler.kineto_results.events():
        if e.device_type() == torch.autograd.DeviceType.CUDA and not e.name().startswith(("Memcpy", "Memset")):
            out.append((e.name(), e.start_ns() / 1e3, (e.end_ns() - e.start_ns()) / 1e3))
    return sorted(out, key=lambda k: k[1])


def time_loop(runner: Runner, prompt, steps: int, loops: int = 7) -> float:
    """Median ms per decode step over ``loops`` generations (the engine's measure, by events)."""
    samples = []
    for _ in range(loops):
        runner.start(prompt)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        a.record()
        runner.decode()
        b.record()
        b.synchronize()
        samples.append(a.elapsed_time(b) / steps)
    return statistics.median(samples)


def loop_gaps(runner: Runner, prompt, per_graph: int) -> None:
    """A whole decode loop under the profiler: idle inside graphs against idle between them, and
    the host's time to enqueue each replay."""
    runner.start(prompt)
    torch.cuda.synchronize()
    began = time.perf_counter()
    runner.decode()
    enqueue_us = (time.perf_counter() - began) * 1e6 / len(runner.graphs)
    torch.cuda.synchronize()
    runner.start(prompt)
    ks = kernels_of(runner.decode)
    ks = [k for k in ks if k[1] >= 0]
    busy = sum(k[2] for k in ks)
    span = ks[-1][1] + ks[-1][2] - ks[0][1]
    gaps = [ks[i][1] - (ks[i - 1][1] + ks[i - 1][2]) for i in range(1, len(ks))]
    between = [g for i, g in enumerate(gaps, 1) if i % per_graph == 0]
    within = [g for i, g in enumerate(gaps, 1) if i % per_graph != 0]
    print(f"   loop under the profiler: {len(ks)} kernels ({len(ks) / per_graph:.1f} graphs), span {span:.0f} us, "
          f"busy {busy:.0f} us; idle within graphs {sum(within):.0f} us, between graphs {sum(between):.0f} us "
          f"(median {statistics.median(between) if between else 0:.1f} us, max {max(between, default=0):.1f}); "
          f"host enqueue {enqueue_us:.1f} us per replay")  # fmt: skip


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The model and generation a decode script runs (GPT-2 124M, B=8, prompt 512, 128 new tokens)."""
    parser.add_argument("--config", default="gpt2")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=128)


def model_and_prompt(args, device):
    """The bf16 model (seed 0) and a random prompt [batch, prompt] (seed 0), as every decode script uses."""
    loaded = build(get_model("gpt2"), args.config, torch.bfloat16, device, seed=0)
    gen = torch.Generator().manual_seed(0)
    prompt = torch.randint(0, loaded.dims.vocab, (args.batch, args.prompt), generator=gen).to(device)
    return loaded, prompt


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sets", default="triton")
    add_model_arguments(parser)
    parser.add_argument("--ncu-step", action="store_true")
    parser.add_argument("--detail", action="store_true", help="print every kernel of the graph replay")
    parser.add_argument("--loop", action="store_true", help="also profile a whole decode loop: gaps between graphs")
    parser.add_argument(
        "--save-tokens", help="write each set's greedy tokens [B, N] to PATH.<set>.pt (to compare runs)"
    )
    args = parser.parse_args()
    device = torch.device("cuda")
    loaded, prompt = model_and_prompt(args, device)
    dims = loaded.dims
    eps = loaded.spec.norm_eps(loaded.hf.config)
    for name in args.sets.split(","):
        kernels = make_kernel_set(name, torch.bfloat16, device, dims.head_dim, eps)
        runner = Runner(loaded, kernels, args.batch, args.prompt, args.new_tokens)
        runner.start(prompt)
        runner.capture()
        tokens = runner.generate(prompt)
        if args.save_tokens:
            torch.save(tokens.cpu(), f"{args.save_tokens}.{name}.pt")
        middle = args.new_tokens // 2
        if args.ncu_step:
            runner.start(prompt)
            runner.step(middle)
            torch.cuda.synchronize()
            torch.cuda.profiler.start()
            runner.step(middle)
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
            continue
        ms = time_loop(runner, prompt, args.new_tokens - 1)
        runner.start(prompt)
        graph = runner.graphs[middle - 1]
        graph.replay()
        in_graph = kernels_of(graph.replay)
        runner.start(prompt)
        eager = kernels_of(partial(runner.step, middle))
        busy = sum(k[2] for k in in_graph)
        span = in_graph[-1][1] + in_graph[-1][2] - in_graph[0][1]
        eager_busy = sum(k[2] for k in eager)
        print(f"== {name} ({args.config}): loop {ms * 1e3:.1f} us/step; graph replay under the profiler: "
              f"{len(in_graph)} kernels, span {span:.1f} us, busy {busy:.1f} us, idle {span - busy:.1f} us; "
              f"op by op: {len(eager)} kernels, busy {eager_busy:.1f} us")  # fmt: skip
        same = [k[0] for k in in_graph] == [k[0] for k in eager]
        print(f"   same kernel sequence in graph and op by op: {same}")
        rows = []
        for i, (kname, start, dur) in enumerate(in_graph):
            gap = start - (in_graph[i - 1][1] + in_graph[i - 1][2]) if i else 0.0
            eager_dur = eager[i][2] if same else float("nan")
            rows.append((kname, dur, gap, eager_dur))
        by_kind: dict[str, list[float]] = {}
        for kname, dur, gap, eager_dur in rows:
            acc = by_kind.setdefault(kname[:60], [0, 0.0, 0.0, 0.0])
            acc[0] += 1
            acc[1] += dur
            acc[2] += gap
            acc[3] += eager_dur
        print(f"   {'kernel':<60} {'n':>3} {'graph us':>9} {'gap us':>8} {'op-by-op us':>11}")
        for kname, (n, dur, gap, eager_dur) in sorted(by_kind.items(), key=lambda kv: -kv[1][1]):
            print(f"   {kname:<60} {n:>3} {dur:>9.1f} {gap:>8.1f} {eager_dur:>11.1f}")
        if args.loop:
            loop_gaps(runner, prompt, len(in_graph))
        if args.detail:
            for kname, dur, gap, eager_dur in rows[:20]:
                print(f"     {kname[:60]:<60} {dur:>7.2f} gap {gap:>6.2f} eager {eager_dur:>7.2f}")
        runner.release()
        del runner, kernels, graph
        gc.collect()  # as the engine does between sets
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
