"""Empirical ceilings: what this machine really reaches, beside what its datasheet promises.

A datasheet peak is a clock-rate product (lanes x FLOPs per lane x boost clock) that no kernel
sustains: power and thermal limits lower the clock under load, and DRAM refresh, bank conflicts
and read/write turnaround keep HBM below its pin rate. A measured ceiling is the honest roof for
"how close could this kernel get". rooflint keeps both and labels which one a % of roof uses.

CPU: a large copy and a large matmul, measured at the start of a CPU bench, or reused from this
host's measurement of the last ten minutes (``cpu_ceilings``; ROOFLINT_CPU_CEILINGS_CACHE=0 measures
every run).
GPU: DRAM copy, an L2-resident copy, a large matmul per tensor-core dtype and an FMA-bound
kernel for the CUDA-core FP32 peak (rooflint.engine.ceiling_kernels). Results are stored per GPU as
TOML in the user cache (~/.cache/rooflint/ceilings/<gpu>.toml, or $ROOFLINT_CACHE/ceilings) in
the format of hardware_specs/gpus.toml plus l2_bandwidth_gbps, which the datasheets do not give.
"""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from rooflint.core.paths import cache_dir
from rooflint.core.specs import GpuSpec, measured_spec, spec_from_dict, spec_to_dict
from rooflint.core.switches import switch

_CPU_SPEC: GpuSpec | None = None
# A CPU measurement is reused by the runs of the next ten minutes on the same host, CPU, thread count
# and torch: measuring takes a CPU run's start a second or two, and runs minutes apart then share a
# roof instead of each drawing its own from a noisy shared machine.
CPU_CEILINGS_MAX_AGE_S = 600.0
# Changes whenever measure_cpu_ceilings measures differently: a stored measurement of another method
# is measured again.
CPU_CEILINGS_METHOD = 2


# ----------------------------------------------------------------------------------------- CPU


def _wall_best(fn: Callable[[], object], reps: int) -> float:
    """The fastest of a few calls: a ceiling is an upper bound, and on a shared CPU the slower
    samples measure the neighbours' load, not the hardware."""
    fn()  # warm-up: first touch of pages, thread-pool start, kernel selection
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return min(samples)


def _cpu_gemm_tflops(dtype: torch.dtype, n: int, reps: int = 3) -> float:
    """An n^3 GEMM's rate in ``dtype``: torch.mm; int8 through torch._int_mm (VNNI and AMX CPUs run
    it several times faster than fp32), fp8 through torch._scaled_mm. 0 where torch has no such
    GEMM on this CPU. The fastest of ``reps`` calls after a warm-up."""
    if dtype == torch.int8:
        a, b = (torch.randint(-128, 128, (n, n), dtype=torch.int8) for _ in range(2))
        gemm = partial(torch._int_mm, a, b)
    else:
        a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
        gemm = partial(torch.mm, a, b)
        if dtype.itemsize == 1:  # fp8
            one = torch.tensor(1.0)
            gemm = partial(torch._scaled_mm, a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    try:
        return 2 * n**3 / _wall_best(gemm, reps=reps) / 1e12
    except (RuntimeError, NotImplementedError):
        return 0.0


def _copier(n: int, device: str) -> Callable[[], object]:
    """A copy of n fp32 values; the buffers live as long as the returned function. The source is
    filled, not drawn at random: a copy's speed does not depend on the values, and drawing 32 M
    normal values cost a CPU run more than a second of start-up."""
    src = torch.full((n,), 1.0, device=device)
    dst = torch.empty_like(src)
    return lambda: dst.copy_(src)


def _cpu_last_level_cache_bytes() -> int:
    """The largest CPU cache: on a CPU it plays the L2's role in the fits-in-cache lint rule."""
    best = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            text = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            best = max(best, int(digits) * scale)
    return best or 32 * 2**20  # unknown: assume a 32 MiB LLC, a typical server L3


def measure_cpu_ceilings(copy_mib: int = 128, matmul_n: int = 1024) -> GpuSpec:
    """Copy bandwidth and matmul FLOP/s of this CPU, as a measured GpuSpec (memoized per process).

    The copy buffer (128 MiB each way) is 4x larger than a typical server L3, so it streams from
    DRAM. The matmul peak stands in for every "unit": a CPU's elementwise code and its GEMM run on
    the same vector FMA units, and a blocked GEMM is the best rate those units reach.
    """
    global _CPU_SPEC
    if _CPU_SPEC is not None:
        return _CPU_SPEC
    llc = _cpu_last_level_cache_bytes()
    n = max(copy_mib * 2**20, 4 * llc) // 4
    bandwidth_gbps = 2 * n * 4 / _wall_best(_copier(n, "cpu"), reps=5) / 1e9  # bytes read + bytes written

    peaks = {"tensor_fp32_tflops": _cpu_gemm_tflops(torch.float32, matmul_n)}
    # A roof must bound every kernel from above. Where a CPU has no fast bf16/fp16 GEMM, torch.mm
    # in that dtype is a slow fallback (bf16 at 0.3-0.9 GFLOP/s on a 2-core CI box, 8 s for one
    # 1024^3 call) while other bf16 ops upcast and run at the fp32 rate (SDPA's math path: 57
    # GFLOP/s on the same box), so each precision's peak is at least the fp32 GEMM's. A 256^3 GEMM
    # tells the two apart in milliseconds: only a precision that keeps up with fp32 there has a
    # GEMM of its own worth measuring at full size.
    # The probes run on one thread: on a shared CPU a GEMM on every thread waits for whichever thread
    # is descheduled (fp32 at 256^3 fell to 2-3 GFLOP/s on a 2-core runner with one other busy
    # process, below the bf16 fallback's 1.3), which sent the fallback to its 20 s of full-size calls.
    # A probe is one timed call after its warm-up, first at 64^3, where a scalar fallback (fp8's
    # _scaled_mm: 0.05 GFLOP/s, 1.3 s for two 256^3 calls) is already hundreds of times slower than
    # fp32 and is left there. A fast GEMM can be slow at 64^3 too (AMX bf16: 4-7x below fp32 there,
    # 2.5x above it at 256^3, on one 2-core box), so any precision within 50x of fp32 at 64^3 is
    # probed at 256^3.
    probe, small, threads = 256, 64, torch.get_num_threads()
    torch.set_num_threads(1)
    # int8 and fp8 the same way: on a CPU with VNNI or AMX, torch._int_mm runs several times faster
    # than the fp32 GEMM, and an fp32 roof would call scaled_gemm's int8 rows impossible; elsewhere it
    # and the fp8 _scaled_mm are scalar fallbacks, which the fp32 rate bounds (docs/quantized.md).
    low = (("bf16", torch.bfloat16), ("fp16", torch.float16), ("int8", torch.int8), ("fp8", torch.float8_e4m3fn))
    try:
        fp32_small = _cpu_gemm_tflops(torch.float32, small, reps=1)
        fp32_probe = _cpu_gemm_tflops(torch.float32, probe, reps=1)
        probes = {}
        for _, dtype in low:
            probes[dtype] = _cpu_gemm_tflops(dtype, small, reps=1)
            if probes[dtype] >= fp32_small / 50:
                probes[dtype] = _cpu_gemm_tflops(dtype, probe, reps=1)
    finally:
        torch.set_num_threads(threads)
    for precision, dtype in low:
        rate = probes[dtype]
        if rate >= fp32_probe / 2:
            rate = _cpu_gemm_tflops(dtype, matmul_n)
        peaks[f"tensor_{precision}_tflops"] = max(rate, peaks["tensor_fp32_tflops"])
    peaks["tensor_tf32_tflops"] = peaks["tensor_fp32_tflops"]  # no TF32 on a CPU: fp32 matmuls run fp32
    peaks["cuda_fp32_tflops"] = peaks["tensor_fp32_tflops"]
    peaks["l2_mib"] = llc / 2**20
    peaks["sm_count"] = float(os.cpu_count() or 1)
    how = (
        f"measured at start: {2 * n * 4 / 2**20:.0f} MiB copy, {matmul_n}^3 matmul, "
        f"{torch.get_num_threads()} threads (l2_mib is the CPU's last-level cache)"
    )
    _CPU_SPEC = measured_spec("cpu", "CPU (measured)", bandwidth_gbps, peaks, how)
    return _CPU_SPEC


def _cpu_identity() -> dict[str, object]:
    """What a stored CPU measurement must match to be reused: the host and CPU, the threads torch
    runs on, torch's version and the method."""
    model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "host": socket.gethostname(),
        "cpu": model,
        "cpus": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "method": CPU_CEILINGS_METHOD,
    }


def _cpu_ceilings_file() -> Path:
    return cache_dir("ceilings") / f"cpu-{socket.gethostname()}.json"


def _stored_cpu_ceilings(now: float, identity: dict[str, object]) -> GpuSpec | None:
    """This host's stored measurement if it matches and is under ``CPU_CEILINGS_MAX_AGE_S`` old; its
    values say when they were measured. None for anything else (missing, other, old or unreadable)."""
    try:
        stored = json.loads(_cpu_ceilings_file().read_text())
        measured_at = float(stored["measured_at"])
        if stored["identity"] != identity or not 0 <= now - measured_at <= CPU_CEILINGS_MAX_AGE_S:
            return None
        when = time.strftime("%H:%M:%S", time.localtime(measured_at))
        for value in stored["spec"]["values"].values():
            value[1] = f"{value[1]}; reused, measured at {when} (ROOFLINT_CPU_CEILINGS_CACHE=0 measures anew)"
        spec = spec_from_dict(stored["spec"])
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None
    if spec.key != "cpu" or not all(math.isfinite(v.value) and v.value > 0 for v in spec.values.values()):
        return None
    return spec


def _store_cpu_ceilings(spec: GpuSpec, measured_at: float, identity: dict[str, object]) -> None:
    """Written to a temporary file and renamed into place: a reader never sees half of it; a cache
    that cannot be written only costs the next run a measurement."""
    path = _cpu_ceilings_file()
    text = json.dumps({"identity": identity, "measured_at": measured_at, "spec": spec_to_dict(spec)})
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        temporary.write_text(text)
        os.replace(temporary, path)
    except OSError:
        pass


def cpu_ceilings() -> GpuSpec:
    """The CPU's ceilings for a run: this host's measurement of the last ten minutes where there is
    one (and ROOFLINT_CPU_CEILINGS_CACHE is not 0), else measured now and stored."""
    global _CPU_SPEC
    if _CPU_SPEC is not None:
        return _CPU_SPEC
    use_store = switch("ROOFLINT_CPU_CEILINGS_CACHE") is not False
    identity = _cpu_identity() if use_store else {}  # read once: the lookup and the store match on it
    stored = _stored_cpu_ceilings(time.time(), identity) if use_store else None
    if stored is not None:
        _CPU_SPEC = stored
        return stored
    measured_at = time.time()
    spec = measure_cpu_ceilings()
    if use_store:
        _store_cpu_ceilings(spec, measured_at, identity)
    return spec


# ----------------------------------------------------------------------------------------- GPU


def _event_median_ms(fn: Callable[[], object], reps: int, warmup: int = 3) -> float:
    """Median of CUDA-event times. No L2 flush: every GPU measurement here either streams far
    more than the L2 (DRAM copy, 8192^3 matmuls) or wants the L2 warm on purpose (L2 copy)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return statistics.median(samples)


def _matmul_tflops(precision: str, n: int) -> float | None:
    """Dense matmul throughput. None where this torch/GPU cannot run the precision (fp8 before sm_89)."""
    device = torch.device("cuda")
    if precision == "int8":
        # torch._int_mm: cuBLASLt's int8 GEMM with int32 accumulation (the second operand column-major).
        a = torch.randint(-128, 128, (n, n), device=device, dtype=torch.int8)
        b = torch.randint(-128, 128, (n, n), device=device, dtype=torch.int8).t()
        try:
            fn = lambda: torch._int_mm(a, b)
            fn()
        except (RuntimeError, TypeError):
            return None
    elif precision == "fp8":
        if not hasattr(torch, "float8_e4m3fn") or torch.cuda.get_device_capability() < (8, 9):
            return None
        a = torch.randn(n, n, device=device).to(torch.float8_e4m3fn)
        # _scaled_mm wants the second operand column-major: transpose a row-major tensor.
        b = torch.randn(n, n, device=device).to(torch.float8_e4m3fn).t()
        one = torch.ones((), device=device)
        try:
            fn = lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
            fn()
        except (RuntimeError, TypeError):
            return None
    else:
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "tf32": torch.float32}[precision]
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        fn = lambda: torch.mm(a, b)
    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"  # fp32 inputs then run on tensor cores
    try:
        ms = _event_median_ms(fn, reps=20)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    return 2 * n**3 / (ms * 1e-3) / 1e12


def dram_copy_gbps(copy_gib: float = 2.0) -> float:
    """A device-to-device copy of ``copy_gib`` GiB each way, far beyond any L2: read + write bytes
    over the median of 30 event-timed copies. `rooflint ceilings` and `rooflint doctor` both use it."""
    n = int(copy_gib * 2**30) // 4
    ms = _event_median_ms(_copier(n, "cuda"), reps=30)
    return 2 * n * 4 / (ms * 1e-3) / 1e9


def measure_gpu_ceilings(matmul_n: int = 8192, copy_gib: float = 2.0) -> dict[str, float]:
    """Measure the current GPU's ceilings: spec-table field name -> value."""
    from rooflint.engine import ceiling_kernels

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    n = int(copy_gib * 2**30) // 4
    copy_gbps = dram_copy_gbps(copy_gib)
    # A read-only stream outruns a copy (no read/write turnaround); the roof is the faster stream.
    read_gbps = ceiling_kernels.read_gbps(n * 4, props.multi_processor_count, _event_median_ms)
    values = ceiling_kernels.memory_ceilings(copy_gbps, read_gbps)
    l2 = getattr(props, "L2_cache_size", 0) or 50 * 2**20
    values["l2_bandwidth_gbps"] = ceiling_kernels.l2_copy_gbps(l2, _event_median_ms)
    values["cuda_fp32_tflops"] = ceiling_kernels.fma_tflops(props.multi_processor_count, _event_median_ms)
    for precision in ("tf32", "fp16", "bf16", "fp8", "int8"):
        tflops = _matmul_tflops(precision, matmul_n)
        if tflops is not None:
            values[f"tensor_{precision}_tflops"] = tflops
    values["l2_mib"] = l2 / 2**20
    values["sm_count"] = float(props.multi_processor_count)
    return values


# ------------------------------------------------------------------------------ the ceilings command


@dataclass
class StoredCeilings:
    key: str  # the spec key the file is named after (h100_sxm, cpu)
    name: str  # the device's own name
    values: dict[str, float]  # spec field -> measured value
    datasheet: GpuSpec | None  # what the table promises, to compare with (None on a CPU)
    path: Path


def measure_and_store(
    device: str | None = None,
    out: Path | None = None,
    spec_file: Path | str | None = None,
    gpu: str | None = None,
    on_note: Callable[[str], None] = lambda message: None,
) -> StoredCeilings:
    """`rooflint ceilings`: measure this machine's ceilings and store them as <key>.toml in ``out``
    (default: the user cache, see rooflint.core.roofs), where --roof measured finds them."""
    from rooflint.core.roofs import save_ceilings
    from rooflint.core.specs import current_gpu_spec
    from rooflint.engine.ceiling_flags import CPU_KEY, check_flags, refuse_folder_over

    on_cpu, directory = check_flags(device, out, spec_file, gpu)
    datasheet = None if on_cpu else current_gpu_spec(spec_file, gpu)
    key = CPU_KEY if datasheet is None else datasheet.key
    refuse_folder_over(directory, key)
    if on_cpu:
        spec = measure_cpu_ceilings()
        values = {name: item.value for name, item in spec.values.items()}
        name, how = "CPU", ""
    else:
        name = torch.cuda.get_device_name()
        on_note(f"measuring ceilings of {name} (about a minute) ...")
        values = measure_gpu_ceilings()
        how = f", torch {torch.__version__}"
    return StoredCeilings(key, name, values, datasheet, save_ceilings(key, name, values, out, how))
