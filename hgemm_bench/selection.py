"""Which (kernel, variant) pairs a run measures. Groups come from each registry entry's `.ladder`
and `.step`, so a kernel added to a `cu/*.toml` shows up here with no edit."""
from __future__ import annotations

import fnmatch
import itertools
from dataclasses import dataclass, field
from typing import Any

from .cli import GROUP_FLAGS, Settings

# Display order: the ladders as the README tells them, cuBLAS last, below the rows it is the baseline
# of; a ladder unknown here sorts after the known ones instead of being dropped.
LADDER_ORDER = ("cuda", "wmma", "mma", "cute", "hopper", "sgemm", "cublas")
TENSOR_CORE_LADDERS = ("wmma", "mma", "cute", "hopper")


def ladder_rank(ladder: str) -> int:
    return LADDER_ORDER.index(ladder) if ladder in LADDER_ORDER else len(LADDER_ORDER) - 1


@dataclass(frozen=True)
class Case:
    """One row of every shape table: a kernel in one variant."""

    entry: Any = field(compare=False, hash=False, repr=False)
    name: str
    variant: tuple[tuple[str, Any], ...]  # the kernel's variant axes, e.g. (("stages", 3), ("acc", "f32"))
    swizzle: str  # "" (no swizzle in this grid), "off", "on", or "auto" (on where N allows it)

    @property
    def label(self) -> str:
        parts = [f"{k}={v}" for k, v in self.variant]
        if self.swizzle:
            parts.append(f"swizzle={self.swizzle}")
        return ",".join(parts)

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.variant)


def has_swizzle(entry: Any) -> bool:
    spec = getattr(entry, "spec", None)
    return spec is not None and spec.grid == "tiles+swizzle"


def variant_choices(entry: Any) -> list[dict[str, Any]]:
    axes = list(entry.variants)
    return [dict(zip(axes, vals)) for vals in itertools.product(*(entry.variants[a] for a in axes))]


def default_choice(entry: Any) -> dict[str, Any]:
    """The variant a plain launch runs: the kernel's declared `default` where it has one (the
    measured-fastest variant), else the first value of every axis."""
    spec = getattr(entry, "spec", None)
    if spec is not None and hasattr(spec, "resolve_variant"):
        return spec.resolve_variant({})
    return variant_choices(entry)[0]


def expand(entry: Any, every_variant: bool) -> list[Case]:
    """cuBLAS: every accumulation (the ratio is to the best). Kernels: the default variant, or all."""
    choices = variant_choices(entry)
    if not (every_variant or entry.is_baseline):
        choices = [default_choice(entry)]
    swizzles = ("off", "on") if every_variant else ("auto",)
    if not has_swizzle(entry):
        swizzles = ("",)
    return [Case(entry, entry.name, tuple(c.items()), s) for c in choices for s in swizzles]


def matches(name: str, patterns: list[str], aliases: tuple[str, ...] = ()) -> bool:
    return any(fnmatch.fnmatchcase(n, p) or p in n for p in patterns for n in (name, *aliases))


def aliases_of(e: Any) -> tuple[str, ...]:
    return tuple(getattr(getattr(e, "spec", None), "aliases", ()) or ())


def default_set(entries: list[Any]) -> list[Any]:
    """Each ladder's latest kernel: the top rung of each tensor-core ladder per layout (and A order),
    fp16; and the top SGEMM rung per accumulation (exact fp32 and TF32), so that the SGEMM table shows
    our kernels beside the fp32 and TF32 cuBLAS rows."""
    top: dict[tuple[str, ...], Any] = {}
    for e in entries:
        if e.is_baseline:
            continue
        if e.ladder in TENSOR_CORE_LADDERS and e.dtype == "f16":
            key: tuple[str, ...] = (e.ladder, e.layout, getattr(e, "a_order", "row"))
        elif e.ladder == "sgemm":
            key = (e.ladder, e.layout, e.acc_for(default_choice(e)))
        else:
            continue
        if key not in top or (e.step, e.name) > (top[key].step, top[key].name):
            top[key] = e
    return list(top.values())


def select(entries: list[Any], s: Settings) -> list[Case]:
    """Cases in display order (ladder, step, name, variant), cuBLAS last."""
    kernels = [e for e in entries if not e.is_baseline and e.catalogue]
    mode: dict[str, bool] = {}  # kernel name -> every variant?

    def add(e: Any, every: bool) -> None:
        mode[e.name] = mode.get(e.name, False) or every

    groups_given = s.all or any(s.groups.values())
    for flag, on in s.groups.items():
        if on:
            ladders, every = GROUP_FLAGS[flag]
            for e in kernels:
                if e.ladder in ladders:
                    add(e, every)
    if s.all:
        for e in kernels:
            add(e, True)
    if s.kernels and not groups_given:
        for e in kernels:
            if matches(e.name, s.kernels, aliases_of(e)):
                add(e, True)
    elif s.kernels:
        keep = {e.name for e in kernels if matches(e.name, s.kernels, aliases_of(e))}
        mode = {n: m for n, m in mode.items() if n in keep}
    if s.default and not s.kernels:
        for e in default_set(kernels):
            add(e, False)
    chosen = [e for e in kernels if e.name in mode]
    chosen.sort(key=lambda e: (ladder_rank(e.ladder), e.ladder, e.step, e.name))
    cases = [c for e in chosen for c in expand(e, mode[e.name])]
    if s.cublas:
        cases += [c for e in entries if e.is_baseline for c in expand(e, True)]
    return cases


def unmatched_message(entries: list[Any], patterns: list[str]) -> str | None:
    """The --kernels patterns that match no benchmarked kernel of the build (cuBLAS and the matmul helpers
    are none), said as an error; None when each matches one."""
    kernels = [e for e in entries if not e.is_baseline and e.catalogue]
    unmatched = [p for p in patterns if not any(matches(e.name, [p], aliases_of(e)) for e in kernels)]
    if not unmatched:
        return None
    return (f"--kernels: {', '.join(map(repr, unmatched))} match{'es' if len(unmatched) == 1 else ''} no kernel "
            "of this build (the cuBLAS baselines always run; --list shows the kernels)")


def pattern_problem(entries: list[Any], s: Settings, cases: list[Case]) -> str | None:
    """Why --kernels selects nothing it was meant to (a run of cuBLAS alone must not read as the kernels'),
    or None: a pattern that matches no kernel of the build, or patterns that the group flags leave no
    kernel of."""
    if not s.kernels:
        return None
    unmatched = unmatched_message(entries, s.kernels)
    if unmatched:
        return unmatched
    if not any(not c.entry.is_baseline for c in cases):
        return f"--kernels {','.join(s.kernels)}: the group flags keep none of the kernels it matches"
    return None


def describe_build(entries: list[Any]) -> str:
    """The kernels the build holds, per ladder, with their variant axes (for --list and no-GPU runs)."""
    by_ladder: dict[str, list[Any]] = {}
    for e in entries:
        by_ladder.setdefault(e.ladder, []).append(e)
    lines = []
    for ladder in sorted(by_ladder, key=lambda x: (ladder_rank(x), x)):
        group = by_ladder[ladder]
        lines.append(f"{ladder} ({len(group)}):")
        for e in sorted(group, key=lambda e: (e.step, e.name)):
            axes = ", ".join(f"{k}={'/'.join(map(str, v))}" for k, v in e.variants.items())
            if has_swizzle(e):
                axes = ", ".join(x for x in (axes, "swizzle=off/on") if x)
            lines.append(f"  {e.step:>2}  {e.name:<66} {e.layout} {e.dtype:<4} {axes}")
    return "\n".join(lines)
