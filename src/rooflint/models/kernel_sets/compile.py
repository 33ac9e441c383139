"""The compile set: the eager set's code, which the runner compiles a whole step of with torch.compile."""

from __future__ import annotations

from rooflint.models.kernel_sets.eager import EagerKernels


class CompileKernels(EagerKernels):
    """The eager ops; the runner compiles each whole step with torch.compile."""

    name = "compile"
    compiled = True
