"""GPT-2 (Hugging Face transformers' GPT2LMHeadModel): the first whole model.

Pre-norm blocks: x += attn(ln_1(x)); x += mlp(ln_2(x)); a final ln_f and an lm_head tied to the
token embedding. The weights are read out of the HF module once, in nn.Linear layout ([out, in];
HF's Conv1D stores [in, out]), and the forward below names every op for the profiler.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rooflint.core.family import Cost, element_size
from rooflint.kernels import attention, decode_attention, gelu_linear, layernorm
from rooflint.models.base import Dims, ModelSpec, Phase, require_transformers
from rooflint.models.checkpoint_files import CHECKPOINT_MODEL_TYPES

VOCAB = 50257
MAX_POSITIONS = 1024
INDEX_BYTES = 8  # token ids and slot numbers are int64


@dataclass
class Layer:
    ln1_w: torch.Tensor
    ln1_b: torch.Tensor
    qkv_w: torch.Tensor  # [3d, d]
    qkv_b: torch.Tensor
    proj_w: torch.Tensor  # [d, d]
    proj_b: torch.Tensor
    ln2_w: torch.Tensor
    ln2_b: torch.Tensor
    fc_w: torch.Tensor  # [ffn, d]
    fc_b: torch.Tensor
    down_w: torch.Tensor  # [d, ffn]
    down_b: torch.Tensor


@dataclass
class Weights:
    wte: torch.Tensor  # [vocab, d], also the lm_head
    wpe: torch.Tensor  # [positions, d]
    layers: list[Layer]
    lnf_w: torch.Tensor
    lnf_b: torch.Tensor
    heads: int


def linear_cost(rows: int, inputs: int, outputs: int, dtype: str, bias: bool = True) -> Cost:
    """Y = X W^T (+ b): the plain GEMM, which no rooflint family covers."""
    size = element_size(dtype)
    return Cost(
        tensor_flops=2 * rows * inputs * outputs,
        cuda_flops=rows * outputs if bias else 0,
        bytes=(rows * inputs + inputs * outputs + (outputs if bias else 0) + rows * outputs) * size,
    )


def elementwise_cost(elements: int, reads: int, dtype: str, flops_per_element: int = 1) -> Cost:
    return Cost(cuda_flops=flops_per_element * elements, bytes=(reads + 1) * elements * element_size(dtype))


class GPT2(ModelSpec):
    name = "gpt2"
    # GPT2LMHeadModel's config's, named where `rooflint model` reads it before importing this module
    checkpoint_model_type = CHECKPOINT_MODEL_TYPES[__name__]
    vocab = VOCAB
    max_positions = MAX_POSITIONS
    positions_field = "n_positions"
    configs = {
        "gpt2": {"n_layer": 12, "n_embd": 768, "n_head": 12},
        "gpt2-medium": {"n_layer": 24, "n_embd": 1024, "n_head": 16},
        "gpt2-large": {"n_layer": 36, "n_embd": 1280, "n_head": 20},
        "gpt2-xl": {"n_layer": 48, "n_embd": 1600, "n_head": 25},
    }
    ops = (
        "embedding",
        "layer_norm",
        "qkv_proj",
        "attention",
        "out_proj",
        "residual",
        "mlp_up_gelu",
        "mlp_down",
        "lm_head",
        "sample",
        # where the kernel set fuses (kernel_sets.FUSIONS)
        "layer_norm+qkv_proj",
        "layer_norm+qkv_proj+kv_append",
        "out_proj+residual",
        "layer_norm+mlp_up_gelu",
        "mlp_down+residual",
    )

    def hf_class(self):
        return require_transformers().GPT2LMHeadModel

    def hf_config(self, config: str, layers: int | None = None):
        fields = dict(self.configs[config])
        if layers is not None:
            fields["n_layer"] = layers
        last = self.vocab - 1  # GPT-2's <|endoftext|> is the last id
        return require_transformers().GPT2Config(
            vocab_size=self.vocab, n_positions=self.max_positions, bos_token_id=last, eos_token_id=last, **fields
        )

    def config_name_of(self, hf_config) -> str:
        for name, fields in self.configs.items():
            if all(getattr(hf_config, key) == value for key, value in fields.items()):
                if hf_config.vocab_size == self.vocab:
                    return name
        return "custom"

    def dims(self, hf_config) -> Dims:
        d = hf_config.n_embd
        return Dims(
            layers=hf_config.n_layer,
            hidden=d,
            heads=hf_config.n_head,
            kv_heads=hf_config.n_head,
            head_dim=d // hf_config.n_head,
            ffn=hf_config.n_inner or 4 * d,
            vocab=hf_config.vocab_size,
            max_positions=hf_config.n_positions,
        )

    def position_parameter_bytes(self, hf_config, size: int) -> int:
        return hf_config.n_positions * hf_config.n_embd * size  # wpe: a learned row per position

    def norm_eps(self, hf_config) -> float:
        return hf_config.layer_norm_epsilon

    def check_config(self, hf_config) -> None:
        """The forward below implements GPT-2 as configured by the presets; refuse what it does not."""
        from rooflint.core.errors import UserError

        unsupported = {
            "activation_function": ("gelu_new", hf_config.activation_function),
            "scale_attn_weights": (True, hf_config.scale_attn_weights),
            "scale_attn_by_inverse_layer_idx": (False, hf_config.scale_attn_by_inverse_layer_idx),
            "add_cross_attention": (False, hf_config.add_cross_attention),
        }
        wrong = [f"{key}={got!r}" for key, (want, got) in unsupported.items() if want != got]
        if wrong:
            raise UserError(f"this GPT-2 checkpoint uses {', '.join(wrong)}, which rooflint's GPT-2 forward lacks")

    def extract_weights(self, hf_model) -> Weights:
        self.check_config(hf_model.config)
        body = hf_model.transformer

        def linear(conv) -> tuple[torch.Tensor, torch.Tensor]:
            return conv.weight.detach().t().contiguous(), conv.bias.detach()

        layers = []
        for block in body.h:
            qkv_w, qkv_b = linear(block.attn.c_attn)
            proj_w, proj_b = linear(block.attn.c_proj)
            fc_w, fc_b = linear(block.mlp.c_fc)
            down_w, down_b = linear(block.mlp.c_proj)
            layers.append(
                Layer(
                    block.ln_1.weight.detach(), block.ln_1.bias.detach(), qkv_w, qkv_b, proj_w, proj_b,
                    block.ln_2.weight.detach(), block.ln_2.bias.detach(), fc_w, fc_b, down_w, down_b,
                )
            )  # fmt: skip
        return Weights(
            wte=body.wte.weight.detach(),
            wpe=body.wpe.weight.detach(),
            layers=layers,
            lnf_w=body.ln_f.weight.detach(),
            lnf_b=body.ln_f.bias.detach(),
            heads=hf_model.config.n_head,
        )

    def forward(self, weights: Weights, kernels: Any, ids, start, cache, rec, last_only=False):
        batch, tokens = ids.shape
        heads = weights.heads
        decoding = tokens == 1 and cache is not None
        fused = kernels.fusions(batch * tokens, decoding)
        with rec("embedding"):
            x = kernels.embedding(ids, start, weights.wte, weights.wpe)  # [B*T, d]
        if "decoder_layers" in fused:
            # every layer in one persistent kernel (models/ops/decode_layers.py); the attribution
            # splits its time into the fused ops below by the kernel's own phase clock
            with rec("decoder_layers"):
                x = kernels.decode_layers(x, weights.layers, cache, start, heads)
        for index, layer in enumerate([] if "decoder_layers" in fused else weights.layers):
            append = (cache, index, start) if "kv_append" in fused else None
            qkv = norm_linear(kernels, rec, fused, "qkv_proj", x, layer.ln1_w, layer.ln1_b, layer.qkv_w, layer.qkv_b,
                              append=append)  # fmt: skip
            with rec("attention"):
                if decoding:
                    a = kernels.decode_attention(qkv, batch, heads, cache, index, start, appended=append is not None)
                else:
                    a = kernels.prefill_attention(qkv, batch, tokens, heads, cache, index)
            x = linear_residual(kernels, rec, fused, "out_proj", a, layer.proj_w, layer.proj_b, x)
            h = norm_linear(kernels, rec, fused, "mlp_up_gelu", x, layer.ln2_w, layer.ln2_b, layer.fc_w, layer.fc_b,
                            gelu=True)  # fmt: skip
            x = linear_residual(kernels, rec, fused, "mlp_down", h, layer.down_w, layer.down_b, x)
        with rec("layer_norm"):
            if last_only:  # the last position's rows only, taken inside ln_f's range: they are its input
                x = x.view(batch, tokens, -1)[:, -1].contiguous()
            x = kernels.layer_norm(x, weights.lnf_w, weights.lnf_b)
        with rec("lm_head"):
            logits = kernels.lm_head(x, weights.wte)
            return logits if last_only else logits.view(batch, tokens, -1)

    def op_costs(self, dims: Dims, phase: Phase, dtype: str, fusions: frozenset[str] = frozenset()) -> dict[str, Cost]:
        """Ideal work of each op over all layers. Prefill computes every position's logits, as
        Hugging Face's forward does; a decode step appends one token's K and V and reads the cache.
        ``fusions`` (the kernel set's, kernel_sets.FUSIONS) merges ops into the fused ops the
        forward then records, each costing its parts less the intermediate it no longer round-trips."""
        rows, d, ffn, n = phase.rows, dims.hidden, dims.ffn, dims.layers
        size = element_size(dtype)
        head_rows = phase.batch if phase.name == "decode" else rows
        append = Cost()
        if phase.name == "decode":
            # read the new K and V rows, write them into the cache; one int64 slot per (sequence, kv head)
            kv_rows = phase.batch * dims.kv_heads
            new_kv = 2 * kv_rows * dims.head_dim * size
            append = Cost(bytes=2 * new_kv + kv_rows * INDEX_BYTES)
            attend = decode_attention.cost(
                {"b": phase.batch, "h": dims.heads, "h_kv": dims.kv_heads, "c": phase.context, "d": dims.head_dim},
                dtype,
            )
        else:
            attend = attention.cost(
                {"B": phase.batch, "H": dims.heads, "N": phase.tokens, "D": dims.head_dim, "causal": True}, dtype
            )
        norm = layernorm.cost({"rows": rows, "hidden": d}, dtype)
        final_norm = layernorm.cost({"rows": head_rows, "hidden": d}, dtype)
        stream = rows * d * size  # one [rows, d] activation: what a fusion saves writing and reading back
        qkv = linear_cost(rows, d, 3 * d, dtype)
        up = gelu_linear.cost({"m": rows, "k": d, "n": ffn}, dtype)
        out, down = linear_cost(rows, d, d, dtype), linear_cost(rows, ffn, d, dtype)
        residual = elementwise_cost(rows * d, 2, dtype)
        per_layer: dict[str, Cost] = {}
        if "norm_linear" in fusions:
            qkv_name = "layer_norm+qkv_proj"
            qkv = fuse(norm, qkv, stream)
            if "kv_append" in fusions and phase.name == "decode":
                # the GEMM writes K and V straight into the cache: the append's read of them is gone
                qkv_name += "+kv_append"
                qkv = _add(qkv, Cost(bytes=append.bytes - new_kv))
                append = Cost()
            per_layer[qkv_name] = qkv
        else:
            per_layer["layer_norm"] = _scale(norm, 2)
            per_layer["qkv_proj"] = qkv
        per_layer["attention"] = _add(attend, append)
        if "linear_residual" in fusions:
            per_layer["out_proj+residual"] = fuse(out, residual, stream)
        else:
            per_layer["out_proj"] = out
            per_layer["residual"] = _scale(residual, 2)
        if "norm_linear" in fusions:
            per_layer["layer_norm+mlp_up_gelu"] = fuse(norm, up, stream)
        else:
            per_layer["mlp_up_gelu"] = up
        if "linear_residual" in fusions:
            per_layer["mlp_down+residual"] = fuse(down, residual, stream)
        else:
            per_layer["mlp_down"] = down
        # read B*T token rows and position rows, add, write
        costs = {"embedding": Cost(cuda_flops=rows * d, bytes=3 * rows * d * size + rows * INDEX_BYTES)}
        costs.update({name: _scale(cost, n) for name, cost in per_layer.items()})
        costs["layer_norm"] = _add(costs.get("layer_norm", Cost()), final_norm)  # ln_f runs on its own
        costs["lm_head"] = linear_cost(head_rows, d, dims.vocab, dtype, bias=False)
        if phase.name == "decode":
            # greedy argmax: read the logits, write one id per sequence
            costs["sample"] = Cost(cuda_flops=phase.batch * dims.vocab, bytes=phase.batch * dims.vocab * size)
        return costs


def fuse(first: Cost, second: Cost, intermediate_bytes: int) -> Cost:
    """Two ops as one kernel: their work, less the intermediate the first wrote and the second read."""
    return Cost(
        first.tensor_flops + second.tensor_flops,
        first.cuda_flops + second.cuda_flops,
        first.bytes + second.bytes - 2 * intermediate_bytes,
    )


def norm_linear(kernels, rec, fused, op: str, x, ln_w, ln_b, w, b, gelu=False, append=None):
    """op(layer_norm(x)): one fused op where the set fuses norms into GEMMs, else two."""
    if "norm_linear" in fused:
        with rec(f"layer_norm+{op}" + ("+kv_append" if append is not None else "")):
            return kernels.norm_linear(x, ln_w, ln_b, w, b, gelu=gelu, append=append)
    with rec("layer_norm"):
        h = kernels.layer_norm(x, ln_w, ln_b)
    with rec(op):
        return kernels.linear_gelu(h, w, b) if gelu else kernels.linear(h, w, b)


def linear_residual(kernels, rec, fused, op: str, x, w, b, residual):
    """residual + op(x): the add in the GEMM's epilogue where the set fuses it, else its own op."""
    if "linear_residual" in fused:
        with rec(f"{op}+residual"):
            return kernels.linear(x, w, b, residual=residual)
    with rec(op):
        y = kernels.linear(x, w, b)
    with rec("residual"):
        return kernels.add(residual, y)


def _scale(cost: Cost, times: int) -> Cost:
    return Cost(cost.tensor_flops * times, cost.cuda_flops * times, cost.bytes * times)


def _add(a: Cost, b: Cost) -> Cost:
    return Cost(a.tensor_flops + b.tensor_flops, a.cuda_flops + b.cuda_flops, a.bytes + b.bytes)


SPEC = GPT2()
