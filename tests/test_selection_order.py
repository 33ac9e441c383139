"""The order a user names variants in is the order they are compared in."""

from __future__ import annotations

from types import SimpleNamespace

from rooflint.core.selection import in_asked_order


def _v(name, kind):
    return SimpleNamespace(name=name, kind=kind)


def test_variants_come_in_the_order_named_by_name_then_by_kind_then_the_rest():
    eager, triton, cuda, fa4 = (
        _v("eager", "eager"),
        _v("triton", "triton"),
        _v("cuda_hopper", "cuda"),
        _v("fa4", "library"),
    )
    chosen = [eager, triton, cuda, fa4]
    assert in_asked_order(chosen, ["fa4", "cuda"]) == [fa4, cuda, eager, triton]
    assert in_asked_order(chosen, ["triton", "eager"]) == [triton, eager, cuda, fa4]
    assert in_asked_order(chosen, []) == chosen
