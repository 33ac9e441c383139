"""Every CUDA source compiles for Turing, Ampere and Hopper with warnings as errors.

Nothing compiled here runs here (no GPU in CI); this catches what nvcc can: syntax, types,
narrowing, unused results, and arch-specific instructions that lack a guard for older targets.
sm_90a is the target rooflint builds on an H100 (it enables wgmma); sm_90 must also build.
"""

from pathlib import Path

import nvcc_checks
import pytest
from nvcc_checks import archs, check, sources

import rooflint.kernels
from rooflint.engine.cuda_build import nvcc_path

SOURCES = sources(Path(rooflint.kernels.__file__).parent)


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not installed on this machine")
@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_compiles_with_warnings_as_errors(source, tmp_path):
    # tests/nvcc_checks.py: one nvcc call for every target (an error names the arch that failed), or
    # a pass already recorded for these exact inputs (CI checks the sources while pip installs).
    check(source, tmp_path)


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


def toy_source(tmp_path, monkeypatch, line: str):
    """toy.cu (including helper.cuh, "// v1") and then ``line``, with nvcc's version fixed and the record
    of passes under tmp_path: what the record's tests edit to see a check made again or not."""
    monkeypatch.setattr(nvcc_checks, "_nvcc_version", lambda: "nvcc 13.0")
    monkeypatch.setenv(nvcc_checks.CACHE_ENV, str(tmp_path / "passed"))
    (tmp_path / "helper.cuh").write_text("// v1\n")
    source = tmp_path / "toy.cu"
    source.write_text(f'#include "helper.cuh"\n{line}\n')
    return source


def test_a_recorded_pass_is_reused_only_for_the_same_inputs(tmp_path, monkeypatch):
    # The record CI fills while pip installs: a pass is keyed by the source and its headers' bytes,
    # so an edited header compiles again, and a failure is never recorded.
    from rooflint.core.errors import VariantSkipped

    compiled = []

    def fake_compile(source, output, arch, **options):
        compiled.append(source.name)
        if "broken" in source.read_text():
            raise VariantSkipped(f"nvcc failed for {source.name} ({arch}): error: broken")

    monkeypatch.setattr(nvcc_checks, "compile_source", fake_compile)
    source = toy_source(tmp_path, monkeypatch, "__global__ void k() {}")
    nvcc_checks.check(source, tmp_path)
    nvcc_checks.check(source, tmp_path)
    assert compiled == ["toy.cu"]  # the second check found the first one's pass
    (tmp_path / "helper.cuh").write_text("// v2\n")
    nvcc_checks.check(source, tmp_path)
    assert compiled == ["toy.cu", "toy.cu"]  # a header changed: compiled again
    source.write_text('#include "helper.cuh"\nbroken\n')
    for _ in range(2):
        with pytest.raises(VariantSkipped, match="error: broken"):
            nvcc_checks.check(source, tmp_path)
    assert compiled.count("toy.cu") == 4  # a failure is reported each time, never remembered as a pass


def test_a_recorded_ptxas_report_is_reused_only_for_the_same_inputs(tmp_path, monkeypatch):
    # As a pass: the report of a build is keyed by its command and the source's and headers' bytes,
    # and a failed build is never recorded. The "nvcc" here notes each build it makes in a log and
    # prints the source as its report.
    import sys

    log = tmp_path / "builds.log"
    script = (
        "import sys; open(sys.argv[2], 'a').write('built\\n'); text = open(sys.argv[1]).read(); "
        "print(text, file=sys.stderr); sys.exit('broken' in text)"
    )

    def fake_command(source, output, arch, **options):
        return [sys.executable, "-c", script, str(source), str(log), f"--arch={arch}", "-o", str(output)]

    def builds() -> int:
        return len(log.read_text().splitlines())

    monkeypatch.setattr(nvcc_checks, "compile_command", fake_command)
    source = toy_source(tmp_path, monkeypatch, "// registers 40")
    first = nvcc_checks.ptxas_report(source, "sm_90a", tmp_path / "a")
    again = nvcc_checks.ptxas_report(source, "sm_90a", tmp_path / "b")  # another output path, the same build
    assert builds() == 1 and first.returncode == again.returncode == 0  # the second read the first's record
    assert "registers 40" in again.stderr and (again.stdout, again.stderr) == (first.stdout, first.stderr)
    nvcc_checks.ptxas_report(source, "sm_80", tmp_path)
    assert builds() == 2  # another target: built again
    (tmp_path / "helper.cuh").write_text("// v2\n")
    nvcc_checks.ptxas_report(source, "sm_90a", tmp_path)
    assert builds() == 3  # a header changed: built again
    source.write_text('#include "helper.cuh"\nbroken\n')
    for _ in range(2):
        assert nvcc_checks.ptxas_report(source, "sm_90a", tmp_path).returncode == 1
    assert builds() == 5  # a failure is reported each time, never recorded


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not installed on this machine")
def test_the_hopper_attention_builds_for_sm_90a_without_spills_or_serialized_wgmma(tmp_path):
    # At -O3 ptxas reports each kernel's spills and any wgmma it had to serialize (C7510 and kin),
    # which the warnings-as-errors check above does not catch: the D=128 consumer must fit 232
    # registers, D=64's 160 and D=256's 240 (O 128, S 40) with its producer at 24. The build's report
    # is the one recorded for these exact inputs where there is one (CI builds it while pip installs).
    source = Path(rooflint.kernels.__file__).parent / "attention" / "attention_hopper.cu"
    assert (source.name, "sm_90a") in nvcc_checks.REPORTED  # what CI builds ahead is this build
    done = nvcc_checks.ptxas_report(source, "sm_90a", tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    report = done.stderr + done.stdout
    for d in (64, 128, 256):  # each head dim's four kernels (two dtypes, both masks) were built
        assert report.count(f"Li{d}E") >= 4, d
    spills = [line for line in report.splitlines() if "spill" in line]
    assert spills and all("0 bytes spill stores, 0 bytes spill loads" in line for line in spills)
    assert "serialized" not in report and "setmaxnreg' ignored" not in report
