"""The roofline's label placement: its vectorized overlap test gives matplotlib's own answer
(Bbox.overlaps) for every pair of boxes, reversed extents and shared edges included, and a plot of
many crowded points places no label over another label or a point."""

from __future__ import annotations

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st
from matplotlib.transforms import Bbox

from rooflint.core.specs import get_spec
from rooflint.outputs import plot
from rooflint.outputs.points import points_from_results

# Coordinates on a coarse grid, so shared edges and equal extents come up often.
coordinate = st.integers(min_value=-20, max_value=20).map(float)
box = st.tuples(coordinate, coordinate, coordinate, coordinate).map(lambda e: Bbox.from_extents(*e))


@settings(max_examples=300, deadline=None)
@given(placed=st.lists(box, max_size=12), candidate=box)
def test_the_vectorized_test_agrees_with_bbox_overlaps(placed, candidate):
    taken = plot._Taken(placed)
    assert taken.hits(candidate) == any(candidate.overlaps(other) for other in placed)


def _rows(count: int) -> pd.DataFrame:
    # Many families and variants crowded at a few intensities: most labels must move off their point.
    rows = []
    for i in range(count):
        rows.append(
            {
                "family": f"family{i % 7}",
                "variant": f"variant{i}",
                "kind": ("eager", "triton", "cuda")[i % 3],
                "dtype": "bf16",
                "shape": f"n={i % 5}",
                "status": "ok",
                "ai_flop_per_byte": 10.0 ** (1 + (i % 5) * 0.5),
                "achieved_tflops": 50.0 + 7.0 * i,
                "achieved_gbps": 1000.0,
                "median_ms": 1.0,
                "tensor_flops": 1e9,
                "cuda_flops": 0.0,
                "ideal_bytes": 1e8,
                "pct_of_roof": 50.0,
                "precision": "bf16",
                "compute_unit": "tensor",
            }
        )
    return pd.DataFrame(rows)


def test_a_crowded_plot_places_no_label_over_another(tmp_path, monkeypatch):
    boxes = {"points": [], "labels": []}
    placing = []
    place = plot._place

    class Recording(plot._Taken):
        def __init__(self, placed=()):
            boxes["points"] += list(placed)
            super().__init__(placed)

        def add(self, box):
            if placing:  # a label _place put down (not a point, not a fixed text)
                boxes["labels"].append(box)
            super().add(box)

    def recording_place(*args, **kwargs):
        placing.append(True)
        try:
            return place(*args, **kwargs)
        finally:
            placing.pop()

    monkeypatch.setattr(plot, "_Taken", Recording)
    monkeypatch.setattr(plot, "_place", recording_place)
    written = plot.plot_roofline(points_from_results(_rows(60)), get_spec("h100_sxm"), tmp_path / "roofline", "t")
    assert {path.suffix for path in written} >= {".png", ".svg", ".csv"}
    labels = boxes["labels"]
    assert len(labels) > 10  # crowded: many labels were placed, most away from their point
    for i, label in enumerate(labels):
        assert not any(label.overlaps(point) for point in boxes["points"]), label
        assert not any(label.overlaps(other) for other in labels[i + 1 :]), label
