"""`rooflint profile --ncu --sass`: Nsight Compute's SASS source page, summarised by what the
instructions do. The fixture is a cut of that page for attention_hopper.cu's D=128 kernel on an
H200 (twelve of its instructions, the export's own columns and numbers) and a small second kernel."""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import pytest

from rooflint.analysis import ncu as ncu_tools
from rooflint.analysis import sass
from rooflint.engine.profile import SassRow, sass_rows

FIXTURE = Path(__file__).parent / "fixtures" / "ncu_source_sass.csv"


@pytest.fixture(scope="module")
def kernels():
    return sass.parse_source_csv(FIXTURE.read_text())


def test_each_kernel_of_the_page_is_read_with_its_instructions(kernels):
    assert [len(k.lines) for k in kernels] == [12, 3]
    assert kernels[0].name.startswith("void <unnamed>::attention_hopper_kernel<__nv_bfloat16, (int)128, (bool)0>")
    wait = next(line for line in kernels[0].lines if "DEPBAR.LE gsb0, 0x0" in line.source)
    assert (wait.samples, wait.executed) == (21501, 1015808)
    assert wait.stalls["barrier"] == 21440  # the page's stall_barrier column
    assert sass.main_kernel(kernels) is kernels[0]  # the most samples, not the first listed
    assert sass.main_kernel(list(reversed(kernels))) is kernels[0]


@pytest.mark.parametrize(
    ("source", "opcode", "kind"),
    [
        ("@!P0  SYNCS.ARRIVE.TRANS64.A1T0 RZ, [UR24+0x30040], RZ", "SYNCS", "mbarrier"),
        ("HGMMA.64x128x16.F32.BF16 R24, R180, gdesc[UR16].tnspB, R24", "HGMMA", "tensor core"),
        ("WARPGROUP.DEPBAR.LE gsb0, 0x1", "WARPGROUP", "wgmma fence / wait"),
        ("@!UP1 ULOP3.LUT UR15, UR15, 0x8, URZ, 0xc, !UPT", "ULOP3", "uniform datapath"),
        ("UTMALDG.3D [UR8], [UR4]", "UTMALDG", "TMA"),
        ("MUFU.EX2 R88, R88", "MUFU", "special function (exp2, rcp)"),
        ("F2FP.BF16.F32.PACK_AB R155, R151, R155", "F2FP", "conversion"),
        ("LDS.128 R4, [R2]", "LDS", "shared memory"),
        ("LDC R1, c[0x0][0x28]", "LDC", "constant cache"),
        ("@P0 BRA 0x7fbfdf7abe00", "BRA", "branch"),
        ("NANOSLEEP.SYNCS 0x989680", "NANOSLEEP", "other"),
    ],
)
def test_an_instruction_s_opcode_and_kind(source, opcode, kind):
    line = sass.SassLine("0x0", source, 1.0, 1.0, {})
    assert line.opcode == opcode
    assert sass.opcode_class(opcode) == kind


def test_the_kinds_share_out_every_sample_and_name_unlisted_reasons(kernels):
    main = kernels[0]
    shares = sass.class_shares(main)
    assert math.isclose(sum(s.share_pct for s in shares), 100.0)
    assert math.isclose(sum(s.samples for s in shares), main.samples)
    assert math.isclose(sum(s.executed for s in shares), main.executed)
    assert [s.samples for s in shares] == sorted((s.samples for s in shares), reverse=True)
    first = shares[0]
    assert first.name == "wgmma fence / wait" and first.top_reasons.startswith("barrier ")
    # The HGMMA lines' samples exceed their stall_* columns: the rest is named, not dropped.
    tensor = next(s for s in shares if s.name == "tensor core")
    assert sass.UNLISTED in tensor.top_reasons


def test_the_hottest_instructions_come_first_with_their_share(kernels):
    hot = sass.hottest(kernels[0], count=3)
    assert [line.source.split()[0] for line, _, _ in hot] == ["WARPGROUP.DEPBAR.LE", "WARPGROUP.DEPBAR.LE", "UMOV"]
    assert hot[0][1] == pytest.approx(100 * 21501 / kernels[0].samples)
    assert hot[0][2].startswith("barrier 100%")


def test_two_kernels_differ_by_opcode_largest_first():
    def kernel(name, **executed):
        lines = [sass.SassLine(f"0x{i}", f"{op} R0", 10.0, count, {}) for i, (op, count) in enumerate(executed.items())]
        return sass.KernelSass(name, lines)

    mine = kernel("a", SYNCS=30.0, HGMMA=16.0, FMNMX=80.0)
    theirs = kernel("b", SYNCS=6.0, HGMMA=16.0, FMNMX=71.0, NANOSLEEP=1.0)
    deltas = sass.opcode_deltas(mine, theirs)
    assert [(d.opcode, d.executed, d.baseline_executed) for d in deltas] == [
        ("SYNCS", 30.0, 6.0), ("FMNMX", 80.0, 71.0), ("NANOSLEEP", 0.0, 1.0)
    ]  # fmt: skip
    assert all(d.opcode != "HGMMA" for d in deltas)  # the same count is no difference


def test_a_page_without_sass_rows_is_refused():
    with pytest.raises(ValueError, match="not an ncu source-page CSV"):
        sass.parse_source_csv('"ID","Kernel Name","dram__bytes_read.sum"\n"0","k","12"\n')


def test_sass_csv_rows_name_the_variant_kernel_and_kind(kernels):
    rows = sass_rows({"cuda_hopper": kernels[0]})
    assert all(isinstance(r, SassRow) and r.variant == "cuda_hopper" for r in rows)
    assert rows[0].kernel == "void <unnamed>::attention_hopper_kernel<__nv_bfloat16, (int)128, (bool)0>"
    assert {r.instructions for r in rows} >= {"tensor core", "mbarrier", "uniform datapath"}


def test_the_ncu_command_collects_the_source_counters_only_when_asked(tmp_path):
    plain = ncu_tools.profile_command("ncu", tmp_path / "r", "f", ["m"], ["python"])
    with_sass = ncu_tools.profile_command("ncu", tmp_path / "r", "f", ["m"], ["python"], ("SourceCounters",))
    assert "--section" not in plain
    assert with_sass[with_sass.index("--section") + 1] == "SourceCounters"
    assert with_sass[-1] == "python" and "--clock-control" in with_sass  # the clocks still left alone
    assert ncu_tools.source_import_command("ncu", tmp_path / "r")[-4:] == ["--page", "source", "--print-source", "sass"]


def test_the_tables_show_kinds_hottest_lines_and_the_difference(kernels):
    from rich.console import Console

    from rooflint.cli.commands.profile import _sass_tables

    console = Console(width=220, record=True)
    for table in _sass_tables({"cuda_hopper": kernels[0], "other": kernels[1]}):
        console.print(table)
    text = console.export_text()
    assert "cuda_hopper: where the warps wait (void <unnamed>::attention_hopper_kernel" in text
    assert "the instructions holding the most samples" in text
    assert "other against cuda_hopper: the opcodes whose executions differ most" in text


def test_sass_without_ncu_is_one_line_and_exit_2():
    done = subprocess.run(["rooflint", "profile", "softmax", "--sass"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == "error: --sass reads Nsight Compute's source page: add --ncu"
    assert "Traceback" not in done.stderr + done.stdout


@pytest.mark.parametrize(
    ("name", "short"),
    [
        ("void k<(int)128, (bool)0>(CUtensorMap_st, float)", "void k<(int)128, (bool)0>"),
        ("kernel_without_parameters", "kernel_without_parameters"),
        ("void f(int (*)(float))", "void f"),
    ],
)
def test_a_kernel_s_short_name_drops_only_its_parameter_list(name, short):
    assert sass.short_name(name) == short
