"""Every CUDA source compiles for Turing, Ampere and Hopper with warnings as errors.

Nothing compiled here runs here (no GPU in CI); this catches what nvcc can: syntax, types,
narrowing, unused results, and arch-specific instructions that lack a guard for older targets.
sm_90a is the target rooflint builds on an H100 (it enables wgmma); sm_90 must also build.
"""

from pathlib import Path

import pytest

import rooflint.kernels
from rooflint.engine.cuda_build import compile_source, nvcc_path

# Beside each family module (kernels/<family>/<family>.cu and its other sources) and in plugins' place.
SOURCES = sorted(Path(rooflint.kernels.__file__).parent.rglob("*.cu"))
ARCHS = ("sm_75", "sm_80", "sm_90", "sm_90a")


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not installed on this machine")
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_compiles_with_warnings_as_errors(source, tmp_path):
    # One nvcc call builds every target: the host side compiles once, so CI's 2 cores spend their
    # time in the device passes (an error still names the arch that failed). Optimizers off: this
    # checks that each target compiles clean; the -O3 build is made and run on the GPU machine.
    compile_source(source, tmp_path / f"{source.stem}.o", ARCHS, shared=False, check_only=True)


def test_every_cuda_source_is_found_inside_its_family_package():
    names = {source.name for source in SOURCES}
    # one per CUDA family, plus the Hopper and decode-GEMM sources that sit beside their family's
    assert {"softmax.cu", "attention_hopper.cu", "gelu_linear_hopper.cu", "skinny_pdl.cu"} <= names
    assert all(source.parent.name != "kernels" for source in SOURCES)  # none left loose in kernels/
