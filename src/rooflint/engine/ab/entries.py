"""The entries of an A/B: each family source (installed, a git ref, a file) x each variant x each
meta-parameter set, labelled by what varies, in the order the user gave them (the first is the one
every ratio is against)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rooflint.core.errors import UserError
from rooflint.core.family import Case, Variant
from rooflint.engine.ab.configs import checked_config, config_defaults, config_label, parse_configs
from rooflint.engine.ab.sources import FamilySource, at_ref, from_file, installed


@dataclass(frozen=True)
class Entry:
    label: str
    source: FamilySource
    variant: Variant
    config: dict[str, Any] | None = field(default=None, hash=False)  # None: built as bench builds it

    def build(self, case: Case) -> Callable[[], Any]:
        if self.config is None:
            return self.variant.build(case)
        return self.variant.build(case, config=self.config)


def family_sources(name: str, refs: Sequence[str], files: Sequence[Path], workdir: Path) -> list[FamilySource]:
    """Where the family comes from: the installed package, each --ref, or each --source."""
    if refs and files:
        raise UserError("give --ref or --source, not both: an A/B compares one kind of source")
    for given, option in ((refs, "--ref"), ([str(f) for f in files], "--source")):
        twice = next((item for i, item in enumerate(given) if item in given[:i]), None)
        if twice is not None:
            raise UserError(f"{option} {twice} is given twice; each source is one entry")
    if refs:
        return [at_ref(name, ref, workdir, i) for i, ref in enumerate(refs)]
    if files:
        loaded = [from_file(name, path, i) for i, path in enumerate(files)]
        if len({source.label for source in loaded}) < len(loaded):  # same file name in two folders
            loaded = [FamilySource(str(path), source.family) for path, source in zip(files, loaded)]
        return loaded
    return [installed(name)]


def build_entries(
    name: str,
    variants: Sequence[str],
    refs: Sequence[str] = (),
    files: Sequence[Path] = (),
    configs: Sequence[str] = (),
    *,
    workdir: Path,
) -> list[Entry]:
    """Every entry to compare; a UserError for an unknown variant, a config a variant cannot take,
    or fewer than two entries."""
    overrides = parse_configs(configs)
    sources = family_sources(name, refs, files, workdir)
    if not variants:
        known = ", ".join(sources[0].family.variants)
        raise UserError(f"ab needs --variants: one or more of {name}'s variants ({known})")
    entries = []
    for source in sources:
        known = [source.family.variants.get(variant_name) for variant_name in variants]
        takes = [variant is not None and config_defaults(variant.build) is not None for variant in known]
        for variant_name, variant, takes_config in zip(variants, known, takes, strict=True):
            if variant is None:
                where = f"{name} at {source.label}" if source.label else name
                raise UserError(
                    f"unknown variant {variant_name!r} of {where}; valid: {', '.join(source.family.variants)}"
                )
            # Beside a variant that takes the --config, one that takes none (a library peer, say) is
            # one plain entry: `-V cuda_hopper,flash_attn_4 --config V_WAIT_LATE=0,1`. Alone, a user error.
            plain = any(takes) and not takes_config
            for config in [None] if plain else overrides or [None]:
                full = None if config is None else checked_config(name, variant_name, variant.build, config)
                parts = [variant_name]
                if source.label:
                    parts[0] += f"@{source.label}"
                if config is not None:
                    parts.append(config_label(config))
                entries.append(Entry(" ".join(parts), source, variant, full))
    if len(entries) < 2:
        raise UserError(
            f"ab compares two or more entries, and this asks for one ({entries[0].label}): give --variants a,b, "
            "two --ref, two --source, or a --config with several values"
        )
    labels = [entry.label for entry in entries]
    twice = next((label for i, label in enumerate(labels) if label in labels[:i]), None)
    if twice is not None:
        raise UserError(f"entry {twice} is asked for twice (a variant named twice in --variants?)")
    return entries
