"""All transformer layers of a decode step in one persistent kernel (GPT-2's pre-norm block).

A decode step of GPT-2 124M at B=8 reads ~420 MB (weights and KV cache), 0.14 ms at 3 TB/s, yet
as a chain of ~77 kernels it took 0.42 ms on an H100 (reports/models): each kernel of a few
microseconds pays a launch, a DRAM round trip before its first bytes arrive, and a drain at its
end, and nothing overlaps those with the next kernel's stream. (An L2 prefetch across kernel
boundaries bought nothing; PDL with each GEMM's weights held in registers across the wait later
cut the kernel-per-op step to 0.30 ms and stays the default: docs/perf-notes/models.md.)

Here one program per SM runs every layer. A layer is five phases separated by grid barriers,
each phase a loop over work items that the programs share round-robin:
1. layer norm folded into the QKV projection, K and V appended to the paged cache (gelu_linear/skinny.py);
2. decode attention over the paged cache, split over the context, the last split of each head
   combining the partials (decode_attention's online softmax);
3. output projection + residual, split over K (its N = d gives too few items);
4. layer norm folded into the MLP up-projection + GELU;
5. MLP down-projection + residual, split over K.
What makes it fast is that weights and cache pages do not depend on the phase before them: each
program asks L2 for the bytes of its items one or two phases ahead (cp.async.bulk.prefetch.L2,
sm_90), so DRAM streams through the barriers while the phases themselves read L2.

The barrier needs every program resident at once: the grid is at most one program per SM and the
kernel runs alone on its stream (a CUDA graph replays the step's kernels in order). Under
Triton's CPU interpreter programs run one after another, so it launches one program, which does
every item: the work decomposition is tested there, not the concurrency.

With STAMPS, program 0 writes its SM clock after each barrier: the phases' shares of the kernel's
time, which the model's attribution splits the kernel's profiled time by (models/attribution.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rooflint.core.triton_compat import interpreting, tl, triton
from rooflint.kernels import sm_count
from rooflint.kernels.common.arrival import last_to_arrive, rearm
from rooflint.kernels.decode_attention import LOG2E
from rooflint.kernels.decode_attention.triton import attend_chunk, combine
from rooflint.kernels.gelu_linear.skinny import (
    MAX_ROWS,
    apply_norm,
    epilogue,
    epilogue_operands,
    fold_layer_norm,
    stream_w,
    sum_splits,
)

PHASES = ("layer_norm+qkv_proj+kv_append", "attention", "out_proj+residual", "layer_norm+mlp_up_gelu",
          "mlp_down+residual")  # fmt: skip
BLOCK_K = 128  # K step of the weight streams (the skinny kernel's measured best at GPT-2's shapes)
BLOCK_ROWS = 16  # rows of W per GEMM item: the MMA's M side, which the X rows' 16 face
BLOCK_KEYS = 64  # keys per attention tile
MAX_SPLITS = 16  # context splits of one head's attention


@dataclass(frozen=True)
class LayerStack:
    """Every layer's weights stacked [L, ...] so that the kernel walks layers by pointer offsets;
    the layer norms folded into the GEMMs after them (fold_layer_norm)."""

    qkv_w: torch.Tensor  # [L, 3d, d], ln_1 folded
    qkv_c1: torch.Tensor  # [L, 3d] fp32
    qkv_c2: torch.Tensor  # [L, 3d] fp32 (ln_1's beta and the QKV bias)
    proj_w: torch.Tensor  # [L, d, d]
    proj_b: torch.Tensor  # [L, d]
    fc_w: torch.Tensor  # [L, ffn, d], ln_2 folded
    fc_c1: torch.Tensor  # [L, ffn] fp32
    fc_c2: torch.Tensor  # [L, ffn] fp32
    down_w: torch.Tensor  # [L, d, ffn]
    down_b: torch.Tensor  # [L, d]

    @classmethod
    def of(cls, layers) -> LayerStack:
        """From layers with GPT-2's fields (models/gpt2.py Layer: ln1_w, ln1_b, qkv_w, ... down_b)."""
        qkv = [fold_layer_norm(layer.ln1_w, layer.ln1_b, layer.qkv_w, layer.qkv_b) for layer in layers]
        fc = [fold_layer_norm(layer.ln2_w, layer.ln2_b, layer.fc_w, layer.fc_b) for layer in layers]

        def stack(tensors):
            return torch.stack(list(tensors)).contiguous()

        return cls(
            stack(f.w for f in qkv), stack(f.c1 for f in qkv), stack(f.c2 for f in qkv),
            stack(layer.proj_w for layer in layers), stack(layer.proj_b for layer in layers),
            stack(f.w for f in fc), stack(f.c1 for f in fc), stack(f.c2 for f in fc),
            stack(layer.down_w for layer in layers), stack(layer.down_b for layer in layers),
        )  # fmt: skip

    @property
    def layers(self) -> int:
        return self.qkv_w.shape[0]

    @property
    def hidden(self) -> int:
        return self.qkv_w.shape[2]

    @property
    def ffn(self) -> int:
        return self.fc_w.shape[1]


@dataclass(frozen=True)
class Plan:
    """Launch shape: programs and the d-wide projections' K splits (the attention's context splits
    follow from the cache length at each call: attention_splits)."""

    programs: int  # at most as many as can be resident at once (grid barrier): SMs x per SM
    proj_splits: int
    down_splits: int
    warps: int = 4
    stages: int = 3
    max_registers: int | None = None  # per thread, where more than two programs share an SM


def plan(hidden: int, ffn: int, programs: int, warps: int = 4, stages: int = 3, max_registers=None) -> Plan:
    """Items per phase near a multiple of the programs: BLOCK_ROWS-row tiles of W, and K split so
    that the d-wide projections (48 tiles at d=768) still give every program work."""
    tiles_out = triton.cdiv(hidden, BLOCK_ROWS)
    return Plan(programs, _splits(hidden, tiles_out, programs), _splits(ffn, tiles_out, programs), warps, stages,
                max_registers)  # fmt: skip


def _splits(k: int, tiles: int, programs: int) -> int:
    """K splits of whole BLOCK_K steps for ``tiles`` output tiles: enough for every program, at most 8."""
    want = max(1, min(triton.cdiv(k, BLOCK_K), triton.cdiv(programs, tiles), 8))
    return triton.cdiv(k, split_chunk(k, want))


def split_chunk(k: int, splits: int) -> int:
    """K elements per split: whole BLOCK_K steps."""
    return triton.cdiv(triton.cdiv(k, splits), BLOCK_K) * BLOCK_K


def attention_splits(rows: int, heads: int, length: int, programs: int, want: int | None = None) -> tuple[int, int]:
    """(splits, chunk): whole key tiles per split, about two items per program (or ``want`` splits)."""
    tiles = triton.cdiv(length, BLOCK_KEYS)
    want = want or max(1, triton.cdiv(2 * programs, rows * heads))
    splits = max(1, min(want, tiles, MAX_SPLITS))
    chunk = triton.cdiv(tiles, splits) * BLOCK_KEYS
    return triton.cdiv(length, chunk), chunk


class Workspace:
    """Activations, partials, arrival counters and the grid barrier of one (rows, model, device).

    Counters are left at zero by their last arrival and the barrier's count by its last arrival,
    so one workspace serves every step and every CUDA-graph replay."""

    def __init__(self, rows: int, stack: LayerStack, heads: int, device, dtype, out_splits: int) -> None:
        d, f = stack.hidden, stack.ffn
        self.qkv = torch.empty((rows, 3 * d), dtype=dtype, device=device)
        self.attn = torch.empty((rows, d), dtype=dtype, device=device)
        self.hidden = torch.empty((rows, f), dtype=dtype, device=device)
        self.part_acc = torch.empty((rows * heads, MAX_SPLITS, d // heads), dtype=torch.float32, device=device)
        self.part_ml = torch.empty((rows * heads, MAX_SPLITS, 2), dtype=torch.float32, device=device)
        self.head_count = torch.zeros(rows * heads, dtype=torch.int32, device=device)
        self.gemm_part = torch.empty((out_splits, d, MAX_ROWS), dtype=torch.float32, device=device)
        self.gemm_count = torch.zeros(triton.cdiv(d, BLOCK_ROWS), dtype=torch.int32, device=device)
        self.barrier = torch.zeros(2, dtype=torch.int32, device=device)  # arrivals, generation
        self.stamps = torch.zeros(5 * stack.layers + 1, dtype=torch.int64, device=device)


@triton.jit
def _clock():
    return tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)


@triton.jit
def _grid_sync(bar_ptr, programs, stamp_ptr, index, STAMPS: tl.constexpr, ASM: tl.constexpr):
    """Every program's writes so far visible to every program: a sense-counting grid barrier.

    The last of ``programs`` arrivals resets the count and bumps the generation; the others poll
    the generation with acquire loads (not atomics: a read-modify-write per poll from every program
    queues at the one L2 slice that owns the line, behind the arrivals it is waiting for) and back
    off between polls. The CTA barrier before orders all threads' stores before the release.
    Without ASM (the interpreter, which has no inline assembly and runs one program) atomics stand in."""
    tl.debug_barrier()
    if ASM:
        generation = _load_acquire(bar_ptr + 1)
    else:
        generation = tl.atomic_add(bar_ptr + 1, 0, sem="acquire")
    if tl.atomic_add(bar_ptr, 1, sem="acq_rel") == programs - 1:
        tl.atomic_xchg(bar_ptr, 0, sem="relaxed")
        tl.atomic_add(bar_ptr + 1, 1, sem="release")
    elif ASM:
        _wait_while_equal(bar_ptr + 1, generation)
    else:
        while tl.atomic_add(bar_ptr + 1, 0, sem="acquire") == generation:
            pass
    tl.debug_barrier()
    if STAMPS:
        if tl.program_id(0) == 0:
            tl.store(stamp_ptr + index, _clock())


@triton.jit
def _load_acquire(ptr):
    return tl.inline_asm_elementwise("ld.acquire.gpu.global.b32 $0, [$1];", "=r,l", [ptr], dtype=tl.int32,
                                     is_pure=False, pack=1)  # fmt: skip


@triton.jit
def _wait_while_equal(ptr, value):
    """Poll *ptr (acquire) until it differs from ``value``, sleeping ~100 ns between polls."""
    return tl.inline_asm_elementwise(
        """{
        .reg .pred p;
        POLL:
        ld.acquire.gpu.global.b32 $0, [$1];
        setp.eq.s32 p, $0, $2;
        @!p bra DONE;
        nanosleep.u32 100;
        bra POLL;
        DONE:
        }""",
        "=r,l,r", [ptr, value], dtype=tl.int32, is_pure=False, pack=1,
    )  # fmt: skip


@triton.jit
def _prefetch_w(w_ptr, N, K, k_chunk, pid, programs, BLOCK_N: tl.constexpr, SPLITS: tl.constexpr,
                LANES: tl.constexpr):  # fmt: skip
    """Ask L2 for the W rows of this program's items of a GEMM phase (tile x K split): one bulk
    prefetch per row segment, from one lane each (LANES = the program's threads, so that no
    request is issued by several threads holding copies of the same element)."""
    lane = tl.arange(0, LANES)
    size = w_ptr.dtype.element_ty.primitive_bitwidth // 8
    for item in range(pid, tl.cdiv(N, BLOCK_N) * SPLITS, programs):
        rows = (item // SPLITS) * BLOCK_N + lane
        k_begin = (item % SPLITS) * k_chunk
        nbytes = (tl.minimum(k_begin + k_chunk, K) - k_begin) * size
        _prefetch_l2_if(w_ptr + tl.minimum(rows, N - 1).to(tl.int64) * K + k_begin, lane * 0 + nbytes,
                        (lane < BLOCK_N) & (rows < N))  # fmt: skip


@triton.jit
def _prefetch_kv(k_ptr, v_ptr, table_ptr, table_stride, length, chunk, items, splits, pid, programs,
                 HEAD_DIM: tl.constexpr, PAGE: tl.constexpr, LANES: tl.constexpr):  # fmt: skip
    """Ask L2 for the cache pages of this program's attention items, a page per lane."""
    lane = tl.arange(0, LANES)
    nbytes = lane * 0 + PAGE * HEAD_DIM * (k_ptr.dtype.element_ty.primitive_bitwidth // 8)
    for item in range(pid, items, programs):
        row = table_ptr + (item // splits) * table_stride
        start = (item % splits) * chunk
        last_page = (tl.minimum(start + chunk, length) - 1) // PAGE
        for p0 in range(start // PAGE, last_page + 1, LANES):
            wanted = p0 + lane <= last_page
            pages = tl.load(row + p0 + lane, mask=wanted, other=0).to(tl.int64)
            _prefetch_l2_if(k_ptr + pages * PAGE * HEAD_DIM, nbytes, wanted)
            _prefetch_l2_if(v_ptr + pages * PAGE * HEAD_DIM, nbytes, wanted)


@triton.jit
def _prefetch_l2_if(addresses, nbytes, wanted):
    """cp.async.bulk.prefetch.L2 (sm_90) of ``nbytes`` at each address whose ``wanted`` is set."""
    return tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.s32 p, $3, 0; mov.u32 $0, 0; @p cp.async.bulk.prefetch.L2.global [$1], $2; }",
        "=r,l,r,r", [addresses, nbytes, wanted.to(tl.int32)], dtype=tl.int32, is_pure=False, pack=1,
    )  # fmt: skip


@triton.jit
def _norm_gemm_phase(
    x_ptr, w_ptr, c1_ptr, c2_ptr, y_ptr, slot_ptr, kc_ptr, vc_ptr, M, N, K, eps, pid, programs,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GELU: tl.constexpr,
    APPEND: tl.constexpr, HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    """y = act(LN(x) W^T) for 16-row tiles of W; APPEND also scatters the K and V columns (those
    after the first K columns of q) into the cache slots of the new token."""
    offs_m = tl.arange(0, BLOCK_M)
    m_mask = offs_m < M
    x_rows = x_ptr + offs_m[:, None] * K
    for tile in range(pid, tl.cdiv(N, BLOCK_N), programs):
        offs_n = tile * BLOCK_N + tl.arange(0, BLOCK_N)
        n_mask = offs_n < N
        out_mask = n_mask[:, None] & m_mask[None, :]
        bias, res, slot, in_k, in_v, col = epilogue_operands(
            c2_ptr, x_ptr, slot_ptr, offs_n, offs_m, n_mask, out_mask, 0, K, K,
            BLOCK_N, BLOCK_M, False, False, APPEND, HEADS, HEAD_DIM, "",
        )  # fmt: skip
        c1 = tl.load(c1_ptr + offs_n, mask=n_mask, other=0.0)
        c2 = tl.load(c2_ptr + offs_n, mask=n_mask, other=0.0)
        acc, s1, s2 = stream_w(x_rows, w_ptr + offs_n.to(tl.int64)[:, None] * K, 0, K, K, m_mask, n_mask,
                                x_ptr + offs_m * K, BLOCK_M, BLOCK_N, BLOCK_K, K % BLOCK_K == 0, True, UPCAST,
                                ".cg")  # fmt: skip
        acc = apply_norm(acc, s1, s2, K, eps, c1, c2)
        epilogue(acc, bias, res, slot, in_k, in_v, col, offs_n, offs_m, out_mask, y_ptr, kc_ptr, vc_ptr, N,
                  False, GELU, False, APPEND, HEAD_DIM)  # fmt: skip


@triton.jit
def _residual_gemm_phase(
    a_ptr, w_ptr, b_ptr, x_ptr, part_ptr, count_ptr, M, N, K, k_chunk, pid, programs,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, SPLITS: tl.constexpr,
    UPCAST: tl.constexpr,
):  # fmt: skip
    """x += a W^T + b, in place, K split SPLITS ways (the last split of each tile adds)."""
    offs_m = tl.arange(0, BLOCK_M)
    m_mask = offs_m < M
    a_rows = a_ptr + offs_m[:, None] * K
    for item in range(pid, tl.cdiv(N, BLOCK_N) * SPLITS, programs):
        tile = item // SPLITS
        k_begin = (item % SPLITS) * k_chunk
        offs_n = tile * BLOCK_N + tl.arange(0, BLOCK_N)
        n_mask = offs_n < N
        out_mask = n_mask[:, None] & m_mask[None, :]
        bias, res, slot, in_k, in_v, col = epilogue_operands(
            b_ptr, x_ptr, b_ptr, offs_n, offs_m, n_mask, out_mask, N, 0, 0,
            BLOCK_N, BLOCK_M, True, True, False, 1, 1, ".cg",
        )  # fmt: skip
        acc, s1, s2 = stream_w(a_rows, w_ptr + offs_n.to(tl.int64)[:, None] * K, k_begin,
                                tl.minimum(k_begin + k_chunk, K), K, m_mask, n_mask, a_ptr, BLOCK_M, BLOCK_N,
                                BLOCK_K, K % BLOCK_K == 0, False, UPCAST, ".cg")  # fmt: skip
        last = True
        if SPLITS > 1:
            last, acc = sum_splits(acc, part_ptr, count_ptr, tile, item % SPLITS, N, offs_n, offs_m, out_mask,
                                    BLOCK_M, SPLITS)  # fmt: skip
        if last:
            epilogue(acc, bias, res, slot, in_k, in_v, col, offs_n, offs_m, out_mask, x_ptr, x_ptr, x_ptr, N,
                      True, False, True, False, 1)  # fmt: skip


@triton.jit
def _attention_phase(
    qkv_ptr, k_ptr, v_ptr, table_ptr, out_ptr, acc_ptr, ml_ptr, count_ptr, table_stride, length, chunk,
    splits, qk_scale, pid, programs, M,
    HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_KEYS: tl.constexpr, PAGE: tl.constexpr,
    MAX_SPLITS: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    """out[b, h] = softmax(q k^T) v over the first ``length`` cached tokens, split over the context."""
    g = tl.arange(0, 16)  # one query row per head, padded to tl.dot's 16
    d = tl.arange(0, HEAD_DIM)
    s = tl.arange(0, MAX_SPLITS)
    g_mask = g < 1
    for item in range(pid, M * HEADS * splits, programs):
        bh = item // splits
        split = item % splits
        start = split * chunk
        end = tl.minimum(start + chunk, length)
        page_row = table_ptr + bh * table_stride
        first = start + tl.arange(0, BLOCK_KEYS)
        page_next = tl.load(page_row + first // PAGE, mask=first < end, other=0)
        q_offs = (bh // HEADS) * 3 * HEADS * HEAD_DIM + (bh % HEADS) * HEAD_DIM
        q = tl.load(qkv_ptr + q_offs + g[:, None] * HEAD_DIM + d[None, :], mask=g_mask[:, None], other=0.0,
                    cache_modifier=".cg")  # fmt: skip
        m_i, l_i, acc = attend_chunk(q, k_ptr, v_ptr, page_row, page_next, 0, start, end, qk_scale, 16, HEAD_DIM,
                                      BLOCK_KEYS, True, PAGE, UPCAST, ".cg")  # fmt: skip
        dst = out_ptr + (bh // HEADS) * HEADS * HEAD_DIM + (bh % HEADS) * HEAD_DIM
        out = tl.sum(tl.where(g_mask[:, None], acc, 0.0), axis=0) / tl.sum(tl.where(g_mask, l_i, 0.0), axis=0)
        if splits == 1:
            tl.store(dst + d, out.to(out_ptr.dtype.element_ty))
        else:
            part = bh * MAX_SPLITS + split
            tl.store(acc_ptr + part * HEAD_DIM + g[:, None] * 0 + d[None, :], acc, mask=g_mask[:, None])
            tl.store(ml_ptr + part * 2 + g, m_i, mask=g_mask)
            tl.store(ml_ptr + part * 2 + 1 + g, l_i, mask=g_mask)
            if last_to_arrive(count_ptr, bh, splits):
                parts = bh * MAX_SPLITS + s
                s_mask = s < splits
                m = tl.load(ml_ptr + parts * 2, mask=s_mask, other=float("-inf"), cache_modifier=".cg")
                row_sum = tl.load(ml_ptr + parts * 2 + 1, mask=s_mask, other=0.0, cache_modifier=".cg")
                accs = tl.load(acc_ptr + parts[:, None] * HEAD_DIM + d[None, :], mask=s_mask[:, None], other=0.0,
                               cache_modifier=".cg")  # fmt: skip
                tl.store(dst + d, combine(m, row_sum, accs).to(out_ptr.dtype.element_ty))
                rearm(count_ptr, bh)


@triton.jit
def _decode_layers_kernel(
    x_ptr, qkv_ptr, attn_ptr, hid_ptr,
    qkv_w, qkv_c1, qkv_c2, proj_w, proj_b, fc_w, fc_c1, fc_c2, down_w, down_b,
    k_pool, v_pool, table_ptr, slot_ptr,
    part_acc, part_ml, head_count, gemm_part, gemm_count, bar_ptr, stamp_ptr,
    M, layers, pool_stride, table_stride, length, chunk, splits, eps, qk_scale, proj_chunk, down_chunk,
    D: tl.constexpr, F: tl.constexpr, HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, PAGE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr, BLOCK_KEYS: tl.constexpr, MAX_SPLITS: tl.constexpr,
    PROJ_SPLITS: tl.constexpr, DOWN_SPLITS: tl.constexpr,
    UPCAST: tl.constexpr, PREFETCH: tl.constexpr, STAMPS: tl.constexpr, LANES: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    heads_items = M * HEADS * splits
    if STAMPS:
        if pid == 0:
            tl.store(stamp_ptr, _clock())
    if PREFETCH:
        _prefetch_w(qkv_w, 3 * D, D, D, pid, programs, BLOCK_N, 1, LANES)
        _prefetch_kv(k_pool, v_pool, table_ptr, table_stride, length, chunk, heads_items, splits, pid, programs,
                     HEAD_DIM, PAGE, LANES)  # fmt: skip
    for layer in range(layers):
        # Every stacked tensor advances by one layer; int64, as gpt2-xl's pools pass 2^31 elements.
        at = tl.cast(layer, tl.int64)
        w_qkv, c1_qkv, c2_qkv = qkv_w + at * 3 * D * D, qkv_c1 + at * 3 * D, qkv_c2 + at * 3 * D
        w_proj, b_proj = proj_w + at * D * D, proj_b + at * D
        w_fc, c1_fc, c2_fc = fc_w + at * F * D, fc_c1 + at * F, fc_c2 + at * F
        w_down, b_down = down_w + at * D * F, down_b + at * D
        k_layer, v_layer = k_pool + at * pool_stride, v_pool + at * pool_stride
        stamp = stamp_ptr + 1 + layer * 5
        # 1. ln_1 + QKV, K and V into the cache. Meanwhile L2 fetches the output projection.
        if PREFETCH:
            _prefetch_w(w_proj, D, D, proj_chunk, pid, programs, BLOCK_N, PROJ_SPLITS, LANES)
        _norm_gemm_phase(x_ptr, w_qkv, c1_qkv, c2_qkv, qkv_ptr, slot_ptr, k_layer, v_layer, M, 3 * D, D, eps, pid,
                         programs, BLOCK_M, BLOCK_N, BLOCK_K, False, True, HEADS, HEAD_DIM, UPCAST)  # fmt: skip
        _grid_sync(bar_ptr, programs, stamp, 0, STAMPS, not UPCAST)
        # 2. attention; meanwhile the MLP up-projection.
        if PREFETCH:
            _prefetch_w(w_fc, F, D, D, pid, programs, BLOCK_N, 1, LANES)
        _attention_phase(qkv_ptr, k_layer, v_layer, table_ptr, attn_ptr, part_acc, part_ml, head_count,
                         table_stride, length, chunk, splits, qk_scale, pid, programs, M,
                         HEADS, HEAD_DIM, BLOCK_KEYS, PAGE, MAX_SPLITS, UPCAST)  # fmt: skip
        _grid_sync(bar_ptr, programs, stamp, 1, STAMPS, not UPCAST)
        # 3. output projection + residual; meanwhile the MLP down-projection.
        if PREFETCH:
            _prefetch_w(w_down, D, F, down_chunk, pid, programs, BLOCK_N, DOWN_SPLITS, LANES)
        _residual_gemm_phase(attn_ptr, w_proj, b_proj, x_ptr, gemm_part, gemm_count, M, D, D, proj_chunk, pid,
                             programs, BLOCK_M, BLOCK_N, BLOCK_K, PROJ_SPLITS, UPCAST)  # fmt: skip
        _grid_sync(bar_ptr, programs, stamp, 2, STAMPS, not UPCAST)
        # 4. ln_2 + MLP up + GELU; meanwhile the next layer's QKV weights and cache pages.
        if PREFETCH:
            if layer + 1 < layers:
                _prefetch_w(w_qkv + 3 * D * D, 3 * D, D, D, pid, programs, BLOCK_N, 1, LANES)
                _prefetch_kv(k_layer + pool_stride, v_layer + pool_stride, table_ptr, table_stride, length, chunk,
                             heads_items, splits, pid, programs, HEAD_DIM, PAGE, LANES)  # fmt: skip
        _norm_gemm_phase(x_ptr, w_fc, c1_fc, c2_fc, hid_ptr, slot_ptr, k_layer, v_layer, M, F, D, eps, pid,
                         programs, BLOCK_M, BLOCK_N, BLOCK_K, True, False, HEADS, HEAD_DIM, UPCAST)  # fmt: skip
        _grid_sync(bar_ptr, programs, stamp, 3, STAMPS, not UPCAST)
        # 5. MLP down + residual.
        _residual_gemm_phase(hid_ptr, w_down, b_down, x_ptr, gemm_part, gemm_count, M, D, F, down_chunk, pid,
                             programs, BLOCK_M, BLOCK_N, BLOCK_K, DOWN_SPLITS, UPCAST)  # fmt: skip
        _grid_sync(bar_ptr, programs, stamp, 4, STAMPS, not UPCAST)


def decode_layers(
    x: torch.Tensor,
    stack: LayerStack,
    k_pool: torch.Tensor,
    v_pool: torch.Tensor,
    block_table: torch.Tensor,
    slots: torch.Tensor,
    length: int,
    heads: int,
    eps: float,
    ws: Workspace,
    launch: Plan,
    stamps: bool = False,
    splits: int | None = None,
) -> torch.Tensor:
    """Run every layer on the residual stream x [M <= 16, d] in place and return it.

    k_pool / v_pool are the stacked caches [L, pages, PAGE, 1, head_dim] (one kv head per page),
    block_table int32 [M * heads, pages per head], slots int64 [M * heads]: where the new token's
    K and V go; ``length`` counts the cached tokens after this one is appended. ``splits`` overrides
    the attention's context splits (tests)."""
    m, d = x.shape
    head_dim = d // heads
    if m > MAX_ROWS or not x.is_contiguous():
        raise ValueError(f"decode_layers takes a contiguous x of at most {MAX_ROWS} rows")
    if (ws.qkv.shape != (ws.qkv.shape[0], 3 * d) or ws.qkv.shape[0] < m or ws.hidden.shape[1] != stack.ffn
            or ws.part_acc.shape[0] < m * heads
            or ws.gemm_part.shape[0] < max(launch.proj_splits, launch.down_splits)):  # fmt: skip
        raise ValueError("the workspace was built for fewer rows, another model or fewer K splits than this call")
    page = k_pool.shape[2]
    splits, chunk = attention_splits(m, heads, length, launch.programs, splits)
    proj_chunk, down_chunk = split_chunk(d, launch.proj_splits), split_chunk(stack.ffn, launch.down_splits)
    if triton.cdiv(d, proj_chunk) != launch.proj_splits or triton.cdiv(stack.ffn, down_chunk) != launch.down_splits:
        raise ValueError("the plan's K splits do not divide the projections into whole K steps")
    prefetch = _can_prefetch(x.device, stack, k_pool)
    _decode_layers_kernel[(launch.programs,)](
        x, ws.qkv, ws.attn, ws.hidden,
        stack.qkv_w, stack.qkv_c1, stack.qkv_c2, stack.proj_w, stack.proj_b,
        stack.fc_w, stack.fc_c1, stack.fc_c2, stack.down_w, stack.down_b,
        k_pool, v_pool, block_table, slots,
        ws.part_acc, ws.part_ml, ws.head_count, ws.gemm_part, ws.gemm_count, ws.barrier, ws.stamps,
        m, stack.layers, k_pool[0].numel(), block_table.stride(0), length, chunk, splits, eps,
        LOG2E / head_dim**0.5, proj_chunk, down_chunk,
        D=d, F=stack.ffn, HEADS=heads, HEAD_DIM=head_dim, PAGE=page,
        BLOCK_M=MAX_ROWS, BLOCK_N=BLOCK_ROWS,
        BLOCK_K=BLOCK_K, BLOCK_KEYS=BLOCK_KEYS, MAX_SPLITS=MAX_SPLITS,
        PROJ_SPLITS=launch.proj_splits, DOWN_SPLITS=launch.down_splits,
        UPCAST=interpreting(), PREFETCH=prefetch, STAMPS=stamps and not interpreting(), LANES=32 * launch.warps,
        num_warps=launch.warps, num_stages=launch.stages, **_cooperative(),
        **({"maxnreg": launch.max_registers} if launch.max_registers else {}),
    )  # fmt: skip
    return x


def _cooperative() -> dict:
    """A cooperative launch where Triton offers one: the driver then refuses a grid whose programs
    cannot all be resident at once (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE) instead of the grid
    barrier waiting forever for programs that never start."""
    from triton.backends.nvidia.compiler import CUDAOptions

    if interpreting() or "launch_cooperative_grid" not in CUDAOptions.__dataclass_fields__:
        return {}
    return {"launch_cooperative_grid": True}


def phase_shares(stamps: torch.Tensor) -> dict[str, tuple[float, int]] | None:
    """{phase: (share of the kernel's time, calls)} from a stamped call's clocks (program 0's SM
    clock at the start and after each barrier); None if the last call kept no clock."""
    clocks = stamps.cpu().tolist()
    if clocks[0] == 0 or any(b <= a for a, b in zip(clocks, clocks[1:])):
        return None
    spans = [b - a for a, b in zip(clocks, clocks[1:])]
    layers = len(spans) // len(PHASES)
    total = clocks[-1] - clocks[0]
    return {name: (sum(spans[i :: len(PHASES)]) / total, layers) for i, name in enumerate(PHASES)}


def default_plan(device, stack: LayerStack, per_sm: int = 2) -> Plan:
    """``per_sm`` programs per SM on a GPU (two interleave their items' memory round trips; the
    kernel's 245 registers x 128 threads fit twice in an SM's 64 K); one program under the
    interpreter (it runs programs in turn)."""
    programs = 1 if interpreting() else per_sm * sm_count(device, 1)
    return plan(stack.hidden, stack.ffn, programs)


def _can_prefetch(device, stack: LayerStack, k_pool: torch.Tensor) -> bool:
    """Bulk L2 prefetch needs sm_90 and 16-byte aligned, 16-byte sized rows and pages."""
    if device.type != "cuda" or interpreting() or torch.cuda.get_device_capability(device)[0] < 9:
        return False
    size = stack.qkv_w.element_size()
    rows_ok = (stack.hidden * size) % 256 == 0 and (stack.ffn * size) % 256 == 0
    page_ok = (k_pool.shape[2] * k_pool.shape[-1] * k_pool.element_size()) % 16 == 0
    return rows_ok and page_ok
