"""rooflint: roofline benchmarking and linting for GPU kernels."""

__version__ = "0.1.0"
