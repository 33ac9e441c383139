"""Every CUDA source compiles for Turing, Ampere and Hopper with warnings as errors.

Nothing compiled here runs here (no GPU in CI); this catches what nvcc can: syntax, types,
narrowing, unused results, and arch-specific instructions that lack a guard for older targets.
sm_90a is the target rooflint builds on an H100 (it enables wgmma); sm_90 must also build.
"""

from pathlib import Path

import pytest

import rooflint.kernels
from rooflint.engine.cuda_build import compile_source, nvcc_path

SOURCES = sorted(Path(rooflint.kernels.__file__).parent.glob("*.cu"))
ARCHS = ("sm_75", "sm_80", "sm_90", "sm_90a")


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not installed on this machine")
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_compiles_with_warnings_as_errors(source, tmp_path):
    # One nvcc call builds every target: the host side compiles once, so CI's 2 cores spend their
    # time in the device passes (an error still names the arch that failed).
    compile_source(source, tmp_path / f"{source.stem}.o", ARCHS, shared=False)
