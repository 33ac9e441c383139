"""Where a kernel's warps spend their time, instruction by instruction: Nsight Compute's source page
(SASS, `ncu --import R --page source --csv --print-source sass`) summarised for `rooflint profile
--ncu --sass`.

ncu samples each warp's program counter at a fixed interval and records why the warp was not issuing
(the stall reason); it also counts how often each instruction executed. Summed by what the
instructions do (tensor-core issue, the wgmma waits, the softmax's arithmetic, the mbarrier polls),
two kernels of the same math show where one loses time against the other: at which instructions
its warps wait, and which instructions it issues that the other does not.
"""

from __future__ import annotations

import csv
import io
import math
from collections import Counter
from dataclasses import dataclass, field

from rooflint.analysis.ncu import parse_number

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"
# Samples ncu's export names no reason for (the sum of the stall_* columns falls short of the total):
# on Hopper, mostly warps held while issuing a wgmma the tensor pipe cannot take yet.
UNLISTED = "unlisted"

# What an opcode does, for the summary. The first matching prefix wins.
CLASSES = (
    ("tensor core", ("HGMMA", "QGMMA", "IGMMA", "HMMA", "IMMA", "BGMMA")),
    ("wgmma fence / wait", ("WARPGROUP",)),
    ("mbarrier", ("SYNCS",)),
    ("named barrier", ("BAR",)),
    ("TMA", ("UTMA", "UBLKCP")),
    ("uniform datapath", ("U", "R2UR", "S2UR")),
    ("special function (exp2, rcp)", ("MUFU",)),
    ("fp32 math", ("FFMA", "FADD", "FMUL", "FMNMX", "FSEL", "FSETP", "FCHK", "FRND")),
    ("conversion", ("F2F", "F2I", "I2F", "F2FP")),
    ("shuffle / vote", ("SHFL", "VOTE")),
    ("shared memory", ("LDS", "STS", "LDSM", "STSM")),
    ("constant cache", ("LDC",)),
    ("global / local memory", ("LDG", "STG", "LDL", "STL", "LD", "ST", "ATOM", "RED")),
    ("branch", ("BRA", "BRX", "JMP", "CALL", "RET", "EXIT", "BSSY", "BSYNC", "WARPSYNC")),
    ("integer / predicate", ("IMAD", "IADD", "LOP", "SHF", "ISETP", "VIADD", "LEA", "SEL", "PLOP", "MOV", "PRMT")),
)


@dataclass(frozen=True)
class SassLine:
    address: str
    source: str
    samples: float
    executed: float  # warp-level executions
    stalls: dict[str, float]  # reason -> samples (the stall_* columns, all samples)

    @property
    def opcode(self) -> str:
        """The instruction's opcode without its predicate or modifiers: `@!P0 SYNCS.ARRIVE.TRANS64` -> SYNCS."""
        words = self.source.split()
        if words and words[0].startswith("@"):
            words = words[1:]
        return words[0].split(".")[0] if words else "?"


@dataclass
class KernelSass:
    name: str
    lines: list[SassLine] = field(default_factory=list)

    @property
    def samples(self) -> float:
        return sum(line.samples for line in self.lines)

    @property
    def executed(self) -> float:
        return sum(line.executed for line in self.lines)


def opcode_class(opcode: str) -> str:
    for name, prefixes in CLASSES:
        if any(opcode.startswith(prefix) for prefix in prefixes):
            return name
    return "other"


def _count(text: str) -> float:
    """A sample or execution count; none given (n/a, -) is none counted."""
    value = parse_number(text)
    return 0.0 if math.isnan(value) else value


def parse_source_csv(text: str) -> list[KernelSass]:
    """Every kernel in an ncu source-page CSV: each opens with a `"Kernel Name","..."` line, then its
    header row and one row per SASS instruction."""
    kernels: list[KernelSass] = []
    header: list[str] | None = None
    for row in csv.reader(io.StringIO(text)):
        if not row:
            continue
        if row[0] == "Kernel Name":
            kernels.append(KernelSass(row[1] if len(row) > 1 else "?"))
            header = None
        elif row[0] == "Address":
            header = row
        elif header is not None and kernels:
            cells = dict(zip(header, row, strict=False))
            stalls = {
                name.removeprefix("stall_"): _count(value)
                for name, value in cells.items()
                if name.startswith("stall_") and not name.endswith("(Not Issued)")
            }
            kernels[-1].lines.append(
                SassLine(
                    cells.get("Address", ""),
                    cells.get("Source", "").strip(),
                    _count(cells.get(SAMPLES, "0")),
                    _count(cells.get(EXECUTED, "0")),
                    {k: v for k, v in stalls.items() if v},
                )
            )
    if not kernels or not any(k.lines for k in kernels):
        raise ValueError("not an ncu source-page CSV (`--page source --csv --print-source sass`): no SASS rows")
    return [k for k in kernels if k.lines]


def main_kernel(kernels: list[KernelSass]) -> KernelSass:
    """The kernel the warps spent the most samples in (a variant's range may launch several)."""
    return max(kernels, key=lambda k: k.samples)


@dataclass(frozen=True)
class ClassShare:
    name: str
    executed: float  # warp-level instructions executed
    samples: float
    share_pct: float  # of the kernel's samples
    top_reasons: str  # "reason share%, ..." of this class's samples


def _reasons(lines: list[SassLine], total: float, top: int = 2) -> str:
    reasons: Counter[str] = Counter()
    for line in lines:
        reasons.update(line.stalls)
        listed = sum(line.stalls.values())
        if line.samples > listed:
            reasons[UNLISTED] += line.samples - listed
    if total <= 0:
        return ""
    return ", ".join(f"{name} {100 * value / total:.0f}%" for name, value in reasons.most_common(top) if value > 0)


def class_shares(kernel: KernelSass) -> list[ClassShare]:
    """The kernel's samples and executions by what the instructions do, most samples first."""
    total = kernel.samples
    groups: dict[str, list[SassLine]] = {}
    for line in kernel.lines:
        groups.setdefault(opcode_class(line.opcode), []).append(line)
    shares = []
    for name, lines in groups.items():
        samples = sum(line.samples for line in lines)
        shares.append(
            ClassShare(
                name,
                sum(line.executed for line in lines),
                samples,
                100 * samples / total if total else 0.0,
                _reasons(lines, samples),
            )
        )
    return sorted(shares, key=lambda s: (-s.samples, -s.executed, s.name))


def hottest(kernel: KernelSass, count: int = 8) -> list[tuple[SassLine, float, str]]:
    """The instructions holding the most samples: (line, share % of the kernel's samples, its reasons)."""
    total = kernel.samples or 1.0
    lines = sorted(kernel.lines, key=lambda line: -line.samples)[:count]
    return [(line, 100 * line.samples / total, _reasons([line], line.samples)) for line in lines if line.samples > 0]


@dataclass(frozen=True)
class OpcodeDelta:
    opcode: str
    executed: float  # this kernel's
    baseline_executed: float  # the first variant's
    samples_pct: float  # this kernel's share of its samples
    baseline_samples_pct: float


def opcode_deltas(kernel: KernelSass, baseline: KernelSass, count: int = 10) -> list[OpcodeDelta]:
    """The opcodes whose executions differ most between two kernels, largest difference first."""

    def by_opcode(k: KernelSass) -> tuple[Counter[str], Counter[str]]:
        executed: Counter[str] = Counter()
        samples: Counter[str] = Counter()
        for line in k.lines:
            executed[line.opcode] += line.executed
            samples[line.opcode] += line.samples
        return executed, samples

    mine, mine_samples = by_opcode(kernel)
    theirs, their_samples = by_opcode(baseline)
    total, their_total = kernel.samples or 1.0, baseline.samples or 1.0
    opcodes = sorted(set(mine) | set(theirs), key=lambda op: (-abs(mine[op] - theirs[op]), op))[:count]
    return [
        OpcodeDelta(op, mine[op], theirs[op], 100 * mine_samples[op] / total, 100 * their_samples[op] / their_total)
        for op in opcodes
        if mine[op] != theirs[op]
    ]


def short_name(kernel_name: str, width: int = 60) -> str:
    """A kernel's name without its parameter list (the last balanced parentheses; a template's own
    `(int)128` stays), cut to ``width``."""
    name = kernel_name.strip()
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i].rstrip()
                break
    return name if len(name) <= width else name[: width - 1] + "…"
