"""``diagnose``: every source of non-determinism, not just the first ("pin and go on").

Once two runs diverge everything after differs, so a later source hides behind the first one.
Each source found at step K is pinned (:mod:`repro_check.child.seeding.pin`) in the next pair of runs,
which then goes on to its own first divergence (fail-fast), until the runs agree or
``max_sources`` are found. Within a step the order is: a global RNG stream, a private generator
(by creation), the batch, the computation; the final metrics last (they need no pin).

A pin covers exactly the source it was made for: a stream's state, one generator's seeding, the
batches, or one op's outputs; anything else that differs at the same step still shows.

What run 1 of a pair records for run 2 lives in the pair's ``replay/`` folder on disk and is
deleted at the end unless ``keep_replay``.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro_check.trace.pins import RECORDS, rank_file
from repro_check.compare.cause import EXPLANATION, from_signal, private_generator
from repro_check.diagnose.localize import Localization, env_call_before
from repro_check.report.contents import Source, SourcesCost
from repro_check.report.model import DiagnosisPart, Report
from repro_check.run.options import InternalSettings, RunOptions
from repro_check.trace.payloads import GeneratorNote, generator_note
from repro_check.trace.results import Location

Log = Callable[[str], None]
#: runs a check of pinned runs: the ``check`` command's, given by ``diagnose`` (this package is
#: below the commands)
Checker = Callable[[RunOptions, InternalSettings], Report]
#: replays a pair to ``step`` recording every op there: (step, options, internal, folder)
Localizer = Callable[[int, RunOptions, InternalSettings, Path],
                     "tuple[Localization | None, str | None]"]

#: sources looked for unless told otherwise
DEFAULT_MAX_SOURCES = 5


def plan(options: RunOptions, internal: InternalSettings, folder: Path,
         pins: list[dict[str, Any]]) -> tuple[RunOptions, InternalSettings]:
    """The options of a pair that tracks generators and applies ``pins`` (run 1 records)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pins.json"
    path.write_text(json.dumps({"dir": str(folder / "replay"), "pins": pins}))
    return options.replace(trace_dir=str(folder)), internal.replace(pin_plan=str(path))


def _records(replay: Path, run: int, rank: int = 0) -> list[dict[str, Any]]:
    """What run ``run`` (its rank ``rank`` under torchrun) noted in the pair's replay folder."""
    path = replay / rank_file(RECORDS.format(run=run), rank)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _notes(replay: Path, run: int, rank: int = 0) -> list[GeneratorNote]:
    """The private generators' records of what run ``run`` noted, typed (the others left out)."""
    notes = map(generator_note, _records(replay, run, rank))
    return [note for note in notes if note is not None]


def _private(replay: Path, step: int, pinned: set[str], rank: int = 0) -> Source | None:
    """The first generator the script made whose seeding differs between the runs and that was
    drawn from by the end of ``step`` (:func:`repro_check.compare.cause.private_generator`)."""
    found = private_generator(_notes(replay, 1, rank), _notes(replay, 2, rank), step, pinned)
    if found is None:
        return None
    return Source(step, None, "rng", detail=found.detail, location=found.location,
                  stack=found.stack, pin={"kind": "generator", "key": found.key},
                  pinned_by=f"the {found.kind}'s state from run 1 after each seeding")


def _stream(replay: Path, stream: str, step: int, rank: int = 0) -> Source:
    """A global stream differing at the start of ``step``: where the script last reseeded it."""
    reseeds = [r for r in _records(replay, 1, rank) + _records(replay, 2, rank)
               if r.get("stream") == stream and r.get("step", 0) <= step]
    last = reseeds[-1] if reseeds else None
    detail = f"the global {stream} stream differs at the start of step {step}"
    loc = Location.of(last["location"]) if last is not None else None
    if last is not None:
        how = "from entropy" if last["how"] == "entropy" else f"with {last['how']}()"
        detail += f"; reseeded {how} at {loc.site if loc is not None else 'an unknown place'}"
    return Source(step, f"rng.{stream}", "rng", detail=detail, location=loc,
                  stack=Location.stack_of(last["stack"]) if last else [],
                  pin={"kind": "rng", "stream": stream, "step": step},
                  pinned_by=f"run 1's {stream} state at the start of step {step}")


def _reseed(report: Report, replay: Path, step: int, pins: list[dict[str, Any]],
            rank: int = 0) -> Source | None:
    """The first call of the script's own that reseeded a global stream, by the end of
    ``step``, and left it in a different state in each run (``torch.seed()``, ``manual_seed`` of
    the clock): the source, pinned by run 1's state after each such call (what is drawn before
    the next step's start, a model built after ``torch.seed()`` or a dropout after a mid-step
    reseed, then agrees too)."""
    pinned = {p["stream"] for p in pins if p["kind"] == "reseed"}
    calls = [[r for r in _records(replay, run, rank) if "stream" in r and "event" in r]
             for run in (1, 2)]
    other = {(r["stream"], r["event"]): r.get("fp") for r in calls[1]}
    for rec in calls[0]:
        stream = rec["stream"]
        if stream in pinned or rec.get("step", 0) > step or rec.get("fp") is None \
                or other.get((stream, rec["event"]), rec["fp"]) == rec["fp"]:
            continue
        loc = Location.of(rec["location"])
        site = loc.site if loc is not None else "an unknown place"
        detail = report.cause_detail if report.cause == "rng" and report.cause_location and \
            loc is not None and report.cause_location.site == loc.site else None
        if detail is None:
            how = {"entropy": "from OS entropy", "clock": "from the clock"}.get(
                rec["how"], f"with {rec['how']}() of a value that differs between runs")
            detail = (f"the global {stream} stream is reseeded {how} at {site} (step "
                      f"{rec['step']}): every run draws other numbers after it; seed it with a "
                      "constant")
        return Source(step, report.divergent_signal, "rng", detail=detail, location=loc,
                      stack=Location.stack_of(rec.get("stack")),
                      pin={"kind": "reseed", "stream": stream, "at": site},
                      pinned_by=f"run 1's {stream} state after each reseeding at {site}")
    return None


def _op_site(src: Source, replay: Path, rank: int = 0) -> None:
    """Where the script called the pinned op, as run 1 of the pinned pair saw it."""
    for rec in _records(replay, 1, rank):
        if rec.get("op_site") == src.culprit_op:
            src.location = Location.of(rec.get("location"))
            src.stack = Location.stack_of(rec.get("stack"))
            return


def divergent_rank(report: Report) -> int:
    """The torchrun rank where a pair's difference entered (0 without torchrun)."""
    div = report.comparison.divergence if report.comparison is not None else None
    return (div.rank or 0) if div is not None else 0


def identify(report: Report, replay: Path, pins: list[dict[str, Any]],
             localize: Callable[[int], Localization | None]) -> Source | None:
    """The source behind a pair's first divergence, with the pin that takes it out; None when the
    runs agree or the divergence cannot be explained further (an error, the environment)."""
    if report.reproducible or report.error is not None or report.interrupted:
        return None
    step, signal, cause = report.first_divergent_step, report.divergent_signal, report.cause
    rank = divergent_rank(report)
    if cause == "environment":
        return Source(step, signal, cause, detail=report.cause_detail)
    if step is None:
        return Source(None, signal, cause, detail=report.cause_detail)  # metrics: no pin needed
    reseeded = _reseed(report, replay, step, pins, rank)  # a global stream first
    if reseeded is not None:
        return reseeded
    location = report.cause_location
    pinned_at = {p.get("at") for p in pins if p["kind"] == "reseed"}
    if cause == "rng" and location and signal and not signal.startswith("rng.") and \
            location.site in pinned_at:
        # the check names a reseeding call this pair has pinned: what differs now is another
        # source, found by the signal as the check would without that call
        cause = from_signal(signal, uses_dataloader=True)
        report_detail: str | None = EXPLANATION[cause]
        location = None
    else:
        report_detail = report.cause_detail
    if cause == "rng" and signal and signal.startswith("rng."):
        return _stream(replay, signal.split(".", 1)[1], step, rank)
    pinned = {p["key"] for p in pins if p["kind"] == "generator"}
    found = _private(replay, step, pinned, rank)
    if found is not None:
        found.signal = signal
        return found
    if cause == "data" or (cause == "rng" and signal == "batch"):
        # located at the DataLoader whose batches differed, or at the seeding call in its
        # workers: either way what differs arrives in the batches
        return Source(step, signal, cause, detail=report_detail, location=location,
                      pin={"kind": "data", "step": step},
                      pinned_by=f"run 1's batches from step {step} on")
    src = Source(step, signal, cause, detail=report_detail,
                 location=location if cause == "rng" else None)
    if cause == "compute" or (cause == "rng" and signal in ("loss", "grads", "params",
                                                                 "updated")):
        loc = localize(step)
        if loc is not None and loc.found:
            env_call_before(loc, report.results)
            src.culprit, src.culprit_op = loc.module, loc.op
            src.detail = loc.detail
            if loc.cause == "rng":  # a random op, or a value from outside torch: no op's fault
                src.cause = "rng"
                src.location = loc.location or src.location
            if loc.op and not any(p["kind"] == "compute" for p in pins):
                src.pin = {"kind": "compute", "op": loc.op, "step": step}
                src.pinned_by = f"run 1's outputs of {loc.op} from step {step} on"
    return src


@dataclass
class PairsSoFar:
    """Where :func:`find_sources` stands: the pins so far, the sources found, each pair's replay
    folder, the last pair's report and the runs its pinned pairs made."""

    current: Report
    replays: list[Path]
    pins: list[dict[str, Any]] = field(default_factory=list)
    sources: list[Source] = field(default_factory=list)
    runs: int = 0

    def take(self, src: Source, rank: int, common: RunOptions, part: DiagnosisPart) -> bool:
        """Keep ``src`` (its pin made for ``rank`` under torchrun); False when its pin is one
        already made, which did not take out its divergence (the search stops)."""
        if common.distributed is not None:
            src.rank = rank
            if src.pin is not None:
                src.pin["rank"] = rank  # only the rank where the difference entered is pinned
        if self.sources and src.pin is not None and src.pin in self.pins:
            part.sources_note = (f"the pin of source {len(self.sources)} did not take out its "
                                 f"divergence at step {src.step}: stopping here")
            return False
        self.sources.append(src)
        return True

    def pin(self, pin: dict[str, Any], where: Path, common: RunOptions,
            internal: InternalSettings, check: Checker) -> tuple[RunOptions, InternalSettings]:
        """Add ``pin`` and run the next pair, in ``where``, with every pin so far: its options
        and settings."""
        self.pins.append(pin)
        options, pinned = plan(common.replace(jobs=1, fail_fast=True), internal, where, self.pins)
        self.current = check(options, pinned)
        self.runs += 2
        self.replays.append(where / "replay")
        return options, pinned


def find_sources(report: Report, part: DiagnosisPart, common: RunOptions,
                 internal: InternalSettings, folder: Path, say: Log, localize: Localizer,
                 max_sources: int = DEFAULT_MAX_SOURCES, keep_replay: bool = False, *,
                 check: Checker) -> None:
    """Fill ``part.sources`` from the check's pair (made with :func:`plan`), then pair after
    pair of pinned runs (``common`` and ``internal``: the options and settings of every pair),
    each pair run by ``check``."""
    started = time.monotonic()
    pairs = PairsSoFar(report, [folder / "check" / "replay"])
    find = first_localization(part)
    while len(pairs.sources) < max_sources:
        src = identify(pairs.current, pairs.replays[-1], pairs.pins, find)
        if src is None:
            break
        rank = divergent_rank(pairs.current)
        if not pairs.take(src, rank, common, part):
            break
        say(f"source {len(pairs.sources)}: step {src.step} ({src.signal}), cause {src.cause}")
        if src.pin is None or len(pairs.sources) >= max_sources:
            break
        where = folder / f"pinned-{len(pairs.sources)}"
        say(f"pinned: {src.pinned_by}; two more runs go on to the next divergence")
        options, pinned = pairs.pin(src.pin, where, common, internal, check)
        if src.pin["kind"] == "compute" and src.location is None:
            _op_site(src, where / "replay", rank)
        find = later_localization(localize, options, pinned, where)
        if pairs.current.error is not None:
            part.sources_note = f"a pinned pair failed: {pairs.current.error}"
            break
    closing_note(part, pairs, max_sources)
    part.sources = pairs.sources
    part.sources_cost = SourcesCost(pairs.runs, time.monotonic() - started)
    if not keep_replay:
        for replay in pairs.replays:
            shutil.rmtree(replay, ignore_errors=True)
    else:
        part.replay_dirs = [str(r) for r in pairs.replays if r.exists()]


def first_localization(part: DiagnosisPart) -> Callable[[int], Localization | None]:
    """The check's own localization, for the check's pair: the one of its first divergence."""
    def first(step: int) -> Localization | None:
        loc = part.localization
        return loc if loc is not None and loc.step == step else None

    return first


def later_localization(localize: Localizer, options: RunOptions, pinned: InternalSettings,
                       where: Path) -> Callable[[int], Localization | None]:
    """A pinned pair's localization: a replay of the pair to the step, recording every op."""
    def later(step: int) -> Localization | None:
        loc, _ = localize(step, options.replace(fail_fast=False), pinned, where)
        return loc

    return later


def closing_note(part: DiagnosisPart, pairs: PairsSoFar, max_sources: int) -> None:
    """Why the search stopped, when it says more than the sources: more may be left, or the
    runs agree with every source pinned (and what a replay stands for)."""
    sources, pins = pairs.sources, pairs.pins
    if len(sources) >= max_sources and sources[-1].pin is not None:
        part.sources_note = (f"stopped at --max-sources {max_sources}: there may be more sources")
    elif pairs.runs and pairs.current.reproducible and part.sources_note is None:
        part.sources_note = f"with the {len(sources)} source(s) above pinned, the runs agree"
        replayed = sorted({p["kind"] for p in pins} & {"data", "compute"})
        if replayed:  # a replay stands for everything that made the value: said, not hidden
            part.sources_note += (" (replayed " + " and ".join(
                {"data": "batches", "compute": "op outputs"}[k] for k in replayed) +
                " stand for everything that made them: a source inside those is not seen)")
