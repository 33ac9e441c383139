"""The GPU tier: tests marked ``gpu`` run only where torch sees a CUDA GPU, and say so when they don't.

Run them on a GPU machine with ``bash scripts/device/gpu_tests.sh`` (it sets TRITON_INTERPRET=0:
the root conftest turns Triton's CPU interpreter on for the CPU suite).
"""

from __future__ import annotations

import os

import pytest
import torch


def why_no_gpu() -> str | None:
    if not torch.cuda.is_available():
        return "no CUDA GPU visible to torch (torch.cuda.is_available() is False)"
    return None


def pytest_report_header(config):
    why = why_no_gpu()
    if why:
        return f"gpu tier: skipped: {why}"
    interpreted = " (TRITON_INTERPRET=1: Triton kernels run in the CPU interpreter)" * (
        os.environ.get("TRITON_INTERPRET") == "1"
    )
    return f"gpu tier: runs on {torch.cuda.get_device_name()}{interpreted}"


def pytest_collection_modifyitems(config, items):
    why = why_no_gpu()
    if why is None:
        return
    skip = pytest.mark.skip(reason=f"gpu tier: {why}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
