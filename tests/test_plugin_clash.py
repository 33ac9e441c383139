"""Installed plugins that go wrong, through the installed `rooflint` console script: a distribution
whose entry point claims a built-in family's name, and one whose module raises on import.

Each costs only its own family: asking for it is one error line naming what is wrong (both claimants
of a clashed name), exit 2, no traceback; `list` shows it; every other family lists and runs. The
distributions are bare .dist-info folders on PYTHONPATH, which importlib.metadata reads as installed.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import cpu_ceilings
import pytest
from console_script import ROOFLINT, needs_console_script

pytestmark = [
    needs_console_script,
    pytest.mark.xdist_group("plugins_cli"),
]

CLASH = "softmax"  # a built-in family's name, claimed again by the plugin below
GREEDY = "raise AssertionError('never imported')\n"  # a plugin whose family is named all


def install(site: Path, dist: str, entry: str, module: str, source: str) -> None:
    """A distribution `dist` with one rooflint.families entry point, as pip would leave its metadata."""
    info = site / f"{dist}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[rooflint.families]\n{entry} = {module}\n")
    (site / f"{module}.py").write_text(source)


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory) -> dict[str, str]:
    site = tmp_path_factory.mktemp("site")
    # The module is never imported for a clash: the name alone is claimed twice.
    install(site, "clashing_plugin", CLASH, "their_softmax", "raise AssertionError('never imported')\n")
    install(site, "raising_plugin", "boom", "boom_family", "raise RuntimeError('plugin bug at import')\n")
    # `all` asks for every family: a plugin claiming it could never be run alone.
    install(site, "greedy_plugin", "all", "all_family", GREEDY)
    env = dict(os.environ, COLUMNS="250", PYTHONPATH=str(site) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env["ROOFLINT_CACHE"] = str(site / "cache")
    cpu_ceilings.seed(env["ROOFLINT_CACHE"])  # measured once per test process, not again by the first bench
    env.pop("ROOFLINT_DEBUG", None)
    env.pop("ROOFLINT_FAMILY_MODULES", None)
    return env


def rooflint(env: dict[str, str], cwd: Path, *arguments: str) -> subprocess.CompletedProcess:
    return subprocess.run([ROOFLINT, *arguments], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_a_clashing_plugin_costs_only_the_name_it_claims(plugin_env, tmp_path):
    asked = rooflint(plugin_env, tmp_path, "bench", CLASH, "--device", "cpu", "--no-plots")
    assert asked.returncode == 2, asked.stdout + asked.stderr
    assert "Traceback" not in asked.stdout + asked.stderr
    lines = asked.stderr.strip().splitlines()
    assert len(lines) == 1, asked.stderr
    assert f"'{CLASH}' is claimed twice" in lines[0]
    assert "rooflint.kernels.softmax (built-in)" in lines[0]
    assert "their_softmax (entry point of clashing_plugin)" in lines[0]
    # Every other family still runs.
    other = rooflint(plugin_env, tmp_path, "bench", "vector_add", "-V", "eager", "--device", "cpu", "--no-plots")
    assert other.returncode == 0, other.stdout + other.stderr
    assert "vector_add" in (tmp_path / "rooflint-out" / "results.csv").read_text()


def test_list_shows_the_broken_plugins_beside_every_other_family(plugin_env, tmp_path):
    listed = rooflint(plugin_env, tmp_path, "list")
    assert listed.returncode == 0, listed.stdout + listed.stderr
    assert "Traceback" not in listed.stdout + listed.stderr
    text = listed.stdout  # a table: long messages wrap inside their cell
    assert "is claimed twice" in text
    assert "RuntimeError: plugin bug at import" in text
    assert "is reserved" in text  # the plugin that claimed `all`
    assert "vector_add" in text and "gelu" in text
    # new-family reads the names too: it still works, and still refuses the clashed name.
    assert rooflint(plugin_env, tmp_path, "new-family", "fresh_op", "--out", "new").returncode == 0
    taken = rooflint(plugin_env, tmp_path, "new-family", CLASH, "--out", "new")
    assert taken.returncode == 2 and "already exists" in taken.stderr


def test_a_plugin_claiming_all_is_named_where_all_is_asked_for(tmp_path):
    # Before, the plugin was listed as a family named all and `bench all` ran every family but it,
    # the plugin's name never runnable alone. As with any clash, asking for every family names it.
    site = tmp_path / "site"
    site.mkdir()
    install(site, "greedy_plugin", "all", "all_family", GREEDY)
    env = dict(os.environ, PYTHONPATH=str(site) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env["ROOFLINT_CACHE"] = str(tmp_path / "cache")
    cpu_ceilings.seed(env["ROOFLINT_CACHE"])  # measured once per test process, not again by the bench below
    env.pop("ROOFLINT_FAMILY_MODULES", None)
    asked = rooflint(env, tmp_path, "bench", "all", "--device", "cpu", "--no-plots")
    assert asked.returncode == 2, asked.stdout + asked.stderr
    lines = asked.stderr.strip().splitlines()
    assert len(lines) == 1 and "'all' is reserved" in lines[0], asked.stderr
    assert "all_family (entry point of greedy_plugin)" in lines[0]
    other = rooflint(env, tmp_path, "bench", "vector_add", "-V", "eager", "--device", "cpu", "--no-plots")
    assert other.returncode == 0, other.stdout + other.stderr
