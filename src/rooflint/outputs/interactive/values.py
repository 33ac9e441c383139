"""How a row's values reach the page, for every part of the interactive roofline: escaped for HTML,
formatted only when finite (a missing number writes nothing), and tested for being positive, the only
values a log axis can place."""

from __future__ import annotations

import html
from typing import Any

from rooflint.core.fmt import finite


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def num(value: Any, pattern: str, scale: float = 1.0) -> str:
    return pattern.format(value * scale) if finite(value) else ""


def positive(value: Any) -> bool:
    return finite(value) and value > 0
