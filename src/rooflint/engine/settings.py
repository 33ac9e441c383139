"""How a bench measures: the timing regime, CUDA graphs and the throttle policy, with every default once.

The CLI builds one ``MeasureSettings``; it travels in the bench request, to each measuring process
as one JSON object (``to_dict``/``from_dict``) and to a fleet's Dask workers inside the request.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from rooflint.core.errors import UserError


class Regime(str, Enum):
    """docs/timing.md: burst spaces calls with a spin kernel, so the GPU runs near its boost clock
    (reproducible across machines); sustained runs them back to back after a heat-up, at the power
    cap, as a training loop does."""

    BURST = "burst"
    SUSTAINED = "sustained"

    def __str__(self) -> str:  # the name as written in rows and JSON, on every Python version
        return self.value

    @classmethod
    def parse(cls, value: str | Regime) -> Regime:
        """The regime ``value`` names; a UserError listing the valid ones for any other."""
        try:
            return cls(value)
        except ValueError:
            raise UserError(f"unknown regime {value!r}; valid: {', '.join(cls)}") from None


@dataclass(frozen=True)
class ThrottlePolicy:
    """When a timed row counts as throttled and how often it is timed again (engine/throttle.py)."""

    threshold: float = 0.90  # a row's median SM clock under this share of the reference is throttled
    retries: int = 3  # re-timings of a throttled row before it is kept and marked
    recovery_delay_s: float = 2.0  # wait before each re-timing: a hot GPU regains its clock in seconds

    def __post_init__(self) -> None:
        if not 0 < self.threshold <= 1:
            raise UserError(f"--throttle-threshold {self.threshold} must be in (0, 1], e.g. 0.9")
        if self.retries < 0:
            raise UserError(f"--throttle-retries {self.retries} must be 0 or more")
        # inf would wait forever (time.sleep refuses it mid-run) before a throttled row's re-timing.
        if not 0 <= self.recovery_delay_s < math.inf:
            raise UserError(f"--recovery-delay {self.recovery_delay_s} must be 0 or more seconds, and finite")


@dataclass(frozen=True)
class MeasureSettings:
    """The measuring settings of a bench: the same for every row of it."""

    regime: Regime = Regime.BURST
    cuda_graphs: bool = False  # time N calls captured in a CUDA graph (no launch gaps)
    throttle: ThrottlePolicy = field(default_factory=ThrottlePolicy)
    # A memory-bound burst row's samples may stop once its median's 95% interval is within this share
    # of it (early_stop.median_pinned; the worker gives compute-bound rows 0); 0, the default, takes every
    # sample of the 200 ms budget.
    max_noise: float = 0.0

    def __post_init__(self) -> None:
        # The CLI and JSON hand the regime over as its name.
        object.__setattr__(self, "regime", Regime.parse(self.regime))
        if not 0 <= self.max_noise < 1:  # also refuses NaN
            raise UserError(
                f"--max-noise {self.max_noise} must be a share in [0, 1), e.g. 0.005 (0.5%); 0 takes every sample"
            )

    @classmethod
    def from_options(cls, **options: Any) -> MeasureSettings:
        """From CLI options, None meaning the default: regime, cuda_graphs, max_noise,
        throttle_threshold, throttle_retries, recovery_delay_s."""
        given = {name: value for name, value in options.items() if value is not None}
        policy = {name: given.pop(key) for key, name in _THROTTLE_OPTIONS.items() if key in given}
        return cls(**given, throttle=ThrottlePolicy(**policy))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values: the form a measuring process receives."""
        return {**dataclasses.asdict(self), "regime": self.regime.value}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MeasureSettings:
        return cls(data["regime"], data["cuda_graphs"], ThrottlePolicy(**data["throttle"]), data["max_noise"])


_THROTTLE_OPTIONS = {
    "throttle_threshold": "threshold",
    "throttle_retries": "retries",
    "recovery_delay_s": "recovery_delay_s",
}
