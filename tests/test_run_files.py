"""outputs/run_files: the one place that names what a bench writes or keeps in its folder, read by
keep_previous (which rooflines to move aside) and by --junit's refusal (which names it may not take)."""

from __future__ import annotations

import pytest

from rooflint.outputs.run_files import roofline_file, run_file


@pytest.mark.parametrize(
    "name, kind",
    [
        ("roofline.png", "current"),
        ("roofline.svg", "current"),
        ("roofline.csv", "current"),
        ("roofline-NVIDIA H100 80GB HBM3.png", "current"),
        ("roofline-qwen2.5-0.5b-triton-decode.svg", "current"),  # a model run's config holds dots
        ("roofline-a.prev.b.png", "current"),  # .prev inside a name is not the kept copy's suffix
        ("roofline.prev.png", "previous"),
        ("roofline-h100.prev.csv", "previous"),
        ("roofline-qwen2.5-0.5b-triton-decode.prev.svg", "previous"),
        ("roofline.pdf", None),
        ("rooflines.png", None),
        ("my-roofline.png", None),
        ("results.csv", None),
    ],
)
def test_roofline_files_are_told_from_their_kept_copies(name, kind):
    assert roofline_file(name) == kind


@pytest.mark.parametrize(
    "name, expected",
    [
        ("results.csv", True),
        ("results.json", True),
        ("results.prev.csv", True),
        ("results.prev.json", True),
        ("roofline-h100.prev.png", True),
        ("results.xml", False),
        ("junit.xml", False),
        ("results.csv.bak", False),
    ],
)
def test_run_files(name, expected):
    assert run_file(name) is expected
