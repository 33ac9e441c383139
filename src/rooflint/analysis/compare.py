"""Compare two results files and decide whether NEW is a regression of BASE.

Rows are joined on family, variant, dtype, shape and GPU (shape, not the preset name, because a
preset whose shape changed is a different problem). Each pair of ok rows is classified by the
change of the median time, change = new_median / base_median - 1, and by the two runs' own
spread, the interval [p20, p80] of their timed samples:

- same:   |change| <= threshold.
- slower: change > threshold, and the intervals are separated: new p20 > base p80.
- faster: change < -threshold, and the intervals are separated: new p80 < base p20.
- noisy:  |change| > threshold but the intervals overlap, so the runs' own jitter could explain it.

A shared CI runner's clocks, neighbours and thermals move single calls by several percent; a
change that the two runs' p20-p80 intervals cannot tell apart from that jitter is reported, not
failed. Where either row lacks a spread (one sample, or an old file), the threshold alone decides.

Throttled rows are never called faster or slower: where either side of an ok pair is throttled
(its `throttled` column, or lint's throttled rule: an SM clock under 90% of the GPU's boost clock
on a row whose clocks bench did not sample), the verdict is "untrusted" with the reason. The
clock, not the code, may explain the change; untrusted rows are counted and shown, never failed.
So is a row timed while NVML saw another process computing on its GPU ("shared GPU").

Rows are matched per GPU type: the gpu column read as a spec key ("h100" and "h100_sxm" are one
GPU), never the device index or the host, so a run on GPU 1 of another machine compares with a
run on GPU 0 of this one. Two files that share no row at all are bad input (exit 2): a CI gate
must not pass on nothing.

Rows that are not ok on one side: ok -> not ok (failed, skipped, oom, error, crashed) is a
regression ("now <status>"), because a variant that stops passing its correctness gate, stops
building or kills its process is worse than a slow one; so is a row that fails (failed, oom, error,
crashed) in NEW where BASE only skipped it. not ok -> ok is "fixed"; failing on both sides is "still
<status>"; a row NEW skipped (no GPU, no nvcc there) where BASE had it failing is "skipped", not
"still failing": nothing was run to fail. A row still failing is no regression, but it fails the
comparison all the same: a crash is a failure in every command that reads it, and a file compared
with itself (or a baseline that crashed too) must not pass a CI gate with a crashed row in NEW.

A row ok in BASE and absent from NEW, where NEW measured its family on its GPU, is a regression
("now missing"): the variant vanished from a run that covered it (a worker lost without a row, a
variant renamed or dropped). Families NEW did not run at all are listed as "only in base", never
failed, so a run of a few families can be compared against a full reference.

A row only in NEW that fails (failed, oom, error, crashed) is a regression too ("now <status>"): a
variant added broken is listed among the failures, not among the rows only in NEW.

A regression is any slower, now failing or now missing row; `rooflint compare` exits 1 if there is
one, or if a row is still failing.

A model's op=step rows (rooflint model) carry their throughput, tokens_per_s: where both sides
have it, the change is judged on it like a time (tok/s down by more than the threshold is slower),
and the table shows it beside the time.

Rows timed two ways (`timing_mode`: cuda_events on one side, cuda_graph from `bench --cuda-graphs`
on the other) are listed as "other timing", never compared: a graph replay's time per call has no
launch gap and no L2 flush between calls, so the ratio measures the method. Two runs whose timed
rows share no timing method are bad input (exit 2).

Library rows (third-party peers, kind "library") are matched like the others; where the two runs
ran different releases of the library, a note names both versions.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import pandas as pd

from rooflint.analysis.lint import boost_clock_mhz, gpu_key, shared_gpu_note, throttle_reason
from rooflint.core.errors import UserError
from rooflint.core.fmt import counted, number, text
from rooflint.outputs.merge import KEY, dedupe, measurement, regime_of
from rooflint.outputs.report_render import md_code, md_span, md_text
from rooflint.outputs.results import FAILING_STATUSES, OK, ResultRow, row_from_record

SAME, SLOWER, FASTER, NOISY, UNTRUSTED = "same", "slower", "faster", "noisy", "untrusted"
NOW_FAILING, NOW_MISSING, FIXED, STILL_FAILING = "now failing", "now missing", "fixed", "still failing"
SKIPPED_NOW = "skipped"
OTHER_REGIME = "other regime"  # each side timed the row in a regime the other did not: no comparison
OTHER_TIMING = "other timing"  # each side timed the row another way (events, CUDA graphs): no comparison
BASE_ONLY, NEW_ONLY = "only in base", "only in new"
REGRESSIONS = (SLOWER, NOW_FAILING, NOW_MISSING)
# Table order: what fails the build first, then what a reviewer should look at.
_ORDER = {
    SLOWER: 0,
    NOW_FAILING: 1,
    NOW_MISSING: 2,
    UNTRUSTED: 3,
    OTHER_REGIME: 4,
    OTHER_TIMING: 4,
    NOISY: 5,
    FASTER: 6,
    FIXED: 7,
    STILL_FAILING: 8,
    SKIPPED_NOW: 9,
    SAME: 10,
    BASE_ONLY: 11,
    NEW_ONLY: 12,
}


def parse_threshold(text: str | float) -> float:
    """'5%', '5' or 5 mean five percent; returns the fraction 0.05."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*%?\s*", str(text))
    value = float(match.group(1)) / 100 if match else math.nan
    if not match or not 0 < value < 10:
        raise UserError(f"bad threshold {text!r}; give a percentage above 0 and under 1000, e.g. 5% or 2.5")
    return value


@dataclass
class Measured:
    """One side of a compared row: its status, its time and spread, and why its clock is not trusted."""

    status: str
    median_ms: float
    p20_ms: float
    p80_ms: float
    message: str = ""
    throttled: str = ""  # why its time cannot be trusted (throttled, a shared GPU); "" when it can
    tokens_per_s: float = math.nan  # a model step row's throughput; NaN on kernel rows
    timing_mode: str = ""  # how it was timed (cuda_events, cuda_graph, cpu_wall, ...)

    @classmethod
    def of(cls, record: dict) -> Measured:
        row = row_from_record(record)
        return cls(
            text(record.get("status")),
            number(record.get("median_ms")),
            number(record.get("p20_ms")),
            number(record.get("p80_ms")),
            text(record.get("message")),
            untrusted_reason(row) if row.status == OK else "",
            number(record.get("tokens_per_s")),
            text(record.get("timing_mode")),
        )

    @property
    def ok(self) -> bool:
        return self.status == OK and self.median_ms > 0

    @property
    def failing(self) -> bool:
        """Failed its check, ran out of memory, errored or crashed: a skip is not a failure."""
        return self.status in FAILING_STATUSES

    @property
    def has_spread(self) -> bool:
        return math.isfinite(self.p20_ms) and math.isfinite(self.p80_ms) and self.p80_ms >= self.p20_ms

    @property
    def has_throughput(self) -> bool:
        return math.isfinite(self.tokens_per_s) and self.tokens_per_s > 0

    def times(self, per_token: bool) -> tuple[float, float, float]:
        """(median, p20, p80): in ms per call, or with ``per_token`` in ms per token from the
        throughput, the spread scaled with it."""
        if not per_token:
            return self.median_ms, self.p20_ms, self.p80_ms
        scale = 1e3 / self.tokens_per_s / self.median_ms
        return self.median_ms * scale, self.p20_ms * scale, self.p80_ms * scale

    def cell(self) -> str:
        if not self.ok:
            return f"{self.status or '?'}"
        spread = f" [{self.p20_ms:.4g}–{self.p80_ms:.4g}]" if self.has_spread else ""
        throughput = f" ({self.tokens_per_s:.4g} tok/s)" if self.has_throughput else ""
        return f"{self.median_ms:.4g}{spread}{throughput}"


def untrusted_reason(row: ResultRow) -> str:
    """Throttled (bench's verdict, or lint's rule on rows without NVML samples), or timed while
    another process computed on the same GPU (lint's shared_gpu rule)."""
    reason = throttle_reason(row, boost_clock_mhz(row))
    if reason:
        return "throttled: " + reason
    shared = shared_gpu_note(row)
    return "shared GPU: " + shared if shared else ""


def classify(base: Measured, new: Measured, threshold: float) -> tuple[str, float]:
    """The verdict for one joined pair and the relative change of the median (NaN if not both ok)."""
    if not new.ok and (base.ok or (new.failing and not base.failing)):
        return NOW_FAILING, math.nan
    if not base.ok and not new.ok:
        return (STILL_FAILING if new.failing else SKIPPED_NOW), math.nan
    if not base.ok:
        return FIXED, math.nan
    per_token = base.has_throughput and new.has_throughput  # a model's step: its tok/s decides
    base_median, base_p20, base_p80 = base.times(per_token)
    new_median, new_p20, new_p80 = new.times(per_token)
    change = new_median / base_median - 1.0
    if base.throttled or new.throttled:
        return UNTRUSTED, change  # the clock moved, so the change says nothing about the code
    if abs(change) <= threshold:
        return SAME, change
    if base.has_spread and new.has_spread:
        separated = new_p20 > base_p80 if change > 0 else new_p80 < base_p20
        if not separated:
            return NOISY, change
    return (SLOWER if change > 0 else FASTER), change


@dataclass
class Entry:
    family: str
    variant: str
    dtype: str
    shape: str
    gpu: str
    verdict: str
    change: float = math.nan
    base: Measured | None = None
    new: Measured | None = None

    @property
    def regression(self) -> bool:
        return self.verdict in REGRESSIONS


@dataclass
class Comparison:
    entries: list[Entry]
    threshold: float
    base_name: str = "BASE"
    new_name: str = "NEW"
    notes: list[str] = field(default_factory=list)
    fail_on_missing: bool = False  # --fail-on-missing: rows only in BASE fail the comparison too

    @property
    def regressions(self) -> list[Entry]:
        return [e for e in self.entries if e.regression]

    @property
    def still_failing(self) -> list[Entry]:
        """Rows that failed in BASE and fail in NEW again: no regression, but no pass either."""
        return [e for e in self.entries if e.verdict == STILL_FAILING]

    @property
    def missing(self) -> list[Entry]:
        """Rows only in BASE where they fail the comparison (--fail-on-missing), else none."""
        return [e for e in self.entries if e.verdict == BASE_ONLY] if self.fail_on_missing else []

    @property
    def failed(self) -> bool:
        """Whether the comparison fails (`rooflint compare` exits 1)."""
        return bool(self.regressions or self.still_failing or self.missing)

    def count(self, verdict: str) -> int:
        return sum(e.verdict == verdict for e in self.entries)

    def to_markdown(self) -> str:
        return render_markdown(self)


def _by_gpu_type(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame with its gpu column as spec keys, the GPU type rows are matched by."""
    names = frame["gpu"].map(text)
    keys = {name: gpu_key(name) for name in set(names)}
    return frame.assign(gpu=names.map(keys))


def _gpus(frame: pd.DataFrame) -> list[str]:
    return sorted(set(frame["gpu"].fillna("").astype(str)))


def compare_frames(
    base: pd.DataFrame,
    new: pd.DataFrame,
    threshold: float = 0.05,
    allow_gpu_mismatch: bool = False,
    base_name: str = "BASE",
    new_name: str = "NEW",
    fail_on_missing: bool = False,
) -> Comparison:
    notes = []
    for name, frame in ((base_name, base), (new_name, new)):
        if frame.empty:  # said as it is, not as "measured on no GPU"
            raise UserError(f"{name} has no result rows; compare two results files that hold rows")
    base, new = _by_gpu_type(base), _by_gpu_type(new)
    base, base_dups = dedupe(base)
    new, new_dups = dedupe(new)
    for name, dups in ((base_name, base_dups), (new_name, new_dups)):
        if dups:
            notes.append(f"{name} had {counted(len(dups), 'duplicate row')}; the newest timestamp of each was kept")
    base_gpus, new_gpus = _gpus(base), _gpus(new)
    key = list(KEY)
    if not set(base_gpus) & set(new_gpus):
        if not allow_gpu_mismatch:
            raise UserError(
                f"{base_name} was measured on {', '.join(base_gpus) or 'no GPU'} and {new_name} on "
                f"{', '.join(new_gpus) or 'no GPU'}; compare runs on the same GPU, or pass --allow-gpu-mismatch"
            )
        if len(base_gpus) != 1 or len(new_gpus) != 1:
            raise UserError(
                "--allow-gpu-mismatch pairs one GPU with one GPU, but "
                f"{base_name} has {', '.join(base_gpus)} and {new_name} has {', '.join(new_gpus)}"
            )
        key.remove("gpu")
        notes.append(f"different GPUs compared on request: {base_gpus[0]} -> {new_gpus[0]}")
    elif set(base_gpus) != set(new_gpus):
        notes.append(
            f"GPUs differ ({base_name}: {', '.join(base_gpus)}; {new_name}: {', '.join(new_gpus)}); "
            "only rows of the same GPU are compared, the others are listed as missing"
        )

    def index(frame: pd.DataFrame) -> dict[tuple, dict[str, dict]]:
        """key -> {measurement: row} (merge.measurement: the regime, marked where CUDA graphs timed
        it); after dedupe a key holds one untimed row ("") or timed rows only."""
        rows: dict[tuple, dict[str, dict]] = {}
        for r in frame.to_dict("records"):
            rows.setdefault(tuple(str(r[k]) for k in key), {})[measurement(r.get("regime"), r.get("timing_mode"))] = r
        return rows

    _refuse_other_regimes(base, new, base_name, new_name)
    _refuse_other_timings(base, new, base_name, new_name)
    base_rows, new_rows = index(base), index(new)
    if not set(base_rows) & set(new_rows):
        raise UserError(
            f"{base_name} ({len(base_rows)} rows) and {new_name} ({len(new_rows)} rows) share no "
            f"({', '.join(key)}) row: nothing to compare; compare results of the same families, shapes and GPU"
        )
    # Where NEW ran a family on a GPU, every variant BASE had ok there should be in it.
    covered = {(str(r["family"]), str(r["gpu"])) for rows in new_rows.values() for r in rows.values()}
    entries = []
    for k in list(base_rows) + [k for k in new_rows if k not in base_rows]:
        for b, n, regime_note in pair_regimes(base_rows.get(k, {}), new_rows.get(k, {})):
            entries.append(_entry(b, n, regime_note, key, covered, threshold, notes))
    entries.sort(key=lambda e: (_ORDER[e.verdict], e.family, e.variant, e.dtype, e.shape, e.gpu))
    return Comparison(entries, threshold, base_name, new_name, notes, fail_on_missing)


def _values(frame: pd.DataFrame, column: str, ok_only: bool = False) -> list[str]:
    """The column's non-empty values in the frame (in its ok rows only where asked), sorted."""
    if ok_only:
        frame = frame[frame["status"].map(text) == OK] if "status" in frame else frame.iloc[0:0]
    return sorted({text(value) for value in frame[column]} - {""}) if column in frame else []


def _refuse_other_regimes(base: pd.DataFrame, new: pd.DataFrame, base_name: str, new_name: str) -> None:
    """Two runs timed in no common regime (one burst, one sustained) have no time to compare: a
    number is only meaningful with its regime (docs/timing.md), and sustained's settled clock would
    read as a slowdown of every compute-bound row."""
    before, after = _values(base, "regime"), _values(new, "regime")
    if before and after and not set(before) & set(after):
        raise UserError(
            f"{base_name} was timed in the {', '.join(before)} regime and {new_name} in the "
            f"{', '.join(after)} regime; compare runs timed in the same --regime (docs/timing.md)"
        )


def _refuse_other_timings(base: pd.DataFrame, new: pd.DataFrame, base_name: str, new_name: str) -> None:
    """Two runs whose timed rows share no timing method (one `bench --cuda-graphs`, one with events)
    have no time to compare: every pair would be "other timing", and a gate must not pass on nothing."""
    before, after = _values(base, "timing_mode", ok_only=True), _values(new, "timing_mode", ok_only=True)
    if before and after and not set(before) & set(after):
        raise UserError(
            f"{base_name} was timed by {', '.join(before)} and {new_name} by {', '.join(after)}; "
            "compare runs timed the same way (both with --cuda-graphs or both without)"
        )


def pair_regimes(base: dict[str, dict], new: dict[str, dict]) -> list[tuple[dict | None, dict | None, str]]:
    """The (BASE row, NEW row, note) pairs of one key, from each side's {regime: row}: rows of the
    same regime pair; an untimed row ("": skipped, failed, crashed) pairs with every row of the other
    side; a timed row whose regime the other side never timed, where that side timed the key in
    another, pairs with nothing and is noted (listed, not a regression: its twin is in the other regime)."""
    if not base or not new or "" in base or "" in new:
        if not base or not new:
            return [(base.get(r) if base else None, new.get(r) if new else None, "") for r in (base or new)]
        if "" in base:
            return [(base[""], row, "") for row in new.values()]
        return [(row, new[""], "") for row in base.values()]
    pairs = [(base[r], new[r], "") for r in base if r in new]
    unmatched_base = [r for r in base if r not in new]
    unmatched_new = [r for r in new if r not in base]
    if not pairs:  # every regime differs: one entry, neither time compared
        return [(base[unmatched_base[0]], new[unmatched_new[0]], f"{unmatched_base[0]} -> {unmatched_new[0]}")]
    pairs += [(base[r], None, r) for r in unmatched_base]
    pairs += [(None, new[r], r) for r in unmatched_new]
    return pairs


def _entry(b, n, regime_note: str, key: list[str], covered: set, threshold: float, notes: list[str]) -> Entry:
    record = b if b is not None else n
    gpu = str(record["gpu"])
    if "gpu" not in key and b is not None and n is not None:
        gpu = f"{b['gpu']} -> {n['gpu']}"
    if regime_note:
        gpu += f" ({regime_note})"  # which of the key's regimes this row is
    entry = Entry(record["family"], record["variant"], record["dtype"], record["shape"], gpu, "")
    entry.base = Measured.of(b) if b is not None else None
    entry.new = Measured.of(n) if n is not None else None
    if b is not None and n is not None and regime_note:
        before, after = (regime_of(label) for label in regime_note.split(" -> "))
        entry.verdict = OTHER_TIMING if before == after else OTHER_REGIME
    elif b is None:
        # A variant new in NEW that fails is no less broken for BASE never having had it.
        entry.verdict = NOW_FAILING if entry.new.failing else NEW_ONLY
    elif n is None:
        family, on = str(b["family"]), str(b["gpu"])
        ran = (family, on) in covered if "gpu" in key else any(f == family for f, _ in covered)
        # Not missing where NEW timed this key in another regime only: its twin is there.
        entry.verdict = NOW_MISSING if ran and entry.base.ok and not regime_note else BASE_ONLY
    elif entry.base.ok and entry.new.ok and timed_differently(b, n):
        entry.verdict = OTHER_TIMING
    else:
        entry.verdict, entry.change = classify(entry.base, entry.new, threshold)
        upgrade = library_change(b, n)
        if upgrade:
            notes.append(f"{entry.family} / {entry.variant} / {entry.dtype} / {entry.shape}: {upgrade}")
    return entry


def timed_differently(base: dict, new: dict) -> bool:
    """Whether the two sides name different timing modes (neither empty: a file that predates the
    column agrees with any). A CUDA-graph replay's time per call has no launch gap and no L2 flush
    between calls, an event-timed call has both, so their ratio measures the method, not the code."""
    before, after = text(base.get("timing_mode")), text(new.get("timing_mode"))
    return bool(before and after and before != after)


def library_change(base: dict, new: dict) -> str:
    """Where a library row (matched like any other) ran another release of its library: the change
    is the library's, not the code under test's. "" when it is no library row or the same release."""
    library = text(new.get("library")) or text(base.get("library"))
    before, after = text(base.get("library_version")), text(new.get("library_version"))
    if not library or before == after:
        return ""
    return f"{library} {before or '(no version)'} -> {after or '(no version)'}: another release of the library"


def _change_cell(entry: Entry) -> str:
    return f"{100 * entry.change:+.1f}%" if math.isfinite(entry.change) else ""


def _verdict_cell(entry: Entry) -> str:
    if entry.verdict == NOW_FAILING:
        why = entry.new.message.splitlines()[0][:80] if entry.new and entry.new.message else ""
        return f"**now {md_text(entry.new.status)}**" + (f": {md_text(why)}" if why else "")
    if entry.verdict == NOW_MISSING:
        return "**now missing**: no row in NEW, though NEW ran this family on this GPU"
    if entry.verdict == STILL_FAILING:
        return f"**still {md_text(entry.new.status)}**"
    if entry.verdict == SKIPPED_NOW:
        why = entry.new.message.splitlines()[0][:80] if entry.new.message else ""
        return "skipped" + (f": {md_text(why)}" if why else "")
    if entry.verdict == OTHER_REGIME:
        return "other regime: timed in different regimes, not compared"
    if entry.verdict == OTHER_TIMING:
        return f"other timing: {md_text(entry.base.timing_mode)} -> {md_text(entry.new.timing_mode)}, not compared"
    if entry.verdict == UNTRUSTED:
        sides = [(name, m.throttled) for name, m in (("base", entry.base), ("new", entry.new)) if m and m.throttled]
        return "untrusted: " + "; ".join(f"{name}: {md_text(why)}" for name, why in sides)
    return f"**{entry.verdict}**" if entry.regression else entry.verdict


def _side(measured: Measured | None) -> str:
    return measured.cell() if measured is not None else "-"


def _table(entries: list[Entry]) -> list[str]:
    lines = [
        "| family | variant | dtype | shape | GPU | base ms [p20–p80] | new ms [p20–p80] | change | verdict |",
        "|---|---|---|---|---|---:|---:|---:|---|",
    ]
    for e in entries:
        lines.append(
            f"| {md_text(e.family)} | {md_text(e.variant)} | {md_text(e.dtype)} | `{md_code(e.shape)}` | "
            f"{md_text(e.gpu)} | {_side(e.base)} | "
            f"{_side(e.new)} | {_change_cell(e)} | {_verdict_cell(e)} |"
        )
    return lines


def render_markdown(result: Comparison) -> str:
    regressions, still, missing = result.regressions, result.still_failing, result.missing
    pct = f"{100 * result.threshold:g}%"
    why = []
    if regressions:
        why.append(f"{counted(len(regressions), 'regression')} past {pct}")
    if still:
        why.append(f"{counted(len(still), 'row')} still failing")
    if missing:  # the heading states the verdict the exit status gives, so a PR comment never says "pass" on exit 1
        why.append(f"{counted(len(missing), 'row')} only in BASE (--fail-on-missing)")
    if why:
        head = f"## rooflint compare: FAIL, {', '.join(why)}"
    else:
        head = f"## rooflint compare: pass, no regression past {pct}"
    counts = ", ".join(f"{result.count(v)} {v}" for v in _ORDER if result.count(v))
    lines = [
        head,
        "",
        f"{md_span(result.base_name)} -> {md_span(result.new_name)}: {counts or 'no rows'}.",
        "",
        f"Rule: a row is slower or faster when its median time moved by more than {pct} and the two runs' "
        "p20-p80 intervals do not overlap; past the threshold with overlapping intervals it is noisy "
        "(reported, not failed). A variant that was ok and now fails, errors, skips, crashes or is missing "
        "from a family NEW ran is a regression, and so is one new in NEW that fails; one failing in both "
        "runs is still failing, and fails the comparison too. "
        "A pair where either side ran throttled, or beside another process on its GPU, is untrusted: "
        "its clock or its neighbour, not its code, may explain the change.",
    ]
    # A note quotes the files: their names, GPU names, a library's name and versions. Shown as written,
    # never as Markdown or HTML of their own (a version "<b>2</b>" rendered bold in a PR comment).
    lines += [f"\n> {md_text(note)}" for note in result.notes]
    compared = [e for e in result.entries if e.verdict not in (BASE_ONLY, NEW_ONLY, SAME)]
    if compared:
        lines += [""] + _table(compared)
    same = [e for e in result.entries if e.verdict == SAME]
    if same:
        # Unchanged rows fold away, so a pull-request comment leads with what moved.
        lines += ["", f"<details><summary>{counted(len(same), 'row')} within {pct}</summary>", ""] + _table(same)
        lines += ["", "</details>"]
    for verdict, title in ((BASE_ONLY, result.base_name), (NEW_ONLY, result.new_name)):
        missing = [e for e in result.entries if e.verdict == verdict]
        if missing:
            lines += ["", f"**{counted(len(missing), 'row')} only in {md_span(title)}:**", ""]
            lines += [
                f"- {md_text(e.family)} / {md_text(e.variant)} / {md_text(e.dtype)} / "
                f"`{md_code(e.shape)}` / {md_text(e.gpu)}"
                for e in missing
            ]
    return "\n".join(lines) + "\n"
