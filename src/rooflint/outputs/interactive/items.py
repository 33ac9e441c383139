"""The rows of one GPU's section as plotted items: each row's data-point, its colour, which plot it
can sit on, its tooltip and the command that measures it again, and why a row has no point.

The plots, the legend and the table rows all identify a row by what is decided here, so a point, its
twin in the other plot and its table line stay tied together."""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass
from typing import Any

from rooflint.core.fmt import finite, text
from rooflint.outputs.interactive.values import esc, num, positive
from rooflint.outputs.points import family_colours
from rooflint.outputs.results import OK


def _joules(value: float) -> str:
    return f"{value:.3g} J/call" if value >= 1 else f"{value * 1e3:.3g} mJ/call"


# The script finds a row's twins with a CSS selector built from its data-point, where a quote or a
# backslash from a family's name is a syntax error: each character outside these is written ~hex~.
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_.]")


def point_id(section_index: int, family: str, row_index: int) -> str:
    """The data-point of a row: the same in both plots and on the row's table line."""
    safe = _ID_UNSAFE.sub(lambda match: f"~{ord(match.group()):x}~", family)
    return f"g{section_index}-{safe}-{row_index}"


def command(family: str, row: dict[str, Any], verb: str = "bench") -> str:
    """The bench (or profile) command that measures this row again: one variant, one dtype, its exact
    shape, each word quoted for the shell (names come from the results file: `a|b` must paste as one
    word, not a pipe). "" for a model's row: `rooflint bench` has no family "model:<config>"."""
    if family.startswith("model:"):
        return ""
    size = row.get("shape") or row.get("size") or ""
    parts = [family]
    if row.get("variant"):
        parts += ["--variants", row["variant"]]
    if row.get("dtype"):
        parts += ["--dtype", row["dtype"]]
    if size:
        parts += ["--size", size]
    return " ".join(["rooflint", verb, *(shlex.quote(str(part)) for part in parts)])


@dataclass
class Item:
    """One row of the section: where it goes on each plot, and what its tooltip says."""

    point: str  # point_id
    family: str
    row: dict[str, Any]
    colour: str

    @property
    def ok(self) -> bool:
        return self.row["status"] == OK

    @property
    def has_flops(self) -> bool:
        return positive(self.row["achieved_tflops"]) and positive(self.row["ai_flop_per_byte"])

    @property
    def no_flops(self) -> bool:
        """Measured, moves bytes, does no arithmetic (a cache copy): judged on bandwidth alone."""
        return self.ok and self.row["achieved_tflops"] == 0 and positive(self.row["achieved_gbps"])

    @property
    def gflop_per_j(self) -> float:
        value = self.row.get("flop_per_j")
        return value / 1e9 if positive(value) else math.nan

    @property
    def has_energy(self) -> bool:
        return self.ok and positive(self.row.get("energy_per_call_j"))

    def attributes(self) -> str:
        row = self.row
        values = {
            "family": self.family,
            "variant": row["variant"],
            "kind": row["kind"],
            "dtype": row["dtype"],
            "point": self.point,
        }
        return " ".join(f'data-{name}="{esc(value)}"' for name, value in values.items())

    def title(self) -> str:
        kind = f" ({self.row['kind']})" if self.row["kind"] and self.row["kind"] != self.row["variant"] else ""
        # a library row names whose kernel, and which release, it timed
        library = " ".join(filter(None, (text(self.row.get("library")), text(self.row.get("library_version")))))
        return f"{self.family} / {self.row['variant']}{kind}" + (f" [{library}]" if library else "")

    def tooltip(self, reason: str = "") -> str:
        """data-title, data-tip (one line per fact) and data-cmd of this row's point."""
        row = self.row
        preset = f" ({row['size']})" if row.get("size") and row["size"] != "custom" else ""
        lines = [f"{row['dtype']} · {row['shape']}{preset}"]
        if reason:
            lines.append(reason)
        if self.ok:
            spread = ""
            if finite(row["p20_ms"]) and finite(row["p80_ms"]):
                spread = f" (p20 {row['p20_ms']:.4g}, p80 {row['p80_ms']:.4g})"
            lines.append(f"time {row['median_ms']:.4g} ms median{spread}")
            rate = [num(row["achieved_tflops"], "{:.3g} TFLOP/s"), num(row["achieved_gbps"], "{:.4g} GB/s")]
            rate.append(num(row["ai_flop_per_byte"], "AI {:.4g} FLOP/B"))
            lines.append(" · ".join(r for r in rate if r))
            if finite(row["pct_of_roof"]):
                bound = f" ({row['bound']}-bound)" if row["bound"] else ""
                lines.append(f"{row['pct_of_roof']:.1f}% of roof{bound}")
            peers = [
                num(row.get("speedup_vs_best_compile"), "{:.2f}x vs best compile"),
                num(row.get("speedup_vs_best_library"), "{:.2f}x vs best library"),
            ]
            if any(peers):
                lines.append(" · ".join(p for p in peers if p))
            if self.has_energy:
                energy = [
                    _joules(row["energy_per_call_j"]),
                    num(row.get("flop_per_j"), "{:.3g} GFLOP/J", 1e-9) if self.has_flops else "",
                    num(row.get("bytes_per_j"), "{:.3g} GB/J", 1e-9),
                    num(row.get("power_median_w"), "{:.0f} W median"),
                ]
                lines.append("energy " + " · ".join(e for e in energy if e))
            if positive(row.get("measured_dram_bytes")):
                measured = num(row.get("measured_ai_flop_per_byte"), ", AI {:.4g} FLOP/B")
                lines.append(f"ncu DRAM {row['measured_dram_bytes'] / 1e9:.4g} GB{measured}")
        lint = "; ".join(part.strip() for part in text(row.get("lint")).split(";") if part.strip())
        lines.append(f"lint: {lint or 'no findings'}")
        return (
            f'data-title="{esc(self.title())}" data-tip="{esc(chr(10).join(lines))}" '
            f'data-cmd="{esc(command(self.family, row))}"'
        )


def items_of(section, section_index: int) -> list[Item]:
    families = sorted({f for f, rows in section.families.items() if any(r["status"] == OK for r in rows)})
    colours = family_colours(families)
    out = []
    for family, rows in section.families.items():
        for index, row in enumerate(rows):
            colour = colours.get(family, "#555555")
            out.append(Item(point_id(section_index, family, index), family, row, colour))
    return out


def off_plot_reason(item: Item) -> str:
    """Why a row has no point on the time roofline ("" when it has one)."""
    row = item.row
    if not item.ok:
        first = text(row.get("message")).splitlines()[0][:160] if text(row.get("message")) else ""
        return f"{row['status']}{': ' + first if first else ''}: no trustworthy time, so no point"
    if item.has_flops:
        return ""
    if item.no_flops:
        pct = num(row["pct_of_roof"], ", {:.1f}% of the bandwidth roof")
        return f"no FLOPs: AI 0 and 0 TFLOP/s lie at minus infinity on log axes; {row['achieved_gbps']:.4g} GB/s{pct}"
    if not positive(row["ai_flop_per_byte"]):
        return "no arithmetic intensity (the cost model gives no bytes)"
    return "no achieved rate recorded"
