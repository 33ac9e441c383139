"""The Llama family (Llama 3.x, Qwen 2.5, Mistral): RMSNorm, RoPE, grouped-query attention, SwiGLU.

One ModelSpec for every architecture of models/architectures.py: a built-in preset or any
config.json. The block, pre-norm with the residual stream kept apart as vLLM keeps it:
    h, r = rms_norm(x)                       (the first layer: r = x)
    q, k, v = qkv_proj(h); q, k = rope(q, k); a = attention(q, k, v) (GQA, appending K and V)
    h, r = add_rms_norm(o_proj(a), r)        (r += o; h = rms_norm(r): one pass over the rows)
    h = down_proj(swiglu(gate_up_proj(h)));  and the next layer's add_rms_norm adds it to r.
The final norm is one more add_rms_norm. q, k and v are one GEMM and gate and up another: their
weights are concatenated once and Hugging Face's modules are pointed at views of the result, so
the model is held once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rooflint.core.errors import UserError, VariantSkipped
from rooflint.core.family import Cost, element_size
from rooflint.kernels import attention, decode_attention, rmsnorm, swiglu
from rooflint.models import architectures
from rooflint.models.base import Dims, ModelSpec, Phase, require_transformers
from rooflint.models.gpt2 import INDEX_BYTES, _add, _scale, linear_cost

OPS = ("embedding", "rms_norm", "qkv_proj", "rope", "attention", "o_proj", "add_rms_norm", "gate_up_proj", "swiglu",
       "down_proj", "lm_head", "sample")  # fmt: skip


@dataclass
class LlamaLayer:
    attn_norm: torch.Tensor
    qkv_w: torch.Tensor  # [(H + 2 H_kv) D, d]: q rows, then k, then v
    qkv_b: torch.Tensor | None  # Qwen2's q, k, v biases
    o_w: torch.Tensor  # [d, H D]
    o_b: torch.Tensor | None
    mlp_norm: torch.Tensor
    gate_up_w: torch.Tensor  # [2 ffn, d]: gate rows, then up
    gate_up_b: torch.Tensor | None
    down_w: torch.Tensor  # [d, ffn]
    down_b: torch.Tensor | None


@dataclass
class LlamaWeights:
    embed: torch.Tensor  # [vocab, d]
    layers: list[LlamaLayer]
    norm: torch.Tensor
    head: torch.Tensor  # [vocab, d]; the embedding itself where tie_word_embeddings
    cos: torch.Tensor  # [positions, D] in the model's dtype, cat(freqs, freqs) as Hugging Face builds it
    sin: torch.Tensor
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    # longrope: the tables of its long factors, which HF uses for every position of a forward that
    # reaches past original_max_position_embeddings (``long_after``); None for every other rope_type
    long_cos: torch.Tensor | None = None
    long_sin: torch.Tensor | None = None
    long_after: int = 0

    def rope_tables_for(self, start: int, tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole [positions, D] cos and sin tables a forward over positions start..start+tokens-1
        rotates by: longrope's long ones once the forward reaches past its original length, as Hugging
        Face picks them per forward from its last position."""
        if self.long_cos is not None and start + tokens > self.long_after:
            return self.long_cos, self.long_sin
        return self.cos, self.sin


def inverse_frequencies(rope: dict, head_dim: int) -> tuple[torch.Tensor, float]:
    """RoPE's fp32 inverse frequencies [D/2] and cos/sin scale for rope_type default, linear or llama3.

    llama3 (Llama 3.1/3.2) keeps the high frequencies, divides the low ones (wavelengths longer
    than original_max / low_freq_factor) by ``factor``, and blends linearly between.
    """
    theta = float(rope.get("rope_theta", 10000.0))
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim)
    kind = rope.get("rope_type", "default")
    if kind == "linear":
        inv = inv / rope["factor"]
    elif kind == "llama3":
        factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
        original = rope["original_max_position_embeddings"]
        wavelength = 2 * math.pi / inv
        scaled = torch.where(wavelength > original / low, inv / factor, inv)
        smooth = (original / wavelength - low) / (high - low)
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        between = ~(wavelength < original / high) & ~(wavelength > original / low)
        inv = torch.where(between, blended, scaled)
    return inv, 1.0


def rope_frequencies(config, seq_len: int | None = None) -> tuple[torch.Tensor, float]:
    """fp32 inverse frequencies [D/2] and the cos/sin scale of a Hugging Face config's RoPE, for a
    forward whose last position is ``seq_len - 1`` (None: the length the model was built for).

    default, linear and llama3 are rooflint's own formula (checked bit for bit against HF's); yarn,
    longrope and dynamic come from HF's own ROPE_INIT_FUNCTIONS, so yarn's attention factor (its
    mscale on cos and sin), longrope's short or long factors and dynamic NTK's base are HF's.
    Dynamic NTK only grows its base past max_position_embeddings, where rooflint never runs (a run
    refuses --seq or --prompt + --new-tokens beyond it), so its frequencies are the init's.
    """
    rope = dict(config.rope_parameters or {})
    kind = rope.get("rope_type", "default")
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    if kind in ("default", "linear", "llama3"):
        return inverse_frequencies(rope, head_dim)
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    inv, scale = ROPE_INIT_FUNCTIONS[kind](config, "cpu", seq_len=seq_len)
    return inv.float(), float(scale)


def rope_tables(rope: dict, head_dim: int, positions: int, dtype: torch.dtype, device) -> tuple[torch.Tensor, ...]:
    """cos and sin [positions, D], computed in fp32 and rounded once to the model's dtype, as HF does."""
    return _tables(*inverse_frequencies(rope, head_dim), positions, dtype, device)


def config_rope_tables(config, positions: int, dtype: torch.dtype, device, seq_len: int | None = None):
    """rope_tables for any rope_type HF's Llama runs (rope_frequencies), from its config."""
    return _tables(*rope_frequencies(config, seq_len), positions, dtype, device)


# _tables' fp32 scratch at its peak, in bytes per [positions, D] element: the half-width angles (2),
# the whole angles (4), and sin and its scaled copy (4 + 4) while cos is already rounded and kept.
TABLE_SCRATCH = 14


def _tables(inv: torch.Tensor, scale: float, positions: int, dtype: torch.dtype, device) -> tuple[torch.Tensor, ...]:
    freqs = torch.arange(positions, dtype=torch.float32, device=device)[:, None] * inv.to(device)[None, :]
    angles = torch.cat((freqs, freqs), dim=-1)
    return (angles.cos() * scale).to(dtype), (angles.sin() * scale).to(dtype)


class Llama(ModelSpec):
    name = "llama"
    ops = OPS

    def __init__(self, configs: dict[str, dict[str, Any]] | None = None) -> None:
        self.configs = dict(architectures.PRESETS if configs is None else configs)

    # ---- building -----------------------------------------------------------------------
    def hf_config(self, config: str, layers: int | None = None):
        fields = dict(self.configs[config])
        architectures.check_architecture(fields.get("model_type"), config)
        if layers is not None:
            fields["num_hidden_layers"] = layers
        config_class = getattr(require_transformers(), architectures.ARCHITECTURES[fields["model_type"]][0])
        try:
            hf = config_class.from_dict(fields)
        except Exception as error:  # noqa: BLE001 - only the file's fields are at stake here
            # transformers validates the fields as it builds its config (a string rms_norm_eps, an odd
            # head_dim, a rope_scaling without its factor, an unknown torch_dtype): bad input, one line
            why = " ".join(str(error).split())
            raise UserError(f"the {config} config is not one transformers accepts: {why}") from None
        architectures.check_features(hf)
        return hf

    def hf_class_of(self, hf_config):
        return getattr(require_transformers(), architectures.ARCHITECTURES[hf_config.model_type][1])

    def hf_class(self):
        # Picked per config, also for a spec of one preset: a --weights checkpoint's own config.json
        # decides its class, after architectures' checks (a gpt2 one, read as LlamaConfig, took
        # Llama-2-7B's defaults for every field it lacks and built a 7B model until the OOM killer came).
        return _ByConfig(self)

    def config_name_of(self, hf_config) -> str:
        keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                "intermediate_size", "vocab_size")  # fmt: skip
        for name, fields in self.configs.items():
            if fields.get("model_type") == hf_config.model_type and all(
                getattr(hf_config, key) == fields[key] for key in keys
            ):
                return name
        return "custom"

    def dims(self, hf_config) -> Dims:
        heads = hf_config.num_attention_heads
        return Dims(
            layers=hf_config.num_hidden_layers,
            hidden=hf_config.hidden_size,
            heads=heads,
            kv_heads=hf_config.num_key_value_heads or heads,
            head_dim=getattr(hf_config, "head_dim", None) or hf_config.hidden_size // heads,
            ffn=hf_config.intermediate_size,
            vocab=hf_config.vocab_size,
            max_positions=hf_config.max_position_embeddings,
        )

    def norm_eps(self, hf_config) -> float:
        return hf_config.rms_norm_eps

    def rope_table_bytes(self, hf_config, size: int, fp32_cache: bool = False) -> tuple[int, int]:
        # extract_weights' cos and sin, [max_position_embeddings, head_dim] each however short the run
        # (longrope: a second pair), built in fp32 and rounded to the model's dtype. Hugging Face's
        # rotary embedding keeps only its inverse frequencies and computes cos and sin per forward.
        # FlashInfer's set keeps an fp32 [positions, D] cos/sin cache of each pair it rotates by.
        elements = hf_config.max_position_embeddings * self.dims(hf_config).head_dim
        pairs = 2 if _long_after(hf_config) else 1
        return pairs * elements * (2 * size + (4 if fp32_cache else 0)), TABLE_SCRATCH * elements

    def folded_weight_bytes(self, hf_config: Any, size: int) -> int:
        """ROOFLINT_NORM_IN_GEMM's folded copies, one per layer: the QKV weight (attn), the gate/up (mlp)."""
        from rooflint.models.llama_kernels import norm_folds

        dims, folds = self.dims(hf_config), norm_folds()
        rows = (dims.heads + 2 * dims.kv_heads) * dims.head_dim if "attn" in folds else 0
        rows += 2 * dims.ffn if "mlp" in folds else 0
        return dims.layers * rows * dims.hidden * size

    def kernel_set(self, name: str, dtype, device, head_dim: int, eps: float):
        from rooflint.models import library_sets, llama_kernels

        if name in library_sets.LIBRARY_SET_CLASSES:
            return library_sets.make_library_set(name, dtype, device, head_dim, eps)
        return llama_kernels.make_llama_kernel_set(name, dtype, device, head_dim, eps)

    @torch.no_grad()
    def extract_weights(self, hf_model) -> LlamaWeights:
        config = hf_model.config
        architectures.check_features(config)
        dims = self.dims(config)
        body = hf_model.model
        layers = []
        for block in body.layers:
            attn, mlp = block.self_attn, block.mlp
            qkv_w, qkv_b = _concatenate(attn.q_proj, attn.k_proj, attn.v_proj)
            gate_up_w, gate_up_b = _concatenate(mlp.gate_proj, mlp.up_proj)
            layers.append(
                LlamaLayer(block.input_layernorm.weight.detach(), qkv_w, qkv_b, attn.o_proj.weight.detach(),
                           _bias(attn.o_proj), block.post_attention_layernorm.weight.detach(), gate_up_w, gate_up_b,
                           mlp.down_proj.weight.detach(), _bias(mlp.down_proj))
            )  # fmt: skip
        embed = body.embed_tokens.weight.detach()
        cos, sin = config_rope_tables(config, dims.max_positions, embed.dtype, embed.device)
        weights = LlamaWeights(embed, layers, body.norm.weight.detach(), hf_model.lm_head.weight.detach(), cos, sin,
                               dims.heads, dims.kv_heads, dims.head_dim, dims.ffn)  # fmt: skip
        long_after = _long_after(config)
        if long_after:
            weights.long_after = long_after
            weights.long_cos, weights.long_sin = config_rope_tables(
                config, dims.max_positions, embed.dtype, embed.device, seq_len=long_after + 1
            )
        return weights

    # ---- running ------------------------------------------------------------------------
    def forward(self, weights: LlamaWeights, kernels: Any, ids, start, cache, rec, last_only=False):
        batch, tokens = ids.shape
        heads, d_head = weights.heads, weights.head_dim
        q_width = heads * d_head
        decoding = tokens == 1 and cache is not None
        fused = kernels.fusions(batch * tokens, decoding)
        swiglu_in_gemm, rope_in_gemm = "gate_up_swiglu" in fused, "qkv_rope" in fused
        # attn_norm_in_qkv / mlp_norm_in_gate_up: the QKV (gate/up) GEMM reads the residual stream and
        # normalizes it itself (gamma = the RMSNorm weight it folds into its own), and the GEMM before it
        # in the stream (down / o) adds its output to the stream in its epilogue: no norm kernel there.
        fold_attn, fold_mlp = "attn_norm_in_qkv" in fused, "mlp_norm_in_gate_up" in fused
        with rec("embedding"):
            x = kernels.token_embedding(ids, weights.embed)  # [B*T, d]
        if fold_attn:
            h = residual = x
        else:
            with rec("rms_norm"):
                h, residual = kernels.rms_norm(x, weights.layers[0].attn_norm, None)
        for index, layer in enumerate(weights.layers):
            if index and not fold_attn:
                with rec("add_rms_norm"):
                    h, residual = kernels.rms_norm(x, layer.attn_norm, residual)
            # Sets that fold no norm (the library sets among them) are called as before, without gamma.
            norm = {"gamma": layer.attn_norm} if fold_attn else {}
            if rope_in_gemm:  # q and K rotated and K and V appended in the QKV GEMM's epilogue: no rope kernel
                with rec("qkv_proj"):
                    q, k, v = kernels.qkv_rope(h, layer.qkv_w, layer.qkv_b, batch, tokens, weights, start, cache,
                                               index, **norm)  # fmt: skip
            else:
                with rec("qkv_proj"):
                    if fold_attn:
                        qkv = kernels.rms_linear(h, layer.attn_norm, layer.qkv_w, layer.qkv_b)
                    else:
                        qkv = kernels.linear(h, layer.qkv_w, layer.qkv_b)
                with rec("rope"):
                    # q, k rotated, and with a cache the new K and V written to it: [B, T, heads, D] each
                    q, k, v = kernels.rope_append(qkv, batch, tokens, weights, start, cache, index)
            with rec("attention"):
                if decoding:
                    a = kernels.attend_decode_gqa(q.transpose(1, 2), cache, index, start + 1)
                else:
                    a = kernels.attend_prefill_gqa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
                a = a.transpose(1, 2).reshape(batch * tokens, q_width)
            with rec("o_proj"):
                if fold_mlp:  # the residual add in the GEMM's epilogue: r += o
                    h = residual = kernels.linear(a, layer.o_w, layer.o_b, residual=residual)
                else:
                    x = kernels.linear(a, layer.o_w, layer.o_b)
            if not fold_mlp:
                with rec("add_rms_norm"):
                    h, residual = kernels.rms_norm(x, layer.mlp_norm, residual)
            norm = {"gamma": layer.mlp_norm} if fold_mlp else {}
            if swiglu_in_gemm:  # silu(gate) * up in the gate/up GEMM's epilogue: no swiglu kernel
                with rec("gate_up_proj"):
                    h = kernels.gate_up_swiglu(h, layer.gate_up_w, layer.gate_up_b, **norm)
            else:
                with rec("gate_up_proj"):
                    gate, up = kernels.gate_up(h, layer.gate_up_w, layer.gate_up_b, weights.ffn, **norm)
                with rec("swiglu"):
                    h = kernels.silu_mul(gate, up)
            with rec("down_proj"):
                if fold_attn:  # the next QKV GEMM (or the final norm) reads the stream: r += down
                    h = residual = kernels.linear(h, layer.down_w, layer.down_b, residual=residual)
                else:
                    x = kernels.linear(h, layer.down_w, layer.down_b)
        if fold_attn:
            with rec("rms_norm"):  # the final norm alone: the last down GEMM added to the stream
                h, _ = kernels.rms_norm(residual, weights.norm, None)
        else:
            with rec("add_rms_norm"):
                # The last position's rows only: the norm and the head run on B rows. Taken inside the
                # norm's range, as they are its inputs.
                if last_only:
                    x = x.view(batch, tokens, -1)[:, -1].contiguous()
                    residual = residual.view(batch, tokens, -1)[:, -1].contiguous()
                h, _ = kernels.rms_norm(x, weights.norm, residual)
        with rec("lm_head"):
            logits = kernels.lm_head(h, weights.head)
            return logits if last_only else logits.view(batch, tokens, -1)

    # ---- costs --------------------------------------------------------------------------
    def op_costs(self, dims: Dims, phase: Phase, dtype: str, fusions: frozenset[str] = frozenset()) -> dict[str, Cost]:
        """Ideal work of each op over all layers. Prefill computes every position's logits, as HF's
        forward does; a decode step appends one token's K and V per layer (in the rope op, which writes
        the rotated K) and reads the cache. With the gate_up_swiglu fusion the gate/up GEMM writes
        silu(gate) * up, [rows, ffn], and no swiglu op reads or writes anything. With the qkv_rope fusion
        the QKV GEMM does the rope op's work: q and K are rotated before they are written, so the rope
        op's read and write of them and its read of V (for the append) are gone. With attn_norm_in_qkv or
        mlp_norm_in_gate_up those norms are gone (_folded_norm_costs)."""
        costs = llama_costs(dims, phase, dtype)
        if "qkv_rope" in fusions:
            rope, qkv = costs.pop("rope"), costs["qkv_proj"]
            size = element_size(dtype)
            rotated = dims.layers * phase.rows * (dims.heads + dims.kv_heads) * dims.head_dim * size
            v_read = dims.layers * phase.rows * dims.kv_heads * dims.head_dim * size if phase.name == "decode" else 0
            costs["qkv_proj"] = Cost(qkv.tensor_flops, qkv.cuda_flops + rope.cuda_flops,
                                     qkv.bytes + rope.bytes - 2 * rotated - v_read)  # fmt: skip
        attn, mlp = "attn_norm_in_qkv" in fusions, "mlp_norm_in_gate_up" in fusions
        if attn or mlp:
            costs = _folded_norm_costs(costs, dims, phase, dtype, attn, mlp)
        if "gate_up_swiglu" in fusions:
            unfused = costs.pop("swiglu")
            write = dims.layers * phase.rows * dims.ffn * element_size(dtype)  # [rows, 2 ffn] -> [rows, ffn]
            gate_up = costs["gate_up_proj"]
            costs["gate_up_proj"] = Cost(gate_up.tensor_flops, gate_up.cuda_flops + unfused.cuda_flops,
                                         gate_up.bytes - write)  # fmt: skip
        return costs


def _folded_norm_costs(costs: dict[str, Cost], dims: Dims, phase: Phase, dtype: str, attn: bool,
                       mlp: bool) -> dict[str, Cost]:  # fmt: skip
    """The norms folded into the GEMMs after them: each layer's attention norm into its QKV GEMM
    (``attn``; the final norm then adds nothing, the last down GEMM having added to the stream) and each
    MLP norm into its gate/up GEMM (``mlp``). A folded norm's reads and writes of the stream and of the
    normalized rows are gone; the GEMM after it reads the stream where it read the normalized rows and
    squares, sums and scales each element; the GEMM before it reads the stream to add to it."""
    rows, d, n, size = phase.rows, dims.hidden, dims.layers, element_size(dtype)
    costs = {name: cost for name, cost in costs.items() if name not in ("rms_norm", "add_rms_norm")}
    costs.update(_norm_costs(dims, phase, dtype, attn, mlp))
    folds = (("qkv_proj", "down_proj"),) if attn else ()
    folds += (("gate_up_proj", "o_proj"),) if mlp else ()
    for normalizes, adds in folds:
        cost = costs[normalizes]  # square, sum and scale each element of the stream's rows
        costs[normalizes] = Cost(cost.tensor_flops, cost.cuda_flops + 3 * rows * d * n, cost.bytes)
        cost = costs[adds]  # read the stream's rows to add to them
        costs[adds] = Cost(cost.tensor_flops, cost.cuda_flops + rows * d * n, cost.bytes + n * rows * d * size)
    return {name: costs[name] for name in OPS if name in costs}


def _norm_costs(dims: Dims, phase: Phase, dtype: str, attn: bool = False, mlp: bool = False) -> dict[str, Cost]:
    """The step's RMSNorms, "rms_norm" and "add_rms_norm": the first layer's attention norm alone, the
    2L - 1 norms inside the layers adding the residual first, and the final one on the head's rows. With
    ``attn`` (``mlp``) each layer's attention (MLP) norm is folded into the GEMM after it: the first norm
    goes, and the final norm only normalizes (the last down GEMM added to the stream)."""
    rows, d, n = phase.rows, dims.hidden, dims.layers
    head_rows = phase.batch if phase.name == "decode" else rows
    fused_norm = rmsnorm.cost({"rows": rows, "hidden": d, "residual": True}, dtype)
    in_layers = (0 if attn else n - 1) + (0 if mlp else n)  # the add_rms_norms left between the GEMMs
    if attn:  # the final norm is the only plain one
        costs = {"rms_norm": rmsnorm.cost({"rows": head_rows, "hidden": d, "residual": False}, dtype)}
        return costs | ({"add_rms_norm": _scale(fused_norm, in_layers)} if in_layers else {})
    final_norm = rmsnorm.cost({"rows": head_rows, "hidden": d, "residual": True}, dtype)
    return {"rms_norm": rmsnorm.cost({"rows": rows, "hidden": d, "residual": False}, dtype),
            "add_rms_norm": _add(_scale(fused_norm, in_layers), final_norm)}  # fmt: skip


def llama_costs(dims: Dims, phase: Phase, dtype: str, qkv_bias: bool = False) -> dict[str, Cost]:
    rows, d, ffn, n, size = phase.rows, dims.hidden, dims.ffn, dims.layers, element_size(dtype)
    q_width, kv_width = dims.heads * dims.head_dim, dims.kv_heads * dims.head_dim
    head_rows = phase.batch if phase.name == "decode" else rows
    new_kv = 2 * rows * kv_width * size  # this step's K and V rows
    append = Cost()
    if phase.name == "decode":
        attend = decode_attention.cost(
            {"b": phase.batch, "h": dims.heads, "h_kv": dims.kv_heads, "c": phase.context, "d": dims.head_dim}, dtype
        )
        # the rope op writes the new K and V rows into the cache (read V, write K and V), one
        # int64 slot per (sequence, kv head): the forward appends inside rope_append
        append = Cost(bytes=new_kv + new_kv // 2 + phase.batch * dims.kv_heads * INDEX_BYTES)
    else:
        flops = attention.cost({"B": phase.batch, "H": dims.heads, "N": phase.tokens, "D": dims.head_dim,
                                "causal": True}, dtype).tensor_flops  # fmt: skip
        # read q and the kv heads' K and V once (GQA: H_kv of them, not H), write o
        attend = Cost(tensor_flops=flops, bytes=2 * rows * q_width * size + new_kv)
    per_layer = {
        "qkv_proj": linear_cost(rows, d, q_width + 2 * kv_width, dtype, bias=qkv_bias),
        # read q and k and their positions' cos and sin rows, write the rotated q and k;
        # per element: two multiplies and an add
        "rope": _add(
            Cost(
                cuda_flops=3 * rows * (q_width + kv_width),
                bytes=2 * rows * (q_width + kv_width) * size + 2 * phase.tokens * dims.head_dim * size,
            ),
            append,
        ),
        "attention": attend,
        "o_proj": linear_cost(rows, q_width, d, dtype, bias=False),
        "gate_up_proj": linear_cost(rows, d, 2 * ffn, dtype, bias=False),
        "swiglu": swiglu.cost({"rows": rows, "inter": ffn, "hidden": 0}, dtype),  # the elementwise form
        "down_proj": linear_cost(rows, ffn, d, dtype, bias=False),
    }
    # read B*T rows of the table and the ids, write the rows
    costs = {"embedding": Cost(bytes=2 * rows * d * size + rows * INDEX_BYTES)}
    costs.update({name: _scale(cost, n) for name, cost in per_layer.items()})
    costs.update(_norm_costs(dims, phase, dtype))
    costs["lm_head"] = linear_cost(head_rows, d, dims.vocab, dtype, bias=False)
    if phase.name == "decode":
        # greedy argmax: read the logits, write one id per sequence
        costs["sample"] = Cost(cuda_flops=phase.batch * dims.vocab, bytes=phase.batch * dims.vocab * size)
    return {name: costs[name] for name in OPS if name in costs}


def weight_count(dims: Dims, tied: bool, qkv_bias: bool = False) -> int:
    """Parameters: what a decode step reads from HBM once (plus the KV cache)."""
    d, q_width, kv_width = dims.hidden, dims.heads * dims.head_dim, dims.kv_heads * dims.head_dim
    layer = d * (q_width + 2 * kv_width) + q_width * d + 3 * d * dims.ffn + 2 * d
    if qkv_bias:
        layer += q_width + 2 * kv_width
    return dims.layers * layer + dims.vocab * d * (1 if tied else 2) + d


def _bias(linear) -> torch.Tensor | None:
    return None if linear.bias is None else linear.bias.detach()


def _concatenate(*linears) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One [sum of outs, in] weight for several projections of the same input, each module's weight
    then a view of it (so the model is held once), and the biases likewise where they exist."""
    weight = torch.cat([linear.weight.detach() for linear in linears])
    biases = [linear.bias for linear in linears]
    bias = None if any(b is None for b in biases) else torch.cat([b.detach() for b in biases])
    if any(b is not None for b in biases) and bias is None:
        raise UserError("projections of one input with a bias on some and not others are not supported")
    row = 0
    for linear in linears:
        rows = linear.weight.shape[0]
        linear.weight.data = weight[row : row + rows]
        if bias is not None:
            linear.bias.data = bias[row : row + rows]
        row += rows
    return weight, bias


def _long_after(config) -> int:
    """longrope's original length, where the model reaches past it (and so keeps a second pair of
    tables, of its long factors); else 0."""
    rope = dict(config.rope_parameters or {})
    original = rope.get("original_max_position_embeddings") or 0
    return original if rope.get("rope_type") == "longrope" and config.max_position_embeddings > original else 0


class _ByConfig:
    """A stand-in class for build(): picks the causal LM class from the config it is given."""

    def __init__(self, spec: Llama) -> None:
        self.spec = spec

    def __call__(self, hf_config):
        return self.spec.hf_class_of(hf_config)(hf_config)

    def check_config(self, path) -> None:
        architectures.read_config_file(Path(path))

    def from_pretrained(self, path, **kwargs):
        fields = architectures.read_config_file(Path(path))
        return getattr(require_transformers(), architectures.ARCHITECTURES[fields["model_type"]][1]).from_pretrained(
            path, **kwargs
        )


def from_config_file(path: Path) -> Llama:
    """A spec whose one config is the file's (the name its rows carry: the checkpoint directory's)."""
    fields = architectures.read_config_file(path)
    return Llama({architectures.config_name(path): fields})


def unsupported_set(name: str) -> VariantSkipped:
    return VariantSkipped(f"the {name} set has no Llama-family kernels yet")


SPEC = Llama()
