"""scripts/device/gemm_phases.py turns a traced Gluon GEMM launch's stamps into phases per CTA (the
round-16 perf notes read them). Checked here on the CPU with stamps laid out as the kernel writes
them (_gemm_gluon.TRACE_FIELDS, then one stamp per K step), so a field moved in the kernel's table
without the script following shows up as wrong phases."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "device"))
gemm_phases = pytest.importorskip("gemm_phases")  # imports triton through rooflint's kernels

from rooflint.kernels import _gemm_gluon  # noqa: E402


def cta_stamps(ns_start: int, start: int, steps: list[int], **fields: int) -> list[int]:
    row = dict.fromkeys(_gemm_gluon.TRACE_FIELDS, 0)
    row.update(ns_start=ns_start, start=start, **fields)
    stamps = [row[name] for name in _gemm_gluon.TRACE_FIELDS] + steps
    return stamps + [0] * (_gemm_gluon.TRACE_SLOTS - len(stamps))


def test_phases_are_read_from_the_stamps_as_the_kernel_lays_them_out():
    # Two CTAs; the second starts 64 ns later. Cycles: consumer 0's steps land every 800 from 2,000.
    steps = [2000 + 800 * k for k in range(12)]
    common = dict(producer_start=700, producer_done=9000, mma_done=11800, stores_issued=14300,
                  stores_done=15300, c1_mma_done=11300, c1_stores_issued=13800, c1_stores_done=14500)  # fmt: skip
    trace = torch.tensor(
        cta_stamps(1_000, 1000, steps, ns_end=10_400, **common)
        + cta_stamps(1_064, 1000, steps, ns_end=10_464, **common),
        dtype=torch.int64,
    )
    rows = gemm_phases.phases(trace, ctas=2, k_steps=12)
    first, second = rows
    assert (first["start_ns"], second["start_ns"], second["end_ns"]) == (0, 64, 9_464)
    assert first["first_bytes_cyc"] == 1000
    assert first["producer_start_cyc"] == -300
    assert first["c0_mma_done_cyc"] == 10_800
    assert (first["c0_math_and_issue_cyc"], first["c0_store_wait_cyc"]) == (2500, 1000)
    assert (first["c1_math_and_issue_cyc"], first["c1_store_wait_cyc"]) == (2500, 700)
    assert first["end_cyc"] == 14_300  # the later consumer's stores
    assert [first[f"step{k}_cyc"] for k in range(1, 12)] == [800] * 11
    assert first["ghz"] == pytest.approx(13_500 / 9_400)

    summary = gemm_phases.summary("x", rows)
    assert summary["span_ns"] == 9_464 and summary["max_start_ns"] == 64
    assert summary["median_c0_store_wait_cyc"] == 1000
