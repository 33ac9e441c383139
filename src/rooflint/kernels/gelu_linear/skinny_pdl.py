"""The decode GEMM of skinny_pdl.cu beside it: W held in registers across the PDL wait (sm_90).

kernels/gelu_linear/skinny.py calls it under programmatic dependent launch where the shape fits; its
arguments and its result are those of skinny_linear / skinny_norm_linear.

``swiglu`` runs a Llama MLP's gate/up projection on the held kernel with silu(gate) * up in its
epilogue: a block holds the gate and the up rows of its 16 outputs, so the [M, 2 ffn] product never
leaves the SM and a decode step has one kernel less.

``qkv_rope`` runs a Llama QKV projection on the held kernel with RoPE (and the paged K/V append) in
its epilogue: a block of the rotated outputs holds 8 rows of a head's first half and their rotate-half
partners, so the decode step loses its rope kernel.

Two kernels, and ``plan`` picks one:
- **held**: a block a row block of 16 W rows, its whole share of W loaded into registers before the
  PDL wait, so the stream overlaps the kernels before it. It takes K up to 16 warps x 16 k16 steps;
- **streamed**: one block an SM walks its row blocks and their K in chunks, the next chunk's W in
  flight while the warps multiply the last: rows longer than the held kernel takes (a Llama MLP's
  down projection, K = 8192 or 14336). Where both take K, the held kernel was faster on an H200 at
  every decode projection of GPT-2, Llama-3.2-1B and Llama-3.1-8B, by 1-12%, several waves of blocks
  included (docs/perf-notes/models.md), so plan takes it.

At K = 2048-4096 and M <= 8 the held kernel may hold a second tile of 16 W rows in shared memory,
copied by cp.async before the PDL wait (``shared_pays``): a plain projection's block then owns two row
blocks, SwiGLU's its up rows. A block holds 256 KB of W before the wait at K = 4096 instead of 128,
so half as many blocks end exposed, and where the kernel before it leaves SMs free (the decode
attention) twice the weights stream ahead of the wait.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from rooflint.engine import cuda_build
from rooflint.kernels import cuda_dtype, sm_count
from rooflint.kernels.common.rope_pairs import why_not_pairs

SKINNY_PDL_CU = cuda_build.family_source(__file__, "skinny_pdl")

# Held: k16 steps a warp holds (4 registers each), most preferred first: K = 16 * steps * warps. 12
# gives GPT-2's K = 768 four warps of 48 W registers and K = 3072 sixteen; 16 takes K = 1024 and 4096.
STEPS = (12, 16, 10, 8, 6, 4)
MAX_WARPS = 16
MAX_ROWS = 16  # X rows: two n8 tiles of the MMA
# Streamed: chunks of 16 * steps * STREAM_WARPS, two buffers of W registers a thread, so 8 warps (a
# 256-thread block may use 255 registers a thread). The longest chunk first: 64 KB a block in
# flight at 16 steps, where HBM wants ~30 KB an SM.
STREAM_STEPS = (16, 12, 8, 6, 4)
STREAM_WARPS = 8


class Plan(NamedTuple):
    steps: int  # k16 steps a warp holds
    streamed: bool
    shared: bool = False  # held, with a second tile of 16 W rows in shared memory


# The shared tile, 16 rows x K of 16-bit W, within 128 KB of an SM's shared memory; from K = 2048 up,
# the projections it was measured to pay at (Llama-3.1-8B's K = 4096; a shorter K's blocks end sooner
# and leave less of their end exposed).
SHARED_K = (2048, 4096)
# The fewest blocks a held grid with the shared tile keeps, as a share of the SMs: the tile halves a
# plain projection's blocks, and fewer blocks than SMs stream from fewer SMs (Llama-3.2-1B's QKV, 96
# blocks on 132 SMs, 0.044 -> 0.068 ms); 128 of 132 (Llama-3.1-8B's o_proj) paid.
SHARED_FILL = 0.9


def shared_steps(k: int, m: int) -> int:
    """The held kernel's k16 steps a warp with a second tile in shared memory (16 or 8, 8-16 warps, M <= 8,
    K within SHARED_K); 0 where none fits."""
    if m > 8 or not SHARED_K[0] <= k <= SHARED_K[1]:
        return 0
    for steps in (16, 8):
        warps, rest = divmod(k, 16 * steps)
        if rest == 0 and 8 <= warps <= MAX_WARPS:
            return steps
    return 0


def shared_pairs(row_blocks: int, sms: int) -> int:
    """How many of a plain projection's blocks with the shared tile own two row blocks (the blocks after
    them own one): all of them, except where the row blocks left after one or more whole waves of paired
    blocks are at most one an SM. Those go one a block, so the SM that streams the most streams one row
    block more than the average, not two: Llama-3.1-8B's QKV, 384 row blocks on 132 SMs, is 132 paired
    blocks and 120 single ones, at most 3 row blocks an SM instead of 4."""
    rest = row_blocks % (2 * sms)
    if 0 < rest <= sms and row_blocks > rest:
        return (row_blocks - rest) // 2
    return (row_blocks + 1) // 2


# The held kernel's builds with a folded RMSNorm (skinny_pdl.cu's RMS): M <= 8 at these k16 steps a warp,
# the shares of the K = 2048 and 4096 projections it folds into (SwiGLU without the shared tile: 8).
RMS_STEPS = (16, 8)


def takes_rms(m: int, k: int, n: int, device, swiglu: bool = False) -> bool:
    """Whether the held kernel that ``launch`` (or ``swiglu``, n = ffn) picks for M rows of K -> N has a
    folded-RMSNorm build; qkv_rope's RoPE steps are 16 or 8, so it takes one wherever M <= 8."""
    if m > 8:
        return False
    if swiglu:
        chosen = swiglu_plan(k, m, n, device)
        return chosen.shared or chosen.steps == 8
    chosen = launch_plan(k, m, n, device)
    return chosen is not None and not chosen.streamed and chosen.steps in RMS_STEPS


def launch_plan(k: int, m: int, n: int, device, streamed: bool | None = None) -> Plan | None:
    """The kernel ``launch`` runs for M rows of K -> N: ``plan``'s (or the ``streamed`` one forced), the
    held kernel taking its shared tile where ``shared_pays``; None where neither kernel takes K."""
    chosen = plan(k, m) if streamed is None else forced(k, m, streamed)
    if chosen is None or streamed is not None or chosen.streamed:
        return chosen
    shared = shared_pays(k, m, (n + 31) // 32, device)
    return Plan(shared, False, True) if shared else chosen


def swiglu_plan(k: int, m: int, ffn: int, device) -> Plan:
    """The held kernel ``swiglu`` runs for M rows of K -> ffn: the up rows in shared memory where that
    pays (``shared_pays`` over the ceil(ffn / 16) blocks it launches), else two register tiles."""
    shared = shared_pays(k, m, (ffn + 15) // 16, device)
    return Plan(shared, False, True) if shared else Plan(steps_for(k, m, swiglu=True), False)


def fold_rms_norm(gamma: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """W diag(gamma) in W's dtype, once per weight: the held kernel's ``rms`` then needs only each X row's
    1 / rms, from the same elements it multiplies (RMSNorm(x) W^T = (x W'^T) / rms(x))."""
    return (w.float() * gamma.float()[None, :]).to(w.dtype).contiguous()


def shared_pays(k: int, m: int, blocks: int, device) -> int:
    """The k16 steps a warp where the held kernel takes its second tile in shared memory: the tile fits
    at K and M, and a grid of ``blocks`` such blocks still covers SHARED_FILL of the SMs; else 0."""
    steps = shared_steps(k, m)
    return steps if steps and blocks >= SHARED_FILL * sm_count(device, on_cpu=132) else 0


def steps_for(k: int, m: int, swiglu: bool = False) -> int:
    """The held kernel's k16 steps per warp for K and M rows (``swiglu``: two W tiles a block); 0 where
    no choice fits."""
    least = 4 if m <= 8 else 8  # a thread per output in the epilogue: 16 x 8 or 16 x 16
    # Two X tiles (M > 8) or two W tiles (SwiGLU) double those registers: the longer shares would spill.
    most = (8 if m <= 8 else 4) if swiglu else (16 if m <= 8 else 8)
    for steps in STEPS:
        if steps > most:
            continue
        warps, rest = divmod(k, 16 * steps)
        if rest == 0 and least <= warps <= MAX_WARPS:
            return steps
    return 0


def stream_steps(k: int, m: int) -> int:
    """The streamed kernel's k16 steps per warp: the longest chunk that divides K; 0 where none does."""
    for steps in STREAM_STEPS:
        if m > 8 and steps > 8:
            continue
        if k % (16 * steps * STREAM_WARPS) == 0:
            return steps
    return 0


def plan(k: int, m: int) -> Plan | None:
    """The held kernel where it takes K at M rows, else the streamed one where a chunk divides K;
    None where neither does (the Triton kernel runs)."""
    held, streamed = steps_for(k, m), stream_steps(k, m)
    if held:
        return Plan(held, False)
    if streamed:
        return Plan(streamed, True)
    return None


def forced(k: int, m: int, streamed: bool) -> Plan:
    """The one kernel asked for at K and M rows (True: streamed, False: held); ValueError naming the
    other where this one splits no such K."""
    steps = stream_steps(k, m) if streamed else steps_for(k, m)
    if not steps:
        kernel, other = ("streamed", "held") if streamed else ("held", "streamed")
        raise ValueError(f"the {kernel} CUDA kernel splits no K = {k} at M = {m}; the {other} one may")
    return Plan(steps, streamed)


def fits(x: torch.Tensor, w: torch.Tensor, residual, out: torch.Tensor) -> bool:
    """Whether the CUDA kernel takes this call: fp16/bf16, a K that one of its kernels splits, and
    16-byte aligned X and W rows (its loads are 16-byte vectors)."""
    if x.dtype not in (torch.float16, torch.bfloat16) or w.dtype != x.dtype or out.dtype != x.dtype:
        return False
    if residual is not None and residual.dtype != x.dtype:
        return False
    if cuda_build.nvcc_path() is None:  # built on first use: without nvcc the Triton kernel runs
        return False
    m, k = x.shape
    aligned = x.data_ptr() % 16 == 0 and w.data_ptr() % 16 == 0 and x.stride(0) % 8 == 0
    return aligned and plan(k, m) is not None


def _why_not_held(what: str, m: int, w: torch.Tensor, steps: int, shares: str) -> str | None:
    """What the held kernel's fused epilogues (``what``) all need of weight ``w`` [N, K] at M rows, with
    ``steps`` the k16 steps a warp they would take (0: none splits K; ``shares`` says which would)."""
    k = w.shape[1]
    if w.dtype not in (torch.float16, torch.bfloat16):
        return f"skinny_pdl.cu's {what} takes fp16 or bf16 weights, not {w.dtype}"
    if not w.is_cuda or torch.cuda.get_device_capability(w.device) < (8, 0):
        return f"skinny_pdl.cu's {what} needs a CUDA GPU of sm_80 or newer (mma.sync)"
    if not 1 <= m <= MAX_ROWS:
        return f"skinny_pdl.cu's {what} takes 1 to {MAX_ROWS} rows, not {m}"
    if not steps:
        return f"skinny_pdl.cu's {what} splits no K = {k} at M = {m} ({shares})"
    if not w.is_contiguous() or w.data_ptr() % 16:
        return f"skinny_pdl.cu's {what} needs a contiguous, 16-byte aligned weight"
    if cuda_build.nvcc_path() is None:
        return "skinny_pdl.cu is built on first use, and nvcc is not on PATH"
    return None


def why_not_swiglu(m: int, w: torch.Tensor) -> str | None:
    """Why ``swiglu`` cannot take the [gate; up] weight ``w`` [2 ffn, K] at M rows, or None where it can."""
    if w.shape[0] % 2:
        return f"a SwiGLU weight holds gate and up rows, an even count, not {w.shape[0]}"
    steps = steps_for(w.shape[1], m, swiglu=True)
    return _why_not_held("SwiGLU kernel", m, w, steps, "two W tiles: 16 x <= 8 steps x 4-16 warps")


def swiglu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None, out=None, pdl: bool = False, rms=None):
    """silu(g) * u for [g | u] = x @ w^T + b: a Llama MLP's gate/up projection, w = [gate rows; up rows]
    [2 ffn, K], x [M <= 16, K], out [M, ffn]. g and u are rounded to x's dtype before the product, as
    the unfused GEMM's output is; ``pdl`` launches it with programmatic dependent launch."""
    m, k = x.shape
    ffn = w.shape[0] // 2
    why = why_not_swiglu(m, w) or _why_not_x("SwiGLU kernel", x, w)
    if why:
        raise ValueError(why)
    out = torch.empty((m, ffn), dtype=x.dtype, device=x.device) if out is None else out
    # Where two register tiles hold K (why_not_swiglu), the up rows may go to shared memory instead, at
    # twice the steps a warp. Not further: at Llama-3.1-8B's K = 4096 the fused epilogue puts the streamed
    # down projection straight behind a GEMM under PDL, and the step lost what the SwiGLU kernel's
    # removal gained (docs/perf-notes/models.md, Tried and lost).
    chosen = swiglu_plan(k, m, ffn, x.device)
    return _call(x, w, b, out, ffn, chosen.steps, pdl=pdl, ffn=ffn, shared=chosen.shared, rms=rms)


def launch(x, w, b, gelu, residual, out, norm, append, streamed: bool | None = None, rms=None,
           pdl: bool = True) -> torch.Tensor:  # fmt: skip
    """``streamed`` forces one kernel (True: streamed, False: held); by default ``plan`` picks. ``rms``:
    the eps of an RMSNorm folded into w (the held kernel only); ``pdl`` False launches it plainly."""
    m, k = x.shape
    n = w.shape[0]
    chosen = launch_plan(k, m, n, x.device, streamed)
    if chosen is None:
        raise ValueError(f"skinny_pdl.cu takes no K = {k} at M = {m} (see plan)")
    if rms is not None and chosen.streamed:
        raise ValueError(f"skinny_pdl.cu's held kernel takes no K = {k} at M = {m}: a folded RMSNorm needs it")
    return _call(x, w, b, out, n, chosen.steps, chosen.streamed, residual=residual, norm=norm, append=append,
                 gelu=gelu, pdl=pdl, shared=chosen.shared, rms=rms)  # fmt: skip


def _why_not_x(what: str, x: torch.Tensor, w: torch.Tensor) -> str | None:
    """Why the held kernel's fused epilogue ``what`` cannot multiply ``x`` by ``w``: another dtype or
    K, or rows its 16-byte vector loads cannot read; None where it can."""
    if x.dtype != w.dtype or x.shape[1] != w.shape[1]:
        return f"x {list(x.shape)} {x.dtype} does not match the weight {list(w.shape)} {w.dtype}"
    if x.stride(1) != 1 or x.stride(0) % 8 or x.data_ptr() % 16:
        return f"skinny_pdl.cu's {what} needs 16-byte aligned x rows"
    return None


def _call(x, w, b, out, n: int, steps: int, streamed: bool = False, *, residual=None, norm=None, append=None,
          gelu=False, pdl=True, ffn=0, rope=None, shared=False, rms=None) -> torch.Tensor:  # fmt: skip
    """rooflint_skinny_pdl on x [M, K] and w, into out [M, n] (its arguments: skinny_pdl.cu's entry).
    ``norm`` (c1, c2, eps): a folded layer norm; ``append``: a skinny.KVAppend; ``ffn``: SwiGLU's up-row
    offset; ``rope``: (cos, sin, width, head_dim, start, tokens); ``rms``: the eps of an RMSNorm folded
    into w (fold_rms_norm)."""
    m, k = x.shape
    if rms is not None and (m > 8 or steps not in RMS_STEPS or (ffn and not shared and steps != 8)):
        raise ValueError(f"skinny_pdl.cu folds an RMSNorm at M <= 8 and {RMS_STEPS} steps, not M = {m} at {steps}")
    row_blocks = (n + 15) // 16
    pairs = shared_pairs(row_blocks, sm_count(x.device, on_cpu=132)) if shared and not ffn else (row_blocks + 1) // 2
    c1, c2, eps = norm if norm is not None else (None, None, 0.0 if rms is None else rms)
    kv = append
    cos, sin, width, head_dim, start, tokens = rope if rope is not None else (None, None, 0, 0, 0, 0)
    cuda_build.load(SKINNY_PDL_CU).launch(
        "rooflint_skinny_pdl", x, w, b, residual, out, c1, c2,
        kv.slots if kv else None, kv.k_rows if kv else None, kv.v_rows if kv else None,
        m, n, k, x.stride(0), residual.stride(0) if residual is not None else 0, out.stride(0),
        kv.start if kv else 0, kv.heads * kv.head_dim if kv else 0, kv.heads if kv else 0, kv.head_dim if kv else 0,
        steps, int(streamed), int(gelu), int(pdl), float(eps), cuda_dtype(x.dtype), ffn,
        cos, sin, width, head_dim, start, tokens, int(shared), pairs, int(rms is not None),
    )  # fmt: skip
    return out


def rope_steps(k: int, m: int) -> int:
    """The held kernel's k16 steps a warp with RoPE in its epilogue (built at 16 and 8 steps only, the
    shares a Llama QKV projection's K takes); 0 where neither splits K at M rows."""
    least = 4 if m <= 8 else 8
    for steps in (16, 8) if m <= 8 else (8,):
        warps, rest = divmod(k, 16 * steps)
        if rest == 0 and least <= warps <= MAX_WARPS:
            return steps
    return 0


def why_not_rope(m: int, w: torch.Tensor, rope_width: int, head_dim: int) -> str | None:
    """Why ``qkv_rope`` cannot take the QKV weight ``w`` [N, K] at M rows with RoPE over its first
    ``rope_width`` outputs (heads of ``head_dim``), or None where it can."""
    why = why_not_pairs("skinny_pdl.cu's RoPE epilogue", rope_width, w.shape[0], head_dim)
    return why or _why_not_held("RoPE epilogue", m, w, rope_steps(w.shape[1], m), "16 or 8 steps x 4-16 warps")


def qkv_rope(x, w, b, cos, sin, start: int, tokens: int, rope_width: int, head_dim: int, append=None, out=None,
             pdl: bool = False, rms=None) -> torch.Tensor:  # fmt: skip
    """x @ w^T + b [M, N] with outputs [0, rope_width) (the q and K heads of ``head_dim``) rotated by
    RoPE (rotate-half; row m is position start + m % tokens of cos, sin [positions, head_dim]), and with
    ``append`` (skinny.KVAppend) the rotated K and the V columns written to the paged cache. The GEMM's
    outputs are rounded to x's dtype before the rotation, as the unfused projection's are."""
    m, k = x.shape
    n = w.shape[0]
    why = why_not_rope(m, w, rope_width, head_dim) or _why_not_x("RoPE epilogue", x, w)
    if why is None and (cos.dtype != w.dtype or sin.dtype != w.dtype):
        why = f"cos {cos.dtype} and sin {sin.dtype} must have the weight's dtype {w.dtype}"
    if why is None and (cos.shape[-1] != head_dim or not cos.is_contiguous() or not sin.is_contiguous()):
        why = f"cos and sin must be contiguous [positions, {head_dim}]"
    if why:
        raise ValueError(why)
    out = torch.empty((m, n), dtype=x.dtype, device=x.device) if out is None else out
    rope = (cos, sin, rope_width, head_dim, start, tokens)
    shared = shared_pays(k, m, (n + 31) // 32, x.device)
    return _call(x, w, b, out, n, shared or rope_steps(k, m), append=append, pdl=pdl, rope=rope, shared=bool(shared),
                 rms=rms)  # fmt: skip


def qkv_rope_reference(x, w, b, cos, sin, start: int, tokens: int, rope_width: int, head_dim: int, append=None,
                       compute: torch.dtype = torch.float64) -> torch.Tensor:  # fmt: skip
    """``qkv_rope`` in PyTorch: the product in ``compute`` rounded once to x's dtype (as the unfused
    projection's output is), q and K rotated in ``compute`` and rounded once, and ``append``'s K and V
    rows written to their slots."""
    m = x.shape[0]
    y = torch.nn.functional.linear(x.to(compute), w.to(compute), None if b is None else b.to(compute)).to(x.dtype)
    positions = start + torch.arange(m, device=x.device) % tokens
    c, s = cos[positions].to(compute)[:, None, :], sin[positions].to(compute)[:, None, :]
    heads = y[:, :rope_width].to(compute).view(m, -1, head_dim)
    half = head_dim // 2
    rotated = heads * c + torch.cat((-heads[..., half:], heads[..., :half]), dim=-1) * s
    y[:, :rope_width] = rotated.reshape(m, rope_width).to(x.dtype)
    if append is not None:
        width = append.heads * append.head_dim
        slots = append.slots.reshape(-1)
        append.k_rows[slots] = y[:, append.start : append.start + width].reshape(-1, append.head_dim)
        append.v_rows[slots] = y[:, append.start + width : append.start + 2 * width].reshape(-1, append.head_dim)
    return y
