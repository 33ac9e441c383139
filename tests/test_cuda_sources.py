"""Every CUDA source compiles for Turing, Ampere and Hopper with warnings as errors.

Nothing compiled here runs here (no GPU in CI); this catches what nvcc can: syntax, types,
narrowing, unused results, and arch-specific instructions that lack a guard for older targets.
sm_90a is the target rooflint builds on an H100 (it enables wgmma); sm_90 must also build.
"""

import re
from pathlib import Path

import pytest

import rooflint.kernels
from rooflint.engine.cuda_build import compile_source, include_dir, nvcc_path

# Beside each family module (kernels/<family>/<family>.cu and its other sources) and in plugins' place.
SOURCES = sorted(Path(rooflint.kernels.__file__).parent.rglob("*.cu"))
ARCHS = ("sm_75", "sm_80", "sm_90", "sm_90a")
# Code reaches sm_90a's own instructions (wgmma, setmaxnreg) only under these macros. A source that
# names none of them, itself or in a rooflint header it includes, is the same program for sm_90a as
# for sm_90: cicc emits the same PTX but for its .target line, and ptxas accepts for sm_90a all that it
# accepts for sm_90. Its sm_90a build would check nothing the sm_90 build does not, at a fifth of its time.
ARCH_SPECIFIC = re.compile(r"__CUDA_ARCH_(FEAT_SM\d+_ALL|SPECIFIC|FAMILY_SPECIFIC)")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def with_headers(source: Path) -> list[Path]:
    """The source and every quoted header it includes, directly or through another, found where nvcc looks."""
    found, pending = [], [source]
    while pending:
        path = pending.pop()
        if path in found:
            continue
        found.append(path)
        for name in INCLUDE.findall(path.read_text()):
            pending += [
                folder / name for folder in (path.parent, source.parent, include_dir()) if (folder / name).exists()
            ][:1]
    return found


def archs(source: Path) -> tuple[str, ...]:
    if any(ARCH_SPECIFIC.search(path.read_text()) for path in with_headers(source)):
        return ARCHS
    return tuple(arch for arch in ARCHS if arch != "sm_90a")


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not installed on this machine")
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_compiles_with_warnings_as_errors(source, tmp_path):
    # One nvcc call builds every target: the host side compiles once, so CI's 2 cores spend their
    # time in the device passes (an error still names the arch that failed). Optimizers off: this
    # checks that each target compiles clean; the -O3 build is made and run on the GPU machine.
    compile_source(source, tmp_path / f"{source.stem}.o", archs(source), shared=False, check_only=True)


def test_every_source_builds_for_turing_ampere_and_hopper_and_the_hopper_ones_for_sm_90a():
    assert all({"sm_75", "sm_80", "sm_90"} <= set(archs(source)) for source in SOURCES)
    specific = {source.name for source in SOURCES if "sm_90a" in archs(source)}
    # wgmma and setmaxnreg sit behind __CUDA_ARCH_FEAT_SM90_ALL: in gelu_linear.cu, and through
    # rooflint/hopper.cuh in the Hopper sources
    assert {"gelu_linear.cu", "attention_hopper.cu", "gelu_linear_hopper.cu"} <= specific
    assert "softmax.cu" not in specific and "decode_attention.cu" not in specific


def test_every_cuda_source_is_found_inside_its_family_package():
    names = {source.name for source in SOURCES}
    # one per CUDA family, plus the Hopper and decode-GEMM sources that sit beside their family's
    assert {"softmax.cu", "attention_hopper.cu", "gelu_linear_hopper.cu", "skinny_pdl.cu"} <= names
    assert all(source.parent.name != "kernels" for source in SOURCES)  # none left loose in kernels/
