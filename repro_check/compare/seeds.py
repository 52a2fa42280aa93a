"""Seeds whose value differs between the runs, read from what each run's seeding watch recorded
(:mod:`repro_check.child.observe.watch`): a seed taken from the clock, OS entropy or an unseeded
stream, named once the runs are put side by side (one run alone cannot tell a seed from the
clock from a constant)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from repro_check.trace.payloads import SeedOverride


def shared_field(fields_by_run: list[Any], values_by_run: list[Any]) -> str | None:
    """The field a seed was taken from, when its value differs between the runs and equals that
    field of the time in every run (each run's ``clock_fields``, see
    :func:`repro_check.child.seeding.clock.clock_fields`); None otherwise."""
    if len(values_by_run) < 2 or len({repr(v) for v in values_by_run}) < 2 \
            or len(fields_by_run) != len(values_by_run):
        return None
    common: list[str] | None = None
    for fields in fields_by_run:
        if not isinstance(fields, list):
            return None
        common = [f for f in (fields if common is None else common) if f in fields]
    return common[0] if common else None


def cross_run_notes(overrides_by_run: Mapping[int, Sequence[SeedOverride]]) -> list[str]:
    """Seeds whose value differs between runs: the target seeds from the clock, OS entropy or an
    unseeded stream, so the runs cannot agree."""
    seen: dict[str, dict[int, Any]] = {}
    fields: dict[str, dict[int, Any]] = {}
    first: dict[str, SeedOverride] = {}
    for run, records in sorted(overrides_by_run.items()):
        for rec in records:
            if rec.key is not None and rec.has_value:
                call = rec.call  # one call site
                seen.setdefault(call, {}).setdefault(run, rec.value)
                fields.setdefault(call, {}).setdefault(
                    run, list(rec.clock_fields) if rec.clock_fields is not None else None)
                first.setdefault(call, rec)
    notes = []
    for call, by_run in seen.items():
        if len(by_run) > 1 and len({repr(v) for v in by_run.values()}) > 1:
            rec = first[call]
            shown = ", ".join(f"run {r}: {v}" for r, v in sorted(by_run.items()))
            field = shared_field([fields[call][r] for r in sorted(by_run)],
                                 [by_run[r] for r in sorted(by_run)])
            whence = {"clock": "from the clock", "entropy": "from OS entropy"}.get(
                str(rec.source), "from the clock, OS entropy or an unseeded stream")
            if field is not None:
                whence = f"from the clock (the seed is the {field} of the time)"
            notes.append(f"{rec.component} was reseeded differently in each run ({rec.key}"
                         f"{rec.at}; {shown}): the target seeds it {whence}, so the runs "
                         "cannot agree")
    return notes
