"""The kernel-family model.

A family owns everything about one kernel: its size presets, how to build random inputs,
a float64 reference, the analytic cost model and its registered variants. Variants are
registered with a decorator on the family (tritonbench style); each returns a zero-argument
callable over inputs built once, so the timer measures the kernel and nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from rooflint.core.dtype_names import FLOAT_DTYPES as FLOAT_DTYPES  # named here too
from rooflint.core.errors import UserError
from rooflint.core.gpu_spec import tensor_precision_of
from rooflint.core.shapes import shape_label as shape_label  # named here too

# The implementation kinds, in the order bench runs them (after the family's baseline, which
# always runs first so every later row can carry its speedup when it is written). ``library`` is a
# third-party kernel (FlashAttention, FlashInfer, Liger, quack): the peers rooflint's own are judged by.
VARIANT_KINDS = ("eager", "eager_unfused", "compile", "triton", "cuda", "library")
LIBRARY_KIND = "library"

# What bench runs of a family when no --dtype is given: bf16, the precision LLM kernels run in.
# A family without bf16 (a quantized one) runs its own ``default_dtypes`` instead.
DEFAULT_DTYPE = "bf16"
# Quantized formats (docs/quantized.md), each mapped to the storage dtype of its quantized operand,
# which is what make_inputs receives: fp8_e4m3, fp8_e5m2 and int8 quantize both GEMM operands;
# w8a16 (int8) and wfp8a16 (fp8 e4m3) quantize the weight only, the activations stay bf16. Two
# names share torch.int8 (and two float8_e4m3fn), so a Case carries its dtype's name as well.
QUANTIZED_DTYPES = ("fp8_e4m3", "fp8_e5m2", "int8", "w8a16", "wfp8a16")
DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
    "int8": torch.int8,
    "w8a16": torch.int8,
    "wfp8a16": torch.float8_e4m3fn,
}

# Norm-wise relative error ||out - ref|| / ||ref|| allowed per output dtype. Rounding alone gives
# about 2^-24, 2^-11 and 2^-8 times a small factor; these leave room for fp32 accumulation order.
# A quantized format is checked against the float64 math of its DEQUANTIZED operands, so the
# quantization error itself is not counted: what is left is the output's one rounding to bf16
# (every quantized family writes bf16) and the accumulation order, hence the bf16 tolerance.
DEFAULT_TOLERANCES = {"fp32": 1e-5, "fp16": 2e-3, "bf16": 1.6e-2, **dict.fromkeys(QUANTIZED_DTYPES, 1.6e-2)}

# Requirements a variant may declare; runnable() explains the first one missing.
NEEDS_CUDA = "cuda"  # a CUDA GPU
NEEDS_TRITON = "triton"  # the triton package (and a GPU, unless TRITON_INTERPRET=1)
NEEDS_NVCC = "nvcc"  # nvcc, to build the family's .cu source


class LibraryPeer(Protocol):
    """The third-party library a ``library`` variant calls (rooflint.kernels.common.libraries.Library).

    A protocol, so the engine asks any library the same two questions without importing the kernels.
    """

    name: str  # the distribution pip installs, e.g. "liger-kernel": the row's ``library`` column

    def version(self) -> str:
        """The installed version, or "" when it is not installed."""
        ...

    def missing(self, device: str) -> str | None:
        """Why it cannot run on ``device`` here (not installed: with the install line; an
        unsupported GPU), or None."""
        ...


def dtype_name(dtype: torch.dtype) -> str:
    """The first name of a torch dtype (torch.int8 is "int8"; a Case knows when it is "w8a16")."""
    for name, value in DTYPES.items():
        if value == dtype:
            return name
    raise UserError(f"unsupported dtype {dtype}; valid: {', '.join(DTYPES)}")


def element_size(dtype: str | torch.dtype) -> int:
    if isinstance(dtype, str):
        dtype = DTYPES[dtype]
    return torch.empty((), dtype=dtype).element_size()


@dataclass(frozen=True)
class Cost:
    """Analytic work of one call.

    FLOPs are split by the unit that executes them, because the two units have peaks an order
    of magnitude apart; bytes are the fewest HBM bytes any implementation must move (each input
    read once, each output written once).
    """

    tensor_flops: float = 0.0
    cuda_flops: float = 0.0
    bytes: float = 0.0

    @property
    def flops(self) -> float:
        return self.tensor_flops + self.cuda_flops

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in FLOP per byte of HBM traffic."""
        return self.flops / self.bytes if self.bytes else math.inf


@dataclass
class Case:
    """One problem instance: a family at one shape and dtype, with inputs on one device."""

    family: Family
    size: str  # the preset name, or "custom"
    params: dict[str, Any]
    dtype: torch.dtype
    device: torch.device
    inputs: dict[str, Any] = field(default_factory=dict)
    dtype_label: str = ""  # the dtype's name where a storage dtype has several (int8, w8a16)

    @property
    def dtype_name(self) -> str:
        return self.dtype_label or dtype_name(self.dtype)

    @property
    def shape(self) -> str:
        return shape_label(self.params)

    @property
    def cost(self) -> Cost:
        return self.family.cost(self.params, self.dtype_name)

    def __getitem__(self, name: str) -> Any:
        return self.inputs[name]


Builder = Callable[[Case], Callable[[], Any]]


@dataclass(frozen=True)
class Variant:
    name: str
    kind: str
    build: Builder
    needs: tuple[str, ...] = ()
    modeled_bytes: Callable[[dict[str, Any], str], float] | None = None
    dtypes: tuple[str, ...] | None = None  # None: every dtype of the family
    description: str = ""
    baseline: bool = False  # declared with @FAMILY.variant(..., baseline=True); see Family.baseline
    library: LibraryPeer | None = None  # the third-party library a ``library`` variant calls
    # The .cu files the builder loads through cuda_build (in the order it loads them), declared with
    # @FAMILY.variant(..., sources=...): bench builds them ahead (engine/build_ahead). Empty: none
    # declared, and any library the variant loads builds on its first call.
    sources: tuple[Path, ...] = ()


class Family:
    """A kernel family. kernels/vector_add/ is the smallest complete one (__init__.py, triton.py, cuda.py)."""

    def __init__(
        self,
        name: str,
        *,
        summary: str,
        sizes: Mapping[str, Sequence[Mapping[str, Any]]],
        make_inputs: Callable[[dict[str, Any], torch.dtype, torch.device, torch.Generator], dict[str, Any]],
        reference: Callable[[dict[str, Any], dict[str, Any]], Any],
        cost: Callable[[dict[str, Any], str], Cost],
        dtypes: Sequence[str] = ("fp32", "fp16", "bf16"),
        tolerances: Mapping[str, float] | None = None,
        tensor_precision: Callable[[str], str] | None = None,
        compare: Callable[[Any, Any], Any] | None = None,
        default_dtypes: Sequence[str] | None = None,
        check: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        if not isinstance(name, str) or not name.strip() or "," in name:
            # An empty name ran under `bench all` (exit 0) into rows every reader refuses ("family is
            # empty"), losing the whole results file; one with a comma is split apart when asked for.
            raise ValueError(f"family name {name!r} cannot be asked for; valid: a name with no comma, e.g. my_op")
        if "small" not in sizes or "large" not in sizes:
            raise ValueError(f"family {name} must define 'small' and 'large' sizes")
        self.name = name
        self.summary = summary
        self.sizes = {preset: [dict(p) for p in cases] for preset, cases in sizes.items()}
        self.make_inputs = make_inputs
        self.reference = reference
        self.cost = cost
        self.dtypes = tuple(dtypes)
        # The dtypes bench runs without --dtype: declared (a quantized family names the formats its
        # users run), else bf16 where the family has it, else its first dtype.
        if default_dtypes is not None and (not default_dtypes or set(default_dtypes) - set(self.dtypes)):
            raise ValueError(
                f"family {name}: default_dtypes {tuple(default_dtypes)} must be some of its dtypes {self.dtypes}"
            )
        fallback = (DEFAULT_DTYPE,) if DEFAULT_DTYPE in self.dtypes else self.dtypes[:1]
        self.default_dtypes = tuple(default_dtypes) if default_dtypes is not None else fallback
        self.tolerances = {**DEFAULT_TOLERANCES, **(tolerances or {})}
        # The precision the tensor cores run in for an input dtype (fp32 matmuls may use tf32).
        # Quantized names map to the precision their MMAs run (fp8_e4m3: fp8; w8a16: bf16).
        self.tensor_precision = tensor_precision or tensor_precision_of
        # Optional: reduce (output, reference) to the tensors to compare, e.g. pick one of a tuple.
        self.compare = compare
        # Optional: a rule over a size's parameters that the cost model cannot hold (attention's head
        # dims: a model's cost asks for any head_dim); raises UserError for a size no variant takes.
        # Checked with a custom size (cases) and with every case built (build_case).
        self.check = check
        self.variants: dict[str, Variant] = {}

    def variant(
        self,
        name: str,
        *,
        kind: str | None = None,
        needs: Sequence[str] = (),
        modeled_bytes: Callable[[dict[str, Any], str], float] | None = None,
        dtypes: Sequence[str] | None = None,
        baseline: bool = False,
        library: LibraryPeer | None = None,
        sources: Sequence[str | Path] = (),
    ) -> Callable[[Builder], Builder]:
        """Register a variant builder: ``builder(case) -> zero-argument callable``.

        ``kind`` defaults to ``name``; a family with several forms of one kind names them
        ``triton_table``/``triton_fused`` with ``kind="triton"``. ``modeled_bytes(params, dtype)``
        is the HBM traffic this implementation really moves, where it is more than the ideal.
        ``baseline=True`` makes this the variant every row's ``speedup_vs_eager`` divides by
        (at most one per family; see ``Family.baseline``). ``library`` names the third-party
        library a ``kind="library"`` variant calls; it runs only where that library imports and
        supports the GPU, and its rows record the library and its version. ``sources`` are the .cu
        files the builder loads, as it names them (``cuda_build.family_source(__file__, "softmax")``),
        a variant that reaches another module's kernel included: bench starts their nvcc builds
        before the first row needs them.
        """
        kind = kind or (LIBRARY_KIND if library is not None else name)
        if kind not in VARIANT_KINDS:
            raise ValueError(f"variant kind {kind!r} is not one of {VARIANT_KINDS}")
        if (kind == LIBRARY_KIND) != (library is not None):
            raise ValueError(
                f"variant {name!r} of {self.name}: a library variant needs library=..., "
                f"and only kind={LIBRARY_KIND!r} takes one"
            )
        if library is not None and baseline:
            raise ValueError(f"variant {name!r} of {self.name}: a library variant cannot be the baseline")
        declared_sources = tuple(Path(source) for source in sources)
        not_cu = [str(source) for source in declared_sources if source.suffix != ".cu"]
        if not_cu:
            raise ValueError(f"variant {name!r} of {self.name}: sources are .cu files, not {', '.join(not_cu)}")
        if name in self.variants:
            raise ValueError(f"variant {name!r} registered twice in family {self.name}")
        declared = next((v.name for v in self.variants.values() if v.baseline), None)
        if baseline and declared is not None:
            raise ValueError(
                f"family {self.name} declares two baselines, {declared!r} and {name!r}; "
                "speedups need exactly one: drop baseline=True from one of them"
            )

        def register(build: Builder) -> Builder:
            self.variants[name] = Variant(
                name=name,
                kind=kind,
                build=build,
                needs=tuple(needs),
                modeled_bytes=modeled_bytes,
                dtypes=tuple(dtypes) if dtypes else None,
                description=(build.__doc__ or "").strip().splitlines()[0] if build.__doc__ else "",
                baseline=baseline,
                library=library,
                sources=declared_sources,
            )
            return build

        return register

    @property
    def baseline(self) -> Variant | None:
        """The variant speedups are stated against (the ``speedup_vs_eager`` column).

        The one registered with ``baseline=True``. A family that declares none (one written before
        baselines were declared) falls back to its variant named ``eager``; without that either,
        rows carry no speedup. Never "whichever eager variant ran first": that changed with
        ``--variants`` and with registration order.
        """
        declared = [v for v in self.variants.values() if v.baseline]
        return declared[0] if declared else self.variants.get("eager")

    def ordered_variants(self) -> list[Variant]:
        """Run order: the baseline first (later rows divide by its time), then by kind and name."""
        baseline = self.baseline
        return sorted(
            self.variants.values(),
            key=lambda v: (v is not baseline, VARIANT_KINDS.index(v.kind), v.name),
        )

    def cases(self, size: str) -> list[tuple[str, dict[str, Any]]]:
        """The parameter sets for a preset name or a custom ``key=value,...`` string."""
        if size in self.sizes:
            return [(size, dict(p)) for p in self.sizes[size]]
        if "=" not in size:
            raise UserError(
                f"unknown size {size!r} for {self.name}; valid: {', '.join(self.sizes)} "
                f"or key=value pairs over {', '.join(self.sizes['small'][0])}"
            )
        template = self.sizes["small"][0]
        params = dict(template)
        given: set[str] = set()
        for item in size.split(","):
            key, _, text = item.partition("=")
            key = key.strip()
            if not item.strip():  # `n=4096,` or `n=4096,,m=8`: a comma too many, not a key named ''
                raise UserError(
                    f"size {size!r} has an empty entry between commas; give key=value pairs over "
                    f"{', '.join(template)}, separated by single commas"
                )
            if key not in template:
                raise UserError(f"unknown size key {key!r} for {self.name}; valid keys: {', '.join(template)}")
            # `n=4096,n=8192` would silently run the last one, and the shape would not be the one asked for.
            if key in given:
                raise UserError(f"size key {key} is given twice in {size!r}; give each of {', '.join(template)} once")
            given.add(key)
            # 0 is a valid value where the family's own sizes use it (weight_only_gemm's group=0: per channel).
            least = 0 if any(shape.get(key) == 0 for shapes in self.sizes.values() for shape in shapes) else 1
            params[key] = _parse_param(self.name, key, text.strip(), template[key], least)
        # A family's rule over several keys (weight_only_gemm's group must divide k) raises UserError
        # from its cost model: checked here, so the command refuses the size in one line, where a
        # worker building the inputs would report each row as a crash.
        self.cost(params, self.dtypes[0])
        if self.check is not None:
            self.check(params)
        return [("custom", params)]

    def build_case(self, size: str, params: dict[str, Any], dtype: str, device: torch.device, seed: int = 0) -> Case:
        if self.check is not None:  # a preset's shape too, and a case built through the Python API
            self.check(params)
        generator = torch.Generator(device=device)
        generator.manual_seed(seed)
        inputs = self.make_inputs(params, DTYPES[dtype], device, generator)
        return Case(self, size, params, DTYPES[dtype], device, inputs, dtype_label=dtype)


def _parse_param(family: str, key: str, text: str, example: Any, least: int = 1) -> Any:
    try:
        if isinstance(example, bool):
            if text.lower() in ("1", "true", "yes"):
                return True
            if text.lower() in ("0", "false", "no"):
                return False
            raise ValueError
        if isinstance(example, int):
            value = int(text)
            if value < least:
                raise ValueError
            return value
        if isinstance(example, float):
            return float(text)
        return text
    except ValueError:
        kind = "true or false" if isinstance(example, bool) else f"a positive {type(example).__name__}"
        kind = "0 or a positive int" if least == 0 and not isinstance(example, bool) else kind
        raise UserError(f"size key {key}={text!r} for {family} must be {kind}") from None


def randn(shape: Sequence[int], dtype: torch.dtype, device: torch.device, generator: torch.Generator) -> torch.Tensor:
    """Random normal inputs, never zeros: zeros hide unwritten outputs and can run faster."""
    return torch.randn(tuple(shape), dtype=torch.float32, device=device, generator=generator).to(dtype)
