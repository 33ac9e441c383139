"""What one whole model tells rooflint: how to build it, its ops, their costs and its forward.

A model module (gpt2.py, llama.py) subclasses ModelSpec. The spec does not time or
profile anything: the runner calls ``forward`` with a KernelSet (which implementation each kind of
op uses) and an OpRecorder (which names every op for the profiler), and the engine joins the
profiled times with ``op_costs``. So a new model is one module: its configs, its weights in
nn.Linear layout, a forward written against KernelSet slots, and its cost per op.
"""

from __future__ import annotations

import contextlib
import copy
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rooflint.core.errors import UserError
from rooflint.core.family import Cost
from rooflint.models import checkpoint_files
from rooflint.models.flag_checks import check_weights_flags

# The bracket is escaped for rich, which prints every user error and would read [models] as a style.
INSTALL_HINT = 'whole models need Hugging Face transformers: pip install "rooflint[models]"'
RANGE_PREFIX = "rooflint.op::"  # record_function names the profiler attribution looks for
STEP_RANGE = "rooflint.step"


def require_transformers():
    """The transformers module, or one line saying how to install it."""
    try:
        import transformers
    except ImportError:
        raise UserError(INSTALL_HINT) from None
    return transformers


@dataclass(frozen=True)
class Dims:
    """The shapes that set every op's cost."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int  # == heads for multi-head attention; fewer for grouped-query attention
    head_dim: int
    ffn: int
    vocab: int
    max_positions: int


@dataclass(frozen=True)
class Phase:
    """One step of the model: ``tokens`` new tokens per sequence attending to ``context`` keys."""

    name: str  # prefill | decode
    batch: int
    tokens: int  # prefill: the sequence length; decode: 1
    context: int  # keys the last new token sees (prefill: tokens; decode: cache length after the append)

    @property
    def rows(self) -> int:
        return self.batch * self.tokens


class OpRecorder:
    """Names each op for torch.profiler with a record_function range, or does nothing.

    Off (the default) it returns a null context, so the timed and compiled forwards carry no
    profiler calls at all; on, every kernel launched inside ``with rec("attention"):`` is the
    attention op's, whatever launched it (an aten op, a Triton launcher or a ctypes CUDA launch).
    """

    def __init__(self) -> None:
        self.enabled = False

    def __call__(self, op: str):
        if not self.enabled:
            return contextlib.nullcontext()
        return _range(RANGE_PREFIX + op)


# The C++ range where torch has it: record_function dispatches an op on entry and exit, and on a
# CPU that overhead falls between op ranges, where it would read as idle time.
_range = getattr(getattr(torch._C, "_profiler", None), "_RecordFunctionFast", torch.profiler.record_function)


@dataclass
class LoadedModel:
    """A built model: the Hugging Face module (the reference) and its weights as plain tensors."""

    spec: ModelSpec
    config_name: str
    dims: Dims
    hf: Any  # transformers PreTrainedModel, eager attention: the correctness reference
    weights: Any  # the spec's own structure of tensors, nn.Linear layout ([out, in])
    dtype: torch.dtype
    device: torch.device


class ModelSpec(ABC):
    """One model architecture. Subclasses set the class attributes and implement the methods."""

    name: str  # the CLI name: rooflint model <name>
    configs: dict[str, dict[str, int]]  # preset -> the HF config fields that differ between presets
    ops: tuple[str, ...]  # every op name its forward records, in forward order
    # The model_type a --weights checkpoint must hold, that of hf_class()'s config_class; None: read
    # from hf_class(), or (a loader picking the class from the config) checked by the loader itself.
    checkpoint_model_type: str | None = None

    # ---- building -----------------------------------------------------------------------
    @abstractmethod
    def hf_config(self, config: str, layers: int | None = None) -> Any:
        """The transformers config of a preset, ``layers`` overriding its depth (smoke tests)."""

    @abstractmethod
    def hf_class(self) -> Any:
        """The transformers class of the language model (GPT2LMHeadModel, LlamaForCausalLM)."""

    @abstractmethod
    def dims(self, hf_config: Any) -> Dims: ...

    @abstractmethod
    def extract_weights(self, hf_model: Any) -> Any:
        """Plain tensors in nn.Linear layout, shared by every kernel set (no copies per set)."""

    def rope_table_bytes(self, hf_config: Any, size: int, fp32_cache: bool = False) -> tuple[int, int]:
        """(held, scratch): the bytes of the RoPE tables ``extract_weights`` computes from ``hf_config``
        beside the parameters, kept in a ``size``-byte dtype (with an fp32 cos/sin cache of them where
        ``fp32_cache``), and the fp32 scratch their build holds at its peak. (0, 0) in a model without
        them: its positions are parameters, counted with the weights."""
        return 0, 0

    def position_parameter_bytes(self, hf_config: Any, size: int) -> int:
        """The bytes of a learned position table among the parameters ([positions, hidden], GPT-2's
        wpe), in a ``size``-byte dtype; 0 where positions are rotary (no parameters)."""
        return 0

    def folded_weight_bytes(self, hf_config: Any, size: int) -> int:
        """The bytes of the weight copies a kernel set folds a norm into beside the weights (the Llama
        triton set's ROOFLINT_NORM_IN_GEMM); 0 where none is asked for."""
        return 0

    # The config field that sets the positions, as messages name it.
    positions_field = "max_position_embeddings"

    def config_name_of(self, hf_config: Any) -> str:
        """The preset a loaded checkpoint matches, or "custom"."""
        return "custom"

    def norm_eps(self, hf_config: Any) -> float:
        """The epsilon of the model's norms (a kernel set swaps a norm only where its kernel uses the same)."""
        return 1e-5

    def kernel_set(self, name: str, dtype: torch.dtype, device: torch.device, head_dim: int, eps: float) -> Any:
        """The kernel set ``name`` for this model's forward (a model with its own slots overrides it)."""
        from rooflint.models.kernel_sets import make_kernel_set

        return make_kernel_set(name, dtype, device, head_dim, eps)

    # ---- running ------------------------------------------------------------------------
    @abstractmethod
    def forward(
        self,
        weights: Any,
        kernels: Any,
        ids: torch.Tensor,
        start: int,
        cache: Any | None,
        rec: Callable[[str], Any],
        last_only: bool = False,
    ) -> torch.Tensor:
        """Logits for ``ids`` [B, T] at positions start..start+T-1; with ``cache``, K and V are appended.

        Every op runs inside ``with rec(op):`` so the profiler can attribute its kernels.
        ``last_only`` computes the head for the last position only (generation).
        """

    # ---- costs --------------------------------------------------------------------------
    @abstractmethod
    def op_costs(self, dims: Dims, phase: Phase, dtype: str, fusions: frozenset[str] = frozenset()) -> dict[str, Cost]:
        """Analytic cost of each op over the whole step (all layers), ideal HBM bytes, with the ops
        that ``fusions`` (kernel_sets.FUSIONS, what the kernel set fuses) merge under their fused names."""


def build(
    spec: ModelSpec,
    config: str,
    dtype: torch.dtype,
    device: torch.device,
    *,
    weights_dir: Path | None = None,
    layers: int | None = None,
    seed: int = 0,
) -> LoadedModel:
    """Random weights from the preset's config (no network), or a local checkpoint with --weights."""
    require_transformers()
    if weights_dir is not None:
        check_weights_flags(weights_dir, layers)
        hf = _load_checkpoint(spec, Path(weights_dir))
        config_name = spec.config_name_of(hf.config)
    else:
        if config not in spec.configs:
            raise UserError(f"unknown {spec.name} config {config!r}; valid: {', '.join(spec.configs)}")
        hf_config = spec.hf_config(config, layers)
        hf_config._attn_implementation = "eager"
        torch.manual_seed(seed)
        # Built on the target device and in the target dtype, as from_pretrained(dtype=...) builds:
        # initialising billions of parameters on the CPU takes minutes, and an fp32 build cast
        # afterwards would hold an 8B model three times over (32 GB + 16 GB) at its peak.
        with torch.device(device), _default_dtype(dtype):
            hf = spec.hf_class()(hf_config)
            _randomize_affine(hf)
        config_name = config if layers is None else f"{config}-L{layers}"
    hf = _cast_parameters(hf, device, dtype).eval()
    return LoadedModel(spec, config_name, spec.dims(hf.config), hf, spec.extract_weights(hf), dtype, device)


def _load_checkpoint(spec: ModelSpec, weights_dir: Path) -> Any:
    """A save_pretrained checkpoint whose every tensor is a float of the model's shape, or one line.

    from_pretrained fills a missing tensor, and (told to) a mismatched one, with random values after
    printing a table of them, casts integer tensors to float as they are, and reports a broken
    safetensors file as its own exception: each would be a run of a model that is not the checkpoint.
    """
    from transformers.utils import logging as hf_logging

    check_checkpoint(spec, weights_dir)
    loader = spec.hf_class()
    where = f"cannot load a {spec.name} checkpoint from {weights_dir}"
    verbosity, bar = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # its load report and progress bar: judged below in one line instead
    hf_logging.disable_progress_bar()
    try:
        hf, info = loader.from_pretrained(str(weights_dir), local_files_only=True, attn_implementation="eager",
                                          output_loading_info=True, ignore_mismatched_sizes=True)  # fmt: skip
    except (OSError, ValueError, RuntimeError) as error:
        raise UserError(f"{where}: {' '.join(str(error).split())}") from None
    finally:
        hf_logging.set_verbosity(verbosity)
        if bar:
            hf_logging.enable_progress_bar()
    # Extra tensors are let through: older checkpoints hold buffers the model now computes (RoPE's
    # inv_freq), and one of another architecture is refused by its model_type before this.
    wrong = [f"{len(keys)} {what} (e.g. {_key_text(keys[0])})"
             for what, keys in (("missing", list(info["missing_keys"])),
                                ("of another shape than its config.json says", list(info["mismatched_keys"])))
             if keys]  # fmt: skip
    if wrong:
        raise UserError(f"{where}: its tensors do not match its config.json: {'; '.join(wrong)}")
    return hf


def check_checkpoint(spec: ModelSpec, weights_dir: Path) -> None:
    """What a checkpoint's files say without loading them (its architecture, its tensors' dtypes),
    judged before anything is built or printed."""
    checkpoint_files.check_weight_files(weights_dir)
    if spec.checkpoint_model_type is not None:  # named by the spec: its class (seconds of imports) is not needed
        checkpoint_files.check_model_type(weights_dir, spec.checkpoint_model_type)
        return
    loader = spec.hf_class()
    if hasattr(loader, "check_config"):  # a loader that picks the class from the config checks it itself
        loader.check_config(weights_dir)
    else:
        config_class = getattr(loader, "config_class", None)
        checkpoint_files.check_model_type(weights_dir, getattr(config_class, "model_type", None))


def _key_text(key: Any) -> str:
    """A loading-info entry: a tensor's name, or (name, checkpoint shape, model shape)."""
    if isinstance(key, tuple):
        name, stored, wanted = key
        return f"{name}: {list(stored)} in the file, {list(wanted)} in the model"
    return str(key)


def config_with_layers(hf_config: Any, layers: int) -> Any:
    """A copy of ``hf_config`` with its first ``layers`` layers (per-layer lists cut to match)."""
    config = copy.deepcopy(hf_config)
    config.num_hidden_layers = layers  # GPT-2's n_layer through the config's attribute map
    if isinstance(getattr(config, "layer_types", None), list):
        config.layer_types = config.layer_types[:layers]
    return config


@torch.no_grad()
def copy_model(loaded: LoadedModel, dtype: torch.dtype, layers: int | None = None) -> LoadedModel:
    """The same weights in ``dtype``, all layers or the first ``layers`` (with the final norm and the
    head), as a model of its own: the check's fp32 reference and the kernel set's cut-down twin.

    Built from the config on the device and loaded from the original's state, so whatever the model
    computes in its constructor (RoPE's inverse frequencies, causal masks) is computed as HF does.
    """
    spec, source = loaded.spec, loaded.hf
    config = config_with_layers(source.config, layers if layers is not None else loaded.dims.layers)
    with torch.device(loaded.device), _default_dtype(dtype):
        hf = spec.hf_class()(config)
    state = source.state_dict()
    hf.load_state_dict({name: state[name] for name in hf.state_dict()})  # copy_ casts to ``dtype``
    hf = _cast_parameters(hf, loaded.device, dtype).eval()
    name = loaded.config_name if layers is None else f"{loaded.config_name}-first{layers}"
    return LoadedModel(spec, name, spec.dims(hf.config), hf, spec.extract_weights(hf), dtype, loaded.device)


def _cast_parameters(hf: Any, device: torch.device, dtype: torch.dtype) -> Any:
    """The model on ``device`` with its parameters in ``dtype``; its buffers keep their own dtype.

    Module.to(dtype) would also round RoPE's inverse frequencies, which Hugging Face computes and
    keeps in fp32 (from_pretrained(dtype=torch.bfloat16) leaves them so). Rounded to bf16 (2^-9
    relative error) the angle position p * inv_freq is off by up to a radian past position 1000,
    and the reference that every kernel set is checked against would be the one that is wrong.
    """
    hf.to(device=device)
    for parameter in hf.parameters():
        if parameter.is_floating_point() and parameter.dtype != dtype:
            parameter.data = parameter.data.to(dtype)
    return hf


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype):
    """Parameters created inside are ``dtype`` (a floating dtype; others keep the default)."""
    previous = torch.get_default_dtype()
    floating = dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64)
    if floating:
        torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


@torch.no_grad()
def _randomize_affine(hf: Any) -> None:
    """Random biases and norm scales instead of HF's init (zeros and ones).

    With zero biases and unit scales, a kernel that drops a bias or swaps a norm's weight and bias
    still matches the reference; random ones make the correctness checks able to fail.
    """
    for name, parameter in hf.named_parameters():
        leaf = name.rsplit(".", 1)[-1]
        if leaf == "bias":
            parameter.normal_(0.0, 0.02)
        elif leaf == "weight" and parameter.dim() == 1:  # norm scales
            parameter.normal_(1.0, 0.1)
