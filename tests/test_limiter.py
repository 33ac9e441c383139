"""What limits a kernel, from ncu counters: the unit at its peak, or what the warps wait on."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from rooflint.analysis import limiter, ncu
from rooflint.analysis.limiter import stall_metric

RECORDED = Path(__file__).parent / "data" / "ncu_h100_calib.csv"
TENSOR = "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"


def kernel(name, us, **values):
    names = {
        "dram": limiter.DRAM_PCT,
        "sm": limiter.SM_PCT,
        "issue": limiter.ISSUE_PCT,
        "occupancy": limiter.OCCUPANCY_PCT,
        "tensor": TENSOR,
        "xu": limiter.XU_PCT,
        "regs": limiter.REGISTERS,
        "block": limiter.BLOCK,
        "grid": limiter.GRID,
        "smem": limiter.SMEM_DYNAMIC,
        "smem_static": limiter.SMEM_STATIC,
        "instructions": limiter.INSTRUCTIONS,
        "cpi": limiter.CYCLES_PER_ISSUE,
    }
    counters = {limiter.DURATION: us * 1e3}
    for key, value in values.items():
        counters[names[key] if key in names else stall_metric(key)] = value
    return ncu.KernelCounters(name, counters)


def test_a_stream_at_dram_peak_is_dram_bound():
    why = limiter.explain([kernel("copy", 100, dram=88.9, sm=30, issue=12, occupancy=80, long_scoreboard=9.5)])
    assert why.limiter == "DRAM bound (89% of peak)"
    assert why.main_kernel == "copy" and why.main_kernel_share_pct == 100.0


def test_no_unit_near_peak_is_latency_and_names_the_wait():
    why = limiter.explain(
        [kernel("softmax", 300, dram=55, sm=40, issue=35, occupancy=47, long_scoreboard=4.1, barrier=2.0, wait=0.5)]
    )
    assert why.limiter.startswith("latency: no unit above 60% (busiest DRAM 55%)")
    assert "warps wait most on long_scoreboard (4.10 cycles an instruction)" in why.limiter
    assert why.limiter.endswith("occupancy 47%")
    assert why.top_stalls == "long_scoreboard 4.10, barrier 2.00, wait 0.50"


def test_a_busy_tensor_pipe_short_of_its_limit_names_it_and_the_wait():
    why = limiter.explain([kernel("fmha", 2000, dram=9, sm=73, issue=36, tensor=71, xu=37, wait=1.47, barrier=1.08)])
    assert why.tensor_pipe_pct == 71 and why.xu_pct == 37
    assert why.limiter == (
        "tensor pipe at 71% of peak, short of its limit; warps wait most on wait (1.47 cycles an instruction)"
    )


def test_sm_throughput_is_named_only_when_no_named_unit_explains_it():
    # sm__throughput 79% against a tensor pipe at 71%: some other SM unit is busier than any named one.
    why = limiter.explain([kernel("fmha", 2000, dram=9, sm=79, issue=36, tensor=71)])
    assert why.limiter == "SM (its busiest unit) at 79% of peak, short of its limit"
    named = limiter.explain([kernel("fmha", 2000, dram=9, sm=73, issue=36, tensor=71)])
    assert named.limiter == "tensor pipe at 71% of peak, short of its limit"


def test_issue_bound_and_mufu_bound():
    assert limiter.explain([kernel("k", 10, dram=20, sm=85, issue=84)]).limiter == "issue bound (84% of peak)"
    assert (
        limiter.explain([kernel("k", 10, dram=20, sm=91, issue=40, xu=90)]).limiter == "MUFU (XU) bound (90% of peak)"
    )


def test_the_longest_kernel_explains_an_unfused_chain():
    why = limiter.explain(
        [kernel("exp", 30, dram=85, regs=16), kernel("sum", 10, dram=70, regs=32), kernel("div", 60, dram=90, regs=20)]
    )
    assert why.main_kernel == "div" and why.registers == 20
    assert why.main_kernel_share_pct == pytest.approx(60.0)
    assert why.limiter == "DRAM bound (90% of peak)"


def test_resources_are_read_and_shared_memory_adds_static_and_dynamic():
    why = limiter.explain(
        [kernel("k", 5, dram=50, regs=168, block=384, grid=4096, smem=165 * 1024, smem_static=1024, cpi=5.93)]
    )
    assert (why.registers, why.block, why.grid) == (168, 384, 4096)
    assert why.smem_bytes == 166 * 1024 and why.cycles_per_issue == 5.93
    assert math.isnan(limiter.explain([kernel("k", 5, dram=50)]).smem_bytes)


def test_counters_without_throughput_say_so_and_no_timed_kernel_is_none():
    # The recorded calibration CSV holds bytes and FLOPs only, as profiles before the limiter did.
    why = limiter.explain(ncu.read_raw_csv(RECORDED))
    assert why.limiter == "unknown: ncu reported no throughput counters"
    assert limiter.explain([ncu.KernelCounters("k", {limiter.DRAM_PCT: 50.0})]) is None


def test_why_metrics_ask_only_for_counters_this_ncu_knows():
    available = [
        "dram__throughput",
        "sm__throughput",
        "smsp__average_warps_issue_stalled_barrier_per_issue_active",
        "sm__pipe_tensor_op_hmma_cycles_active",
        "sm__pipe_tensor_op_gmma_cycles_active",
        "sm__pipe_alu_cycles_active",
    ]
    chosen = limiter.why_metrics(available)
    assert limiter.DRAM_PCT in chosen and limiter.SM_PCT in chosen
    assert stall_metric("barrier") in chosen and stall_metric("long_scoreboard") not in chosen
    assert limiter.ISSUE_PCT not in chosen  # not in this ncu's list: asking would fail the whole run
    assert all(m in chosen for m in (limiter.REGISTERS, limiter.BLOCK, limiter.GRID))  # launch attributes
    assert [m for m in chosen if "tensor" in m] == [
        "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
    ]


def test_columns_fill_a_profile_row_and_say_when_nothing_was_timed():
    why = limiter.explain([kernel("k", 10, dram=85, long_scoreboard=3.0)])
    row = limiter.columns(why)
    assert row["main_kernel"] == "k" and row["dram_pct"] == 85 and row["top_stalls"] == "long_scoreboard 3.00"
    assert "stalls" not in row and row["limiter"] == "DRAM bound (85% of peak)"
    blank = limiter.columns(None)
    assert set(blank) == set(row) and blank["limiter"] == limiter.UNTIMED
    assert math.isnan(blank["dram_pct"]) and blank["main_kernel"] == "" and blank["top_stalls"] == ""
