"""One set of helpers for numbers and text cells: finite checks, table cells and CSV text.

Result files carry NaN for "not measured" and pandas reads empty text cells as NaN; every table,
report and lint message goes through these so a missing value reads the same everywhere.
"""

from __future__ import annotations

import math
from typing import Any


def finite(value: Any) -> bool:
    """A real number that is not NaN or infinite (bools are not numbers here)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def fmt(value: Any, digits: int = 3, missing: str = "-") -> str:
    """A number to ``digits`` significant figures, or ``missing`` for NaN, None and non-numbers."""
    return f"{value:.{digits}g}" if finite(value) else missing


def text(value: Any, strip: bool = True) -> str:
    """A text cell as written: None and NaN (an empty CSV cell read by pandas, or a column its file
    lacked after a concat) become ""; ``strip=False`` keeps its whitespace, as a column rooflint does
    not know is written back as read."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(value).strip() if strip else str(value)


def number(value: Any) -> float:
    """A numeric cell as a float, NaN where it is empty or not a number."""
    try:
        result = float(value)
    except (TypeError, ValueError):
        return math.nan
    return result


def counted(n: int, noun: str) -> str:
    """``n`` and the noun, plural unless n is 1: "1 row", "3 rows"."""
    return f"{n} {noun}{'s' * (n != 1)}"
