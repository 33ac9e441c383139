"""Compile caches that must survive from one process to the next: Triton's folder pinned before
torch.compile can move it, and a library's opt-in disk cache (FlashAttention-4's) turned on."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from fake_libraries import install

from rooflint.core.paths import cache_dir
from rooflint.engine import compile_caches
from rooflint.kernels.common.libraries import Library


def test_triton_own_dir_is_the_folder_triton_uses_when_the_variable_is_unset(monkeypatch, tmp_path):
    knobs = pytest.importorskip("triton.knobs")
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.setenv("TRITON_HOME", str(tmp_path))
    assert knobs.cache.dir == str(compile_caches.triton_own_dir()) == str(tmp_path / ".triton" / "cache")


def test_the_pin_sets_an_unset_folder_and_keeps_the_user_s(monkeypatch, tmp_path):
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    monkeypatch.delenv(compile_caches.PINNED_MARK, raising=False)
    monkeypatch.setenv("TRITON_HOME", str(tmp_path))
    compile_caches.pin_triton_cache_dir()
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / ".triton" / "cache")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "mine"))
    compile_caches.pin_triton_cache_dir()
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "mine")


def test_every_command_pins_triton_s_folder_before_it_runs(tmp_path):
    """Inductor sets TRITON_CACHE_DIR to its own folder only where it is unset: the console entry
    point sets it first, so the measuring processes a command starts inherit Triton's folder."""
    program = (
        "import os, sys\n"
        "sys.argv = ['rooflint', 'list']\n"
        "from rooflint.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(os.environ.get('TRITON_CACHE_DIR'), file=sys.stderr)\n"
    )
    unset = ("TRITON_CACHE_DIR", compile_caches.PINNED_MARK)
    env = {key: value for key, value in os.environ.items() if key not in unset}
    env["TRITON_HOME"] = str(tmp_path)
    done = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == str(tmp_path / ".triton" / "cache")


DISK_CACHE = ("FAKE_DSL_CACHE_ENABLED", "FAKE_DSL_CACHE_DIR")


def _library_with_a_disk_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("ROOFLINT_CACHE", str(tmp_path))
    for name in DISK_CACHE:
        monkeypatch.delenv(name, raising=False)
    install(monkeypatch, "fakedsl.cute", "1.0")
    return Library("fake-dsl", "fakedsl.cute", devices=("cpu",), disk_cache=DISK_CACHE)


def test_a_library_s_disk_cache_is_turned_on_in_rooflint_s_cache_before_its_import(monkeypatch, tmp_path):
    library = _library_with_a_disk_cache(monkeypatch, tmp_path)
    assert library.missing("cpu") is None
    assert os.environ["FAKE_DSL_CACHE_ENABLED"] == "1"
    assert os.environ["FAKE_DSL_CACHE_DIR"] == str(cache_dir("fakedsl")) == str(tmp_path / "fakedsl")


@pytest.mark.parametrize("name, value", [("FAKE_DSL_CACHE_ENABLED", "0"), ("FAKE_DSL_CACHE_DIR", "/elsewhere")])
def test_a_disk_cache_the_user_set_either_way_is_left_as_set(monkeypatch, tmp_path, name, value):
    library = _library_with_a_disk_cache(monkeypatch, tmp_path)
    monkeypatch.setenv(name, value)
    library.load()
    assert os.environ[name] == value
    assert [key for key in DISK_CACHE if key in os.environ] == [name]


def test_a_library_without_a_disk_cache_sets_nothing(monkeypatch, tmp_path):
    _library_with_a_disk_cache(monkeypatch, tmp_path)
    Library("fake-dsl", "fakedsl.cute", devices=("cpu",)).missing("cpu")
    assert not any(key in os.environ for key in DISK_CACHE)


def test_a_fleet_worker_puts_a_pinned_triton_folder_under_rooflint_s_root_and_keeps_a_chosen_one(monkeypatch, tmp_path):
    """A local fleet's Dask workers inherit the client's environment, pin included: the pin is not
    the user's choice, so the worker still shares Triton's cache under ROOFLINT_CACHE; a folder the
    user set stays."""
    pytest.importorskip("distributed")
    from rooflint.engine.fleet.task import share_caches

    monkeypatch.setenv("ROOFLINT_CACHE", str(tmp_path / "root"))
    monkeypatch.setenv("TRITON_HOME", str(tmp_path))
    for name in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", compile_caches.PINNED_MARK):
        monkeypatch.delenv(name, raising=False)
    compile_caches.pin_triton_cache_dir()
    share_caches()
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "root" / "triton")
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "root" / "inductor")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "mine"))
    share_caches()
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "mine")
