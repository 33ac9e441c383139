"""GPU-only paths, run on a CPU with fakes: scratch bytes, --cuda-graphs, --devices, and a worker
that judges its rows on measured ceilings (--roof measured) through the spec it chooses itself."""

from __future__ import annotations

import dataclasses
import io
import json
import math
from types import SimpleNamespace

import pytest
import torch
from typer.testing import CliRunner

from rooflint.cli.app import app
from rooflint.core import roofs
from rooflint.core.errors import UserError
from rooflint.core.specs import spec_from_rows
from rooflint.engine import bench, measuring, timer, timing, worker
from rooflint.engine.settings import MeasureSettings, Regime
from rooflint.kernels.decode_attention.plans import split_plan, wave_plan
from rooflint.outputs.report import build_report
from rooflint.outputs.results import SKIPPED, ResultWriter, json_safe, read_results, row_from_record

H100_MEASURED = {"memory_bandwidth_gbps": 2959.0, "tensor_bf16_tflops": 783.0, "cuda_fp32_tflops": 65.96}


# ------------------------------------------------------------------------------- scratch bytes


class FakeAllocator:
    """torch.cuda's memory counters, driven by the test: what a call allocates and frees."""

    def __init__(self, monkeypatch):
        self.allocated = self.peak = 0
        monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
        monkeypatch.setattr(torch.cuda, "memory_allocated", lambda: self.allocated)
        monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: self.peak)
        monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda: setattr(self, "peak", self.allocated))

    def allocate(self, nbytes):
        self.allocated += nbytes
        self.peak = max(self.peak, self.allocated)

    def free(self, nbytes):
        self.allocated -= nbytes


def test_scratch_is_the_peak_beyond_inputs_and_fresh_outputs(monkeypatch):
    memory = FakeAllocator(monkeypatch)
    memory.allocate(10_000)  # inputs, allocated before the call

    def attention_like():
        memory.allocate(4096)  # the N^2 scores: scratch
        out = torch.empty(256, dtype=torch.float32)  # a fresh 1 KiB output
        memory.allocate(out.numel() * out.element_size())
        memory.free(4096)
        return out

    assert worker._scratch_bytes(attention_like, attention_like()) == 4096


def test_preallocated_outputs_and_tuples(monkeypatch):
    memory = FakeAllocator(monkeypatch)
    kept = torch.empty(64, dtype=torch.float32)  # written in place every call: already in `before`

    def in_place_with_workspace():
        memory.allocate(512)
        memory.free(512)
        return kept

    assert worker._scratch_bytes(in_place_with_workspace, in_place_with_workspace()) == 512

    def fresh_and_kept():  # (a fresh 400-byte tensor, the kept one): only the fresh one is output
        fresh = torch.empty(100, dtype=torch.float32)
        memory.allocate(400)
        return fresh, kept

    assert worker._scratch_bytes(fresh_and_kept, fresh_and_kept()) == 0

    def output_in_memory_it_freed():  # frees a 1000-byte buffer and puts its fresh output there
        memory.free(1000)
        memory.allocate(400)
        return torch.empty(100, dtype=torch.float32)

    assert worker._scratch_bytes(output_in_memory_it_freed, kept) == 0  # never negative scratch


# ------------------------------------------------------------------------------- --cuda-graphs


def test_cuda_graphs_time_through_graph_replays(monkeypatch):
    from rooflint.engine import graph_timing

    graphed = timing.Timing(0.5, 0.49, 0.51, 40, "cuda_graph", True)
    seen = {}

    def fake_launch_overhead(fn, **kwargs):
        seen.update(kwargs)
        return graphed, 0.007

    monkeypatch.setattr(graph_timing, "launch_overhead", fake_launch_overhead)
    monkeypatch.setattr(timing, "time_cuda", lambda *a, **k: pytest.fail("--cuda-graphs must not use event timing"))
    got = timer.measure(
        lambda: None, device="cuda", regime=Regime.BURST, l2_bytes=50 * 2**20, nvtx_name="f/v", cuda_graphs=True
    )
    assert got.mode == "cuda_graph" and got.median_ms == 0.5 and got.launch_overhead_ms == 0.007
    assert seen["l2_bytes"] == 50 * 2**20 and seen["nvtx_name"] == "f/v"


class FakePopen:
    """A worker process that answers every task with a skipped row; records its job and env."""

    started: list[FakePopen] = []

    def __init__(self, command, stdin, stdout, stderr, text, env):
        self.command, self.env, self.stdin = command, env, io.StringIO()
        self.stdin.close = lambda: None
        FakePopen.started.append(self)

    @property
    def job(self):
        return json.loads(self.stdin.getvalue().splitlines()[0])  # one job per line

    @property
    def stdout(self):
        for raw in self.job["tasks"]:
            task = worker.Task(**raw)
            row = worker.base_row(task, "eager", SKIPPED, "fake worker")
            row.gpu = "h100_sxm"
            yield json.dumps({"event": "row", "task": task.key, "row": json_safe(dataclasses.asdict(row))}) + "\n"
        yield json.dumps({"event": "done"}) + "\n"

    def poll(self):
        return None

    def wait(self, timeout=None):
        return 0


def test_devices_shard_whole_families_and_each_worker_chooses_its_own_spec(monkeypatch, tmp_path):
    FakePopen.started = []
    monkeypatch.setattr(measuring.subprocess, "Popen", FakePopen)
    request = bench.BenchRequest(
        families=["vector_add", "softmax"],
        variants=["eager", "triton"],
        dtypes=["bf16"],
        size="small",
        device="cuda",
        devices=[2, 5],
        roof="measured",
        gpu="h100",
        measure=MeasureSettings(cuda_graphs=True),
    )
    writer = ResultWriter(tmp_path)
    bench.run(bench.BenchPlan(request, bench.plan(request)), writer, None, lambda row: None)
    writer.close()
    by_device = {p.env["CUDA_VISIBLE_DEVICES"]: p.job for p in FakePopen.started}
    assert set(by_device) == {"2", "5"}
    families = [{t["family"] for t in job["tasks"]} for job in by_device.values()]
    assert sorted(map(sorted, families)) == [["softmax"], ["vector_add"]]  # each family whole on one GPU
    for job in by_device.values():
        # The parent builds no GPU spec: each worker reads its own device, with the request's choices.
        assert job["spec"] is None and job["device"] == "cuda"
        assert job["measure"]["cuda_graphs"] is True and job["roof"] == "measured" and job["gpu"] == "h100"
    assert {p.name for p in tmp_path.glob("worker-gpu*.log")} == {"worker-gpu2.log", "worker-gpu5.log"}
    assert len(read_results(tmp_path / "results.csv")) == sum(len(job["tasks"]) for job in by_device.values())


def test_devices_are_checked_against_the_gpus_there(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(UserError, match=r"--devices: no GPU 5; this machine has 2 \(valid: 0..1\)"):
        bench.prepare(bench.BenchRequest(families=["vector_add"], devices=[0, 5]))
    planned = bench.prepare(bench.BenchRequest(families=["vector_add"], devices=[0, 1]))
    assert planned.request.device == "cuda" and planned.request.size == "large"  # GPU defaults


@pytest.mark.parametrize(
    "devices, fragment", [("0,1", "--devices picks GPUs; it needs --device cuda"), ("0,x", "comma-separated")]
)
def test_devices_on_a_cpu_is_one_clear_line(devices, fragment, tmp_path):
    result = CliRunner().invoke(app, ["bench", "vector_add", "--device", "cpu", "--devices", devices])
    assert result.exit_code == 2 and fragment in result.output and "Traceback" not in result.output
    assert len([line for line in result.output.splitlines() if line.strip()]) == 1


# --------------------------------------------------------------------------- --roof measured


def test_worker_judges_rows_on_the_measured_roof_it_chose(monkeypatch, tmp_path, capsys):
    """worker.main() with no spec handed over, as on a GPU: it detects the device (a fake H100),
    lays the stored measured ceilings over the datasheet (--roof measured) and judges on them.
    The timing itself runs on the CPU."""
    monkeypatch.setenv("ROOFLINT_CACHE", str(tmp_path))
    roofs.save_ceilings("h100_sxm", "NVIDIA H100 80GB HBM3", H100_MEASURED)
    props = SimpleNamespace(name="NVIDIA H100 80GB HBM3", multi_processor_count=132, L2_cache_size=50 * 2**20)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: props)
    n = 1 << 16
    task = {"family": "vector_add", "variant": "eager", "dtype": "fp32", "size": "custom", "params": {"n": n}}
    job = {"device": "cpu", "roof": "measured", "measure": MeasureSettings().to_dict(), "tasks": [task]}
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(job)))
    worker.main()
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    [row] = [row_from_record(e["row"]) for e in events if e["event"] == "row"]
    assert row.status == "ok" and row.gpu == "h100_sxm" and row.ceiling_source == "measured"
    assert row.bandwidth_gbps == 2959.0  # the measured ceiling, not the datasheet's 3350
    floor_s = 3 * n * 4 / 2959e9  # read a and b, write c, fp32
    assert row.pct_of_roof == pytest.approx(100 * floor_s / (row.median_ms / 1e3))
    # Report and lint rebuild the same measured roof from the row.
    rebuilt = spec_from_rows("h100_sxm", [row])
    assert rebuilt.origin == "measured" and rebuilt.bandwidth_gbps == 2959.0
    frame = read_results(_write([row], tmp_path / "out"))
    [section] = build_report(frame)["gpus"]
    assert section["ceiling_source"] == "measured" and section["ceilings"]["memory_bandwidth_gbps"] == 2959.0
    assert math.isfinite(section["families"][0]["rows"][0]["pct_of_roof"])


def _write(rows, out_dir):
    writer = ResultWriter(out_dir)
    for item in rows:
        writer.append(item)
    writer.close()
    return writer.csv_path


# ------------------------------------------------------------------ decode plans in the model sets


class FakeDecodeLibrary:
    """The CUDA decode library's occupancy query: blocks per SM for (head dim, group, dtype, path)."""

    def __init__(self, blocks_per_sm):
        self.blocks_per_sm, self.asked = blocks_per_sm, []

    def query(self, function, *args):
        self.asked.append((function, *args))
        return self.blocks_per_sm


def test_the_models_cuda_set_decodes_with_the_benchs_cuda_plan():
    # The bench's `cuda` decode variant splits the cache by waves of the blocks an SM holds
    # (cuda_plan); the CUDA kernel set of `rooflint model` must run the same plan, not the Triton
    # kernels' default (split_plan), or the model would time a launch shape the bench never measured.
    from rooflint.models.kernel_sets import CudaKernels, TritonKernels

    b, h, h_kv, length, d = 4, 32, 8, 8192, 128  # 12 splits of 704 tokens by waves, 16 of 512 by default
    q = torch.zeros(b, h, 1, d, dtype=torch.bfloat16)
    cuda_set = object.__new__(CudaKernels)  # its __init__ builds with nvcc and needs a GPU
    cuda_set._workspaces, cuda_set._libraries = {}, {"decode_attention": FakeDecodeLibrary(3)}
    ws = cuda_set._workspace(q, h_kv, length)
    assert (ws.splits, ws.chunk) == wave_plan(b, h_kv, length, 3 * 132)
    assert cuda_set._libraries["decode_attention"].asked == [("rooflint_decode_blocks_per_sm", d, h // h_kv, 2, 0)]
    assert cuda_set._workspace(q, h_kv, length) is ws  # one workspace per length, planned once

    triton_set = object.__new__(TritonKernels)
    triton_set._workspaces = {}
    ws = triton_set._workspace(q, h_kv, length)
    assert (ws.splits, ws.chunk) == split_plan(b, h_kv, length, 132)
    assert split_plan(b, h_kv, length, 132) != wave_plan(b, h_kv, length, 3 * 132)


def test_the_triton_set_plans_chunks_its_registers_hold_only_under_pdl(monkeypatch):
    # In a decode step under PDL each program loads its chunk before its wait where the chunk fits
    # its registers: at D = 128 and a short cache the set plans 64-key chunks (preload_plan), where
    # the bench's default (split_plan) would give 128; without PDL it keeps the default.
    from rooflint.kernels.common import pdl
    from rooflint.models.kernel_sets import TritonKernels

    b, h, h_kv, length, d = 1, 32, 8, 576, 128
    q = torch.zeros(b, h, 1, d, dtype=torch.bfloat16)
    for enabled, plan in ((False, split_plan(b, h_kv, length, 132)), (True, (9, 64))):
        monkeypatch.setattr(pdl, "pdl_enabled", lambda device, enabled=enabled: enabled)
        triton_set = object.__new__(TritonKernels)
        triton_set._workspaces = {}
        ws = triton_set._workspace(q, h_kv, length)
        assert (ws.splits, ws.chunk) == plan
    assert split_plan(b, h_kv, length, 132) == (5, 128)
