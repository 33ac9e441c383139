"""The one spec API: current_gpu_spec (with a fake device), spec_from_rows, and the shared helpers
that replaced private copies (variant selection, the typed CSV codec, the merge key)."""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import pytest
import torch
from result_factory import CPU, MATMUL_BF16, row, run

from rooflint.core import roofs
from rooflint.core.errors import UserError
from rooflint.core.family import Cost
from rooflint.core.registry import get_family
from rooflint.core.roofline import floor_seconds
from rooflint.core.selection import check_variant_names, select_variants
from rooflint.core.specs import current_gpu_spec, get_spec, spec_from_rows
from rooflint.outputs.merge import KEY
from rooflint.outputs.results import ResultRow, read_typed_csv, row_from_record, write_typed_csv

H100_MEASURED = {"memory_bandwidth_gbps": 2959.0, "tensor_bf16_tflops": 783.0, "cuda_fp32_tflops": 65.96}


@pytest.fixture
def fake_h100(monkeypatch):
    """torch.cuda as an H100 with 132 SMs and a 60 MiB L2 (a cut differing from the table) reports it."""
    props = SimpleNamespace(name="NVIDIA H100 80GB HBM3", multi_processor_count=132, L2_cache_size=60 * 2**20)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)


def test_current_gpu_spec_detects_applies_the_device_and_the_roof(fake_h100, monkeypatch, tmp_path):
    monkeypatch.setenv("ROOFLINT_CACHE", str(tmp_path))
    spec = current_gpu_spec()
    assert spec.key == "h100_sxm" and spec.origin == "datasheet"
    assert spec.l2_bytes == 60 * 2**20 and spec.bandwidth_gbps == 3350  # the device's L2, the table's bandwidth
    with pytest.raises(UserError, match="no measured ceilings for h100_sxm"):
        current_gpu_spec(roof="measured")
    roofs.save_ceilings("h100_sxm", "NVIDIA H100 80GB HBM3", H100_MEASURED)
    measured = current_gpu_spec(roof="measured")
    assert measured.origin == "measured" and measured.bandwidth_gbps == 2959.0
    assert measured.l2_bytes == 60 * 2**20  # the device's properties survive the roof
    assert current_gpu_spec(gpu="t4").key == "t4"  # --gpu names the spec instead of detection


def test_current_gpu_spec_for_a_gpu_outside_the_table(monkeypatch, tmp_path):
    props = SimpleNamespace(name="Radeon Instinct MI300X", multi_processor_count=304, L2_cache_size=4 * 2**20)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    with pytest.raises(UserError, match="--spec-file, or name one with --gpu"):
        current_gpu_spec()
    spec_file = tmp_path / "mi300x.toml"
    spec_file.write_text(
        '[mi300x]\nname = "MI300X"\nmatch = ["MI300X"]\nmemory_bandwidth_gbps = 5300\ncuda_fp32_tflops = 81.7\n'
    )
    spec = current_gpu_spec(spec_file)
    assert spec.key == "mi300x" and spec.origin == "user" and spec.get("sm_count") == 304


def test_datasheet_rows_get_their_gpus_table_entry():
    h100 = run("h100_sxm")
    assert spec_from_rows("h100_sxm", h100) == get_spec("h100_sxm")
    records = [dataclasses.asdict(r) for r in run("a100_80gb_sxm")]
    assert spec_from_rows("a100_80gb_sxm", records) == get_spec("a100_80gb_sxm")  # dicts work the same


def test_cpu_rows_rebuild_the_ceilings_they_were_judged_on():
    rows = [row("vector_add", "eager", 50.0, gpu="cpu", spec=CPU), row("vector_add", "triton", gpu="cpu", spec=CPU)]
    rows[0].l2_bytes = 32 * 2**20
    rows[1].status, rows[1].bandwidth_gbps = "skipped", math.nan  # nothing timed, nothing recorded
    spec = spec_from_rows("cpu", rows)
    assert spec.key == "cpu" and spec.origin == "measured"
    assert spec.bandwidth_gbps == 20.0 and spec.cuda_peak_tflops("fp32") == 0.5
    assert spec.l2_bytes == 32 * 2**20
    assert spec_from_rows("cpu", rows[1:]) is None


def test_measured_roof_rows_of_a_known_gpu_are_rebuilt_not_read_from_the_table(tmp_path):
    roofs.save_ceilings("h100_sxm", "H100", H100_MEASURED, tmp_path)
    measured = roofs.roof_spec(get_spec("h100_sxm"), "measured", tmp_path)
    rows = [row("vector_add", "triton", 0.55, spec=measured), row("softmax", "eager", 0.1, spec=measured)]
    spec = spec_from_rows("h100_sxm", rows)
    assert spec.origin == "measured" and spec.bandwidth_gbps == 2959.0
    assert spec.cuda_peak_tflops("fp32") == pytest.approx(65.96)


ATTENTION_LIKE = Cost(tensor_flops=MATMUL_BF16.tensor_flops, cuda_flops=5e11, bytes=MATMUL_BF16.bytes)


def _outside_the_table(rows):
    for item in rows:
        item.gpu = "mygpu"  # not in the table: the ceilings must come from the rows
    return rows


def test_a_mixed_unit_row_reproduces_its_own_floor():
    # Tensor-core matmuls plus CUDA-core softmax: the row records each unit's roof.
    [item] = _outside_the_table([row("attention", "triton", 0.3, cost=ATTENTION_LIKE)])
    rebuilt = spec_from_rows("mygpu", [item])
    assert rebuilt.tensor_peak_tflops("bf16") == get_spec("h100_sxm").tensor_peak_tflops("bf16")
    assert rebuilt.cuda_peak_tflops("fp32") == get_spec("h100_sxm").cuda_peak_tflops("fp32")
    original = floor_seconds(ATTENTION_LIKE, get_spec("h100_sxm"), "bf16")
    assert floor_seconds(ATTENTION_LIKE, rebuilt, "bf16") == pytest.approx(original)


def test_an_old_files_blended_peak_stands_in_only_where_nothing_better_is_known():
    mixed, cuda_only = _outside_the_table([row("attention", "triton", 0.3, cost=ATTENTION_LIKE), row()])
    for item in (mixed, cuda_only):
        item.tensor_peak_tflops = item.cuda_peak_tflops = math.nan  # schema 1: one peak_tflops per row
    alone = spec_from_rows("mygpu", [mixed])
    assert alone.tensor_peak_tflops("bf16") == alone.cuda_peak_tflops("fp32") == pytest.approx(mixed.peak_tflops)
    # A row whose FLOPs all ran on the CUDA cores gives that unit's exact peak, which wins.
    both = spec_from_rows("mygpu", [mixed, cuda_only])
    assert both.cuda_peak_tflops("fp32") == pytest.approx(67.0)
    assert both.tensor_peak_tflops("bf16") == pytest.approx(mixed.peak_tflops)


def test_split_peak_columns_win_over_the_blended_one():
    item = row("attention", "triton", 0.3, cost=Cost(tensor_flops=1e12, cuda_flops=1e10, bytes=1e8))
    item.gpu, item.ceiling_source = "cpu", "measured"
    item.tensor_peak_tflops, item.cuda_peak_tflops = 900.0, 60.0
    spec = spec_from_rows("cpu", [item])
    assert spec.tensor_peak_tflops("bf16") == 900.0 and spec.cuda_peak_tflops("fp32") == 60.0


def test_user_spec_rows_use_the_spec_file_when_given(tmp_path):
    spec_file = tmp_path / "mygpu.toml"
    spec_file.write_text('[mygpu]\nname = "My GPU"\nmemory_bandwidth_gbps = 500\ncuda_fp32_tflops = 10\n')
    user = get_spec("mygpu", spec_file)
    rows = [row("vector_add", "eager", 2.0, gpu="mygpu", spec=user)]
    rows[0].ceiling_source = "user"
    assert spec_from_rows("mygpu", rows, spec_file) == user
    rebuilt = spec_from_rows("mygpu", rows)  # no spec file at hand: the rows still carry their ceilings
    assert rebuilt.origin == "user" and rebuilt.bandwidth_gbps == 500 and rebuilt.name == "My GPU"


def test_variant_selection_by_name_kind_and_dtype():
    softmax = get_family("softmax")
    names = [v.name for v in select_variants(softmax, ["eager", "triton"])]
    assert names[0] == "eager" and "triton" in names
    assert {softmax.variants[name].kind for name in names} == {"eager", "triton"}
    assert [v.name for v in select_variants(softmax)] == [v.name for v in softmax.ordered_variants()]
    check_variant_names(["triton", "eager_unfused"], [softmax])
    with pytest.raises(UserError, match="unknown variant 'fused9'.*valid: .*eager"):
        check_variant_names(["fused9"], [softmax, get_family("vector_add")])
    only_fp32 = dataclasses.replace(softmax.variants["eager"], dtypes=("fp32",))
    fake = SimpleNamespace(ordered_variants=lambda: [only_fp32, softmax.variants["triton"]])
    assert [v.name for v in select_variants(fake, [], "bf16")] == ["triton"]


def test_merge_key_is_the_row_key():
    item = row()
    assert tuple(dataclasses.asdict(item)[name] for name in KEY) == item.key()


def _same(a, b):
    """Record equality where NaN equals NaN (not measured on both sides)."""
    nan = [k for k, v in a.items() if isinstance(v, float) and math.isnan(v)]
    return all(isinstance(b[k], float) and math.isnan(b[k]) for k in nan) and {
        k: v for k, v in a.items() if k not in nan
    } == {k: v for k, v in b.items() if k not in nan}


def test_typed_csv_round_trip_matches_row_from_record(tmp_path):
    rows = run() + [row("vector_add", "cuda", status="failed", message="rel error 0.31")]
    path = write_typed_csv(rows, tmp_path / "rows.csv", ResultRow)
    back = read_typed_csv(path, ResultRow, "rooflint results file")
    assert len(back) == len(rows)
    for written, read in zip(rows, back):
        assert _same(dataclasses.asdict(written), dataclasses.asdict(read))
        assert _same(dataclasses.asdict(read), dataclasses.asdict(row_from_record(dataclasses.asdict(written))))
    (tmp_path / "bad.csv").write_text("family,variant\nx,y\n")
    with pytest.raises(UserError, match="bad.csv is not a rooflint results file: missing columns kind"):
        read_typed_csv(tmp_path / "bad.csv", ResultRow, "rooflint results file")
