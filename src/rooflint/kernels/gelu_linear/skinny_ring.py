"""The decode GEMM of skinny_ring.cu beside it: W streamed through a ring of shared-memory stages by
bulk copies, one block an SM, every block streaming the same bytes to within one stage (sm_90).

The held kernel (skinny_pdl.py) loads a block's whole share of W before it sums and stores, so each
SM's stream of W pauses at every block's end; here a producer warp reissues each 16 KB stage as soon as
the consumers have read it, and a tile that spans blocks is finished by the last of them to arrive
(fp32 partials in a workspace, added in block order). ``linear`` takes a plain projection (bias,
residual), ``swiglu`` a Llama MLP's gate/up projection with silu(gate) * up in its epilogue (a tile is 8
gate rows and their 8 up rows).

Its shapes: M <= 8 rows of X, K a multiple of 512, 16-bit X and W, X's rows whole in shared memory
beside at least MIN_BYTES of stages (at M = 8: K <= 8192; at M = 1: any K a model has).
"""

from __future__ import annotations

import functools

import torch

from rooflint.core.switches import switch
from rooflint.engine import cuda_build
from rooflint.kernels import cuda_dtype, sm_count

SKINNY_RING_CU = cuda_build.family_source(__file__, "skinny_ring")

ROWS = 16  # W rows a tile: the MMA's M
MAX_ROWS = 8  # X rows: one n8 tile of the MMA
# Columns a stage (skinny_ring.cu's builds), most preferred first: the first that divides K and fits.
# Above K = 2048, 1024 columns (2 KB a row's copy, 32 KB a stage): the deeper ring (5-6 stages) took
# Llama-3.1-8B's step (K = 4096 and 14336) from 4.302 to 4.216 ms against 2048 columns (2-3 stages).
# Up to K = 2048 a stage holds a tile's whole K, so no tile is shared by two blocks: Llama-3.2-1B's
# gate/up at B=8 (K = 2048) took the step to 0.908 ms at 2048 columns and 1.016 at 1024 (H200).
CHUNKS = (1024, 512)
WHOLE_K = 2048
CHUNK = CHUNKS[-1]  # every K the kernel takes is a multiple of the smallest
BARRIER_BYTES = 256
STATIC_BYTES = 2 * 8 * ROWS * 8 * 4 + 2 * 4  # the kernel's partial tiles and flags
MAX_STAGES = 12
# The fewest bytes of stages it runs with: 64 KB an SM, twice what HBM needs in flight at full rate
# (~30 KB an SM: 4.8 TB/s over 132 SMs at ~0.8 us of loaded latency); two stages at least.
MIN_BYTES = 64 * 1024
# W bytes an SM above which the ring kernel runs by default. The held kernel holds 256 KB an SM before
# the PDL wait, so a projection of one or two of its waves ends with its first; beyond that the ring's
# unbroken stream pays. Measured on an H200 (graph replays, one launch after another): the ring lost at
# 254-381 KB an SM (Llama-3.1-8B's o_proj and QKV, Llama-3.2-1B's down at B=8) and won at 508 KB and up
# (the 1B's gate/up at B=8, the 8B's down and gate/up).
PAYS_FROM = 448 * 1024
ON_CPU_SHARED = 232_448  # an H100's or H200's opt-in shared memory a block, for plans made without a GPU


def stage_bytes(chunk: int) -> int:
    """A stage: 16 rows of ``chunk`` 16-bit columns, each row padded by 64 bytes off the 128-byte bank period."""
    return ROWS * (2 * chunk + 64)


def plan(m: int, k: int, shared: int) -> tuple[int, int]:
    """(columns a stage, stages) for M rows of K in ``shared`` bytes a block: a tile's whole K in one stage
    up to WHOLE_K, else the first of CHUNKS that divides K, where its stages fit (stages_for); (0, 0)
    where none does."""
    for chunk in ((WHOLE_K,) if k <= WHOLE_K else ()) + CHUNKS:
        stages = stages_for(m, k, shared, chunk) if k % chunk == 0 else 0
        if stages:
            return chunk, stages
    return 0, 0


def shared_bytes(m: int, k: int, stages: int, chunk: int) -> int:
    """The dynamic shared memory a block takes: its barriers, X's M rows of K (each padded by 64 bytes)
    and ``stages`` stages; the kernel's static partial tiles come on top (STATIC_BYTES)."""
    return BARRIER_BYTES + m * (2 * k + 64) + stages * stage_bytes(chunk)


def stages_for(m: int, k: int, shared: int, chunk: int) -> int:
    """The most stages (up to MAX_STAGES) of ``chunk`` columns that fit beside X's rows in ``shared`` bytes
    a block, and at least MIN_BYTES of them; 0 where they do not fit."""
    room = shared - STATIC_BYTES - shared_bytes(m, k, 0, chunk)
    stages = min(MAX_STAGES, room // stage_bytes(chunk))
    return stages if stages >= 2 and stages * stage_bytes(chunk) >= MIN_BYTES else 0


def tiles_of(n: int, ffn: int = 0) -> int:
    """Tiles of 16 W rows; with SwiGLU (ffn > 0) of 8 gate rows and their 8 up rows."""
    return (ffn + 7) // 8 if ffn else (n + ROWS - 1) // ROWS


def owner(u: int, units: int, grid: int) -> int:
    """The block that streams unit u when block b takes units [units b / grid, units (b + 1) / grid)."""
    return ((u + 1) * grid + units - 1) // units - 1


def contributors(tiles: int, chunks: int, grid: int) -> list[int]:
    """How many blocks stream part of each tile (its K's ``chunks`` units): 1 where one block has it whole."""
    units = tiles * chunks
    return [owner(t * chunks + chunks - 1, units, grid) - owner(t * chunks, units, grid) + 1 for t in range(tiles)]


@functools.cache
def _shared_optin(index: int) -> int:
    return torch.cuda.get_device_properties(index).shared_memory_per_block_optin


def device_shared(device) -> int:
    """The opt-in shared memory a block of this device may take (ON_CPU_SHARED without a GPU)."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return ON_CPU_SHARED
    return _shared_optin(device.index if device.index is not None else torch.cuda.current_device())


def why_not(x: torch.Tensor, w: torch.Tensor, residual=None, out=None, ffn: int = 0) -> str | None:
    """Why the ring kernel cannot multiply x [M, K] by w [N, K] (SwiGLU: [2 ffn, K]) into out, or None."""
    m, k = x.shape
    if x.dtype not in (torch.float16, torch.bfloat16) or w.dtype != x.dtype:
        return f"skinny_ring.cu takes fp16 or bf16 x and weight, not {x.dtype} and {w.dtype}"
    if (out is not None and out.dtype != x.dtype) or (residual is not None and residual.dtype != x.dtype):
        return "skinny_ring.cu's output and residual take x's dtype"
    if w.shape[1] != k:
        return f"x {list(x.shape)} does not match the weight {list(w.shape)}"
    why = _shape_gap(m, k)
    if why:
        return why
    if ffn and (w.shape[0] != 2 * ffn or residual is not None):
        return f"skinny_ring.cu's SwiGLU takes a [2 x {ffn}, K] weight and no residual"
    if not w.is_contiguous() or w.data_ptr() % 16 or x.stride(1) != 1 or x.stride(0) % 8 or x.data_ptr() % 16:
        return "skinny_ring.cu needs a contiguous, 16-byte aligned weight and 16-byte aligned x rows"
    if any(t is not None and t.stride(1) != 1 for t in (residual, out)):
        return "skinny_ring.cu needs the residual's and the output's rows contiguous"
    # the GPU last: the layout refusals above are reached (and tested) on a machine without one
    return _device_gap(m, k, x.device)


def fits(m: int, k: int, device) -> bool:
    """Whether the ring kernel takes M rows of K on ``device`` (sm_90, nvcc, the shared memory): why_not's
    verdict on the shape alone, for tensors that pass its dtype and layout checks."""
    return _shape_gap(m, k) is None and _device_gap(m, k, device) is None


def _shape_gap(m: int, k: int) -> str | None:
    if not 1 <= m <= MAX_ROWS:
        return f"skinny_ring.cu takes 1 to {MAX_ROWS} rows of x, not {m}"
    if k % CHUNK:
        return f"skinny_ring.cu takes K a multiple of {CHUNK}, not {k}"
    return None


def _device_gap(m: int, k: int, device) -> str | None:
    if device.type != "cuda" or torch.cuda.get_device_capability(device) < (9, 0):
        return "skinny_ring.cu needs a CUDA GPU of sm_90 or newer (bulk copies, mbarriers)"
    if not plan(m, k, device_shared(device))[0]:
        return f"skinny_ring.cu keeps X in shared memory beside 64 KB of stages: M = {m} x K = {k} does not fit"
    if cuda_build.nvcc_path() is None:
        return "skinny_ring.cu is built on first use, and nvcc is not on PATH"
    return None


def pays(m: int, k: int, n: int, device) -> bool:
    """Whether a decode GEMM of M rows by N W rows of K runs on the ring kernel: ROOFLINT_RING=1 wherever it
    fits, 0 nowhere; unset, where it fits and each SM streams more than PAYS_FROM bytes of W."""
    asked = switch("ROOFLINT_RING")
    if asked is False or not fits(m, k, device):
        return False
    return asked is True or 2 * n * k > PAYS_FROM * sm_count(device, on_cpu=132)


_WORKSPACES: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}


def _workspace(device, grid: int, tiles: int) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 partial tiles, two a block, and a count a tile (zero between launches: the last block to
    finish a shared tile sets its count back), made once per device and shape, before any capture."""
    key = (device, grid, tiles)
    if key not in _WORKSPACES:
        _WORKSPACES[key] = (
            torch.empty((grid, 2, ROWS * 8), dtype=torch.float32, device=device),
            torch.zeros(tiles, dtype=torch.int32, device=device),
        )
    return _WORKSPACES[key]


def linear(x, w, b=None, residual=None, out=None, pdl: bool = False) -> torch.Tensor:
    """x @ w^T + b (+ residual) for x [M <= 8, K], w [N, K]: out [M, N]; ``pdl`` launches it with
    programmatic dependent launch. ValueError (why_not's words) where the kernel cannot take it."""
    got = linear_where_it_fits(x, w, b, residual, out, pdl)
    if got is None:
        raise ValueError(why_not(x, w, residual, out))
    return got


def linear_where_it_fits(x, w, b=None, residual=None, out=None, pdl: bool = False) -> torch.Tensor | None:
    """``linear``, or None where why_not refuses the call (its caller then runs another kernel)."""
    if why_not(x, w, residual, out) is not None:
        return None
    out = torch.empty((x.shape[0], w.shape[0]), dtype=x.dtype, device=x.device) if out is None else out
    return _call(x, w, b, residual, out, 0, pdl)


def swiglu(x, w, b=None, out=None, pdl: bool = False) -> torch.Tensor:
    """silu(g) * u for [g | u] = x @ w^T + b, w = [gate rows; up rows] [2 ffn, K]: out [M, ffn]. g and u
    are rounded to x's dtype before the product, as the unfused GEMM's output is."""
    ffn = w.shape[0] // 2
    why = why_not(x, w, None, out, ffn) if w.shape[0] % 2 == 0 else f"a SwiGLU weight has even rows, not {w.shape[0]}"
    if why:
        raise ValueError(why)
    out = torch.empty((x.shape[0], ffn), dtype=x.dtype, device=x.device) if out is None else out
    return _call(x, w, b, None, out, ffn, pdl)


def _call(x, w, b, residual, out, ffn: int, pdl: bool) -> torch.Tensor:
    m, k = x.shape
    n = ffn or w.shape[0]
    tiles = tiles_of(n, ffn)
    chunk, stages = plan(m, k, device_shared(x.device))
    grid = min(sm_count(x.device, on_cpu=132), tiles * (k // chunk))
    partials, counts = _workspace(x.device, grid, tiles)
    cuda_build.load(SKINNY_RING_CU).launch(
        "rooflint_skinny_ring", x, w, b, residual, out, partials, counts, m, n, k, x.stride(0),
        residual.stride(0) if residual is not None else 0, out.stride(0), ffn, chunk, stages, grid, int(pdl),
        cuda_dtype(x.dtype),
    )  # fmt: skip
    return out
