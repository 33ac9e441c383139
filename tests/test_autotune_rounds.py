"""Autotuning in rounds (kernels/common/autotune_rounds.py), driven on a CPU by a fake autotuner that
runs as Triton 3's does: at a new key it calls its ``do_bench`` with one ``kernel_call`` closure per
config (over a cell named ``config``), keeps the min, and launches the pick. Times come from a
scripted clock standing in for triton.testing.do_bench, so a clock dip can be placed on one window."""

from __future__ import annotations

import pytest

from rooflint.kernels.common import autotune_picks, autotune_rounds


class TritonLikeAutotuner:
    def __init__(self, configs=("128x256", "128x128", "64x256")) -> None:
        self.configs = [f"config {name}" for name in configs]  # distinct objects, matched by identity
        self.cache: dict = {}
        self.failing: set = set()
        self.launched: list = []  # every kernel launch: (config, key)
        self.fn = type("Jit", (), {"cache_key": "k", "__name__": "_fake"})()

    def do_bench(self, kernel_call, quantiles=None):  # Triton's own benchmarker: the fake never reaches it
        raise AssertionError("the recorder must replace the autotuner's do_bench")

    def _bench(self, key, config):
        def kernel_call():  # Triton's closure: the config it launches is the free variable `config`
            if config in self.failing:
                raise RuntimeError("out of resources")
            self.launched.append((config, key))

        try:
            return self.do_bench(kernel_call, quantiles=(0.5, 0.2, 0.8))
        except RuntimeError:
            return [float("inf")] * 3

    def __getitem__(self, grid):
        def run(n):
            key = (n, "torch.int8")
            if key not in self.cache:
                timings = {config: self._bench(key, config) for config in self.configs}
                self.cache[key] = min(timings, key=timings.get)
            self.launched.append((self.cache[key], key))

        return run


class ScriptedClock:
    """do_bench's stand-in: each config's true time, plus a dip (added ms) on chosen windows, counted
    per config in the order they are timed (window 0 is the first pass)."""

    def __init__(self, autotuner, true_ms, dips=None) -> None:
        self.autotuner, self.true_ms, self.dips = autotuner, true_ms, dips or {}
        self.windows: dict = {}

    def __call__(self, call, warmup=None, rep=None, return_mode=None):
        config = autotune_rounds.config_of(call, self.autotuner.configs)
        window = self.windows.get(config, 0)
        self.windows[config] = window + 1
        call()
        return self.true_ms[config] + self.dips.get((config, window), 0.0)


@pytest.fixture(autouse=True)
def gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("ROOFLINT_CACHE", str(tmp_path))
    monkeypatch.delenv(autotune_picks.ENV, raising=False)
    monkeypatch.setattr(autotune_picks, "_known", {})
    monkeypatch.setattr(autotune_picks, "_device_name", lambda device: "NVIDIA H200")


def use_clock(monkeypatch, autotuner, true_ms, dips=None) -> ScriptedClock:
    by_config = dict(zip(autotuner.configs, true_ms))
    dips = {(autotuner.configs[index], window): ms for (index, window), ms in (dips or {}).items()}
    clock = ScriptedClock(autotuner, by_config, dips)
    monkeypatch.setattr(autotune_rounds, "time_ms", lambda call, rep_ms: clock(call, rep=rep_ms))
    return clock


def test_a_dip_in_the_fastest_config_s_first_window_does_not_decide_the_pick(monkeypatch):
    autotuner = TritonLikeAutotuner()
    fast, slow, slower = autotuner.configs
    # config 0 is the fastest (0.85 ms), but its first window falls in a clock dip: Triton's single
    # pass would pick config 2 (1.00 ms), as the reference run did
    clock = use_clock(monkeypatch, autotuner, [0.85, 1.01, 1.00], dips={(0, 0): 0.3})
    autotune_picks.launch(autotuner, (1,), "cuda", 8192)
    key = (8192, "torch.int8")
    assert autotuner.cache[key] is fast
    assert autotuner.best_config is fast
    # each config: the first pass and ROUNDS rounds
    assert all(clock.windows[config] == 1 + autotune_rounds.ROUNDS for config in autotuner.configs)
    # the last launch is the pick's, so the output the caller reads is the pick's
    assert autotuner.launched[-1] == (fast, key)
    assert autotuner.configs_timings[fast][0] == pytest.approx(0.85)
    assert autotuner.configs_timings[slower][0] == pytest.approx(1.00)
    # and the store keeps the refined pick for the next process
    autotune_picks._known.clear()
    second = TritonLikeAutotuner()
    use_clock(monkeypatch, second, [2.0, 1.0, 1.0])  # would pick otherwise, if it timed
    autotune_picks.launch(second, (1,), "cuda", 8192)
    assert second.cache[key] is second.configs[0] and second.launched == [(second.configs[0], key)]
    assert autotuner.configs_timings[slow][0] == pytest.approx(1.01)


def test_one_dip_in_a_round_is_outvoted_by_the_other_rounds(monkeypatch):
    autotuner = TritonLikeAutotuner()
    use_clock(monkeypatch, autotuner, [0.85, 0.90, 1.0], dips={(0, 2): 0.5, (1, 0): 0.5})
    autotune_picks.launch(autotuner, (1,), "cuda", 4096)
    assert autotuner.cache[(4096, "torch.int8")] is autotuner.configs[0]


def test_a_config_that_cannot_run_is_left_out_of_the_rounds(monkeypatch):
    autotuner = TritonLikeAutotuner()
    autotuner.failing = {autotuner.configs[0]}  # raises at its first launch, as Triton's OutOfResources
    clock = use_clock(monkeypatch, autotuner, [0.5, 1.2, 1.1])
    autotune_picks.launch(autotuner, (1,), "cuda", 1024)
    assert autotuner.cache[(1024, "torch.int8")] is autotuner.configs[2]
    assert clock.windows[autotuner.configs[0]] == 1  # its first-pass launch raised; no round times it


def test_launches_that_match_no_config_keep_triton_s_pick(monkeypatch):
    autotuner = TritonLikeAutotuner()
    use_clock(monkeypatch, autotuner, [1.0, 0.9, 1.1])
    recorder = autotune_rounds.install(autotuner)
    recorder.calls = [lambda: None, lambda: None]  # not Triton's closures: no `config` cell
    assert autotune_rounds.refine(autotuner, (1, "x")) is None
    assert autotuner.cache == {} and recorder.calls == []


def test_a_launch_of_a_known_key_times_nothing(monkeypatch):
    autotuner = TritonLikeAutotuner()
    clock = use_clock(monkeypatch, autotuner, [1.0, 0.9, 1.1])
    autotune_picks.launch(autotuner, (1,), "cuda", 2048)
    timed = dict(clock.windows)
    for _ in range(3):
        autotune_picks.launch(autotuner, (1,), "cuda", 2048)
    assert clock.windows == timed
    assert autotuner.cache[(2048, "torch.int8")] is autotuner.configs[1]


def test_the_rounds_run_with_the_store_off_too(monkeypatch):
    monkeypatch.setenv(autotune_picks.ENV, "0")
    autotuner = TritonLikeAutotuner()
    use_clock(monkeypatch, autotuner, [0.85, 1.01, 1.00], dips={(0, 0): 0.3})
    autotune_picks.launch(autotuner, (1,), "cuda", 8192)
    assert autotuner.cache[(8192, "torch.int8")] is autotuner.configs[0]
    assert not autotune_picks.store_path("NVIDIA H200").exists()


def test_the_recorder_answers_triton_s_quantiles_call(monkeypatch):
    monkeypatch.setattr(autotune_rounds, "time_ms", lambda call, rep_ms: 0.5)
    recorder = autotune_rounds.Recorder()
    assert recorder(lambda: None, quantiles=(0.5, 0.2, 0.8)) == [0.5, 0.5, 0.5]
    assert recorder(lambda: None) == 0.5 and len(recorder.calls) == 2
