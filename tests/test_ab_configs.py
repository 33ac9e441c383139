"""`rooflint ab --config`: the cross product of meta-parameter values, and the protocol by which a
variant's builder takes one (rooflint.engine.ab.configs)."""

from __future__ import annotations

import math
from types import MappingProxyType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rooflint.core.errors import UserError
from rooflint.engine.ab.configs import checked_config, config_defaults, config_label, parse_configs

names = st.lists(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True), min_size=1, max_size=3, unique=True)


def test_the_cross_product_in_the_order_given():
    assert parse_configs(["BLOCK_M=64,128", "num_warps=4,8"]) == [
        {"BLOCK_M": 64, "num_warps": 4},
        {"BLOCK_M": 64, "num_warps": 8},
        {"BLOCK_M": 128, "num_warps": 4},
        {"BLOCK_M": 128, "num_warps": 8},
    ]
    assert parse_configs([]) == []
    assert parse_configs([" BLOCK = 1, 2 ,2"]) == [{"BLOCK": 1}, {"BLOCK": 2}]  # a repeated value is one config


@settings(max_examples=50, deadline=None)
@given(data=st.data(), keys=names)
def test_every_combination_appears_once(data, keys):
    values = {key: data.draw(st.lists(st.integers(1, 512), min_size=1, max_size=4, unique=True)) for key in keys}
    configs = parse_configs([f"{key}={','.join(map(str, vals))}" for key, vals in values.items()])
    assert len(configs) == math.prod(len(vals) for vals in values.values())
    assert len({config_label(c) for c in configs}) == len(configs)
    assert all(list(c) == keys and all(c[k] in values[k] for k in keys) for c in configs)


@pytest.mark.parametrize(
    "texts, says",
    [
        (["BLOCK_M"], "malformed --config 'BLOCK_M'"),
        (["=64"], "malformed"),
        (["BLOCK M=64"], "malformed"),
        (["BLOCK_M="], "malformed"),
        (["BLOCK_M=64,big"], "'big' is not an integer"),
        (["BLOCK_M=64", "BLOCK_M=128"], "names BLOCK_M twice"),
    ],
)
def test_malformed_configs_say_what_is_valid(texts, says):
    with pytest.raises(UserError, match=says):
        parse_configs(texts)


def plain(case):
    return lambda: None


TUNABLE = MappingProxyType({"BLOCK": None, "num_warps": 4})


def tunable(case, config=TUNABLE):
    return lambda: config


def test_a_builder_is_configurable_when_its_config_default_names_the_parameters():
    assert config_defaults(plain) is None
    assert dict(config_defaults(tunable)) == {"BLOCK": None, "num_warps": 4}
    assert checked_config("f", "v", tunable, {"BLOCK": 64}) == {"BLOCK": 64, "num_warps": 4}


def test_a_config_a_variant_cannot_take_is_a_user_error():
    with pytest.raises(UserError, match="variant v of f takes no --config"):
        checked_config("f", "v", plain, {"BLOCK": 64})
    with pytest.raises(UserError, match="has no meta-parameter BLOCK_M; valid: BLOCK, num_warps"):
        checked_config("f", "v", tunable, {"BLOCK_M": 64})


@pytest.mark.parametrize("overrides", [{"BLOCK_R": 1}, {"BLOCK_R": 8, "num_warps": 2}, {"num_warps": 1}])
def test_softmax_triton_takes_a_config_and_stays_right(overrides):
    # In Triton's CPU interpreter: the config reaches the kernel (a BLOCK_R that is not a power of 2
    # cannot build its tl.arange) and every valid one still matches float64.
    pytest.importorskip("triton")
    import torch

    from rooflint.core.registry import get_family
    from rooflint.engine.correctness import check

    family = get_family("softmax")
    variant = family.variants["triton"]
    case = family.build_case("custom", {"rows": 37, "cols": 100}, "fp32", torch.device("cpu"), seed=3)
    reference = family.reference(case.inputs, case.params)
    config = checked_config("softmax", "triton", variant.build, overrides)
    assert check(family, "fp32", variant.build(case, config=config)(), reference).passed
    assert torch.equal(variant.build(case)(), variant.build(case, config=dict(config_defaults(variant.build)))())
    with pytest.raises(Exception):  # noqa: B017 - Triton's own error type for a bad arange differs by version
        variant.build(case, config={**config, "BLOCK_R": 3})()
