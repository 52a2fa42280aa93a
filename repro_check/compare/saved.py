"""What the runs left, compared: every file each run saved, tensor by tensor, and its modules'
state at its end (described inside the runs by :mod:`repro_check.child.observe.saved`).

The saves of run N are paired with run 1's by their order (the K-th save with the K-th), not by
their paths: a run that saves into a folder of its own, or names a file after the time or its
process, is paired all the same. Two paired saves agree when every tensor and array of one has
the same key path, dtype, shape and exact bits in the other; tensors are matched by key, so the
order a dict was filled in does not matter. Numbers, strings and other values in a save are not
compared (see :mod:`repro_check.child.observe.saved`). A save that one run made and another did not is a
difference too, unless a run was cut short (failed, stopped by fail-fast, interrupted).

A difference is a divergence of its own signal, ``saved:FILE:KEY`` or ``state:KEY``
(:mod:`repro_check.trace.signals`): the check is not reproducible even when every step agrees.
It is the check's first divergence when no step differs (a file saved during the run comes
before the state at its end, and both before a final metric). Under torchrun each rank's saves
are paired with the same rank's of run 1.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from repro_check.compare.steps import ComparisonResult, Divergence
from repro_check.trace import signals
from repro_check.trace.jsonfields import JsonRecord, json_field
from repro_check.trace.protocol import SAVED_FILE, SAVED_STATE, SavedRecord, SavedTensor
from repro_check.trace.results import Location

#: what a file is called where the save wrote to memory (a buffer), outside any framework's save
IN_MEMORY = "(in memory)"


def label(path: str | None) -> str:
    """A saved file as signals name it: its name (a run that saves into a temporary folder of
    its own names it the same in every run; the reports show the whole path too)."""
    if not path:
        return IN_MEMORY
    return os.path.basename(path.rstrip(os.sep)) or path


def _shape(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


@dataclass
class SavedDifference(JsonRecord):
    """Where one run's save first differs from run 1's: the tensor's key (None: the save as a
    whole), and how."""

    run: int
    key: str | None
    #: ``bits``, ``dtype``, ``shape``, ``missing`` (run 1 has the key, this run not), ``extra``
    #: (this run only), ``not saved`` (the save was made by one of the two runs only)
    what: str
    detail: str


@dataclass
class SavedFile(JsonRecord):
    """One save (or the modules' state at the end), as the runs made it, and whether they agree."""

    #: the save's place in the run's order of saves, from 1 (0: the modules' state)
    order: int
    #: ``file`` or ``state``
    kind: str
    #: run 1's path, relative to its working folder when inside it (None: in memory, or state)
    path: str | None
    saver: str
    #: optimizer steps the run had made when it saved
    step: int
    location: Location | None
    #: tensors and arrays in run 1's save
    tensors: int
    agrees: bool
    #: each run's path, where a run saved it (None: it did not)
    paths: list[str | None] = field(default_factory=list)
    first_difference: SavedDifference | None = None
    #: the torchrun rank that saved it (None: not under torchrun)
    rank: int | None = json_field(default=None, omit_none=True)

    @property
    def name(self) -> str:
        """``ema.pt``; the modules' state at the end."""
        return "the modules' state at the end" if self.kind == SAVED_STATE else label(self.path)

    @property
    def where(self) -> str:
        """``torch.save at train.py:42, after step 30``."""
        if self.kind == SAVED_STATE:
            return f"after step {self.step}"
        at = f" at {self.location.site}" if self.location is not None else ""
        return f"{self.saver}{at}, after step {self.step}"


@dataclass
class SavedDivergence(Divergence):
    """A divergence in what the runs left: a saved file's tensor or the end state's."""

    #: the save as the reports name it (``ema.pt``), None for the modules' state
    file: str | None = None
    key: str | None = None
    #: optimizer steps made when it was saved
    save_step: int | None = None
    location: Location | None = None


@dataclass
class SavedResult:
    """Every save of the runs, paired, and the divergences they show (first one first)."""

    files: list[SavedFile] = field(default_factory=list)
    divergences: list[SavedDivergence] = field(default_factory=list)
    #: tensors compared between two runs, counted once per pair of runs
    tensors_compared: int = 0

    @property
    def first(self) -> SavedFile | None:
        """The first save that differs (in order, the state last)."""
        return next((f for f in self.files if not f.agrees), None)

    def per_run(self) -> dict[int, SavedDivergence]:
        out: dict[int, SavedDivergence] = {}
        for d in self.divergences:
            out.setdefault(d.run, d)
        return out


def compare_tensors(ref: tuple[SavedTensor, ...], other: tuple[SavedTensor, ...]
                    ) -> tuple[int, tuple[str, str, str] | None]:
    """How many tensors the two saves both hold (each compared), and the first that differs as
    ``(key, what, detail)``: run 1's keys in its order, then the keys only the other has."""
    theirs = {t.key: t for t in other}
    compared = 0
    first: tuple[str, str, str] | None = None
    for t in ref:
        o = theirs.get(t.key)
        if o is None:
            found: tuple[str, str, str] | None = (t.key, "missing", "in run 1's save only")
        else:
            compared += 1
            if o.dtype != t.dtype:
                found = (t.key, "dtype", f"dtype {t.dtype} against {o.dtype}")
            elif o.shape != t.shape:
                found = (t.key, "shape", f"shape {_shape(t.shape)} against {_shape(o.shape)}")
            elif o.digest != t.digest:
                found = (t.key, "bits", f"{t.dtype} {_shape(t.shape)}: different bits")
            else:
                found = None
        if first is None:
            first = found
    if first is None:
        mine = {t.key for t in ref}
        extra = next((o for o in other if o.key not in mine), None)
        if extra is not None:
            first = (extra.key, "extra", "not in run 1's save")
    return compared, first


class SavedComparison:
    """Feed it each run's saves and end state (any interleaving) and each run's end."""

    def __init__(self) -> None:
        self.files: dict[tuple[int, int], list[SavedRecord]] = {}
        self.states: dict[tuple[int, int], SavedRecord] = {}
        #: each ended run: whether it ran to its end (not cut short)
        self.complete: dict[int, bool] = {}

    def add(self, run: int, stream: int, record: SavedRecord) -> None:
        if record.kind == SAVED_FILE:
            self.files.setdefault((run, stream), []).append(record)
        elif record.kind == SAVED_STATE:
            self.states[(run, stream)] = record

    def end(self, run: int, complete: bool) -> None:
        self.complete[run] = complete

    def result(self, runs: int) -> SavedResult:
        out = SavedResult()
        keys = set(self.files) | set(self.states)
        streams = sorted({s for _, s in keys})
        ranked = streams != [0] and len(streams) > 0
        for stream in streams:
            self._stream(out, runs, stream, ranked)
        return out

    def _stream(self, out: SavedResult, runs: int, stream: int, ranked: bool) -> None:
        lists = {k: self.files.get((k, stream), []) for k in range(1, runs + 1)}
        longest = max((len(v) for v in lists.values()), default=0)
        rank = stream if ranked else None
        for i in range(longest):
            made = {k: v[i] for k, v in lists.items() if i < len(v)}
            out.files.append(self._pair(out, made, runs, rank))
        states = {k: self.states[(k, stream)] for k in range(1, runs + 1)
                  if (k, stream) in self.states}
        if states:
            out.files.append(self._pair(out, states, runs, rank))

    def _cut(self, run: int) -> bool:
        return not self.complete.get(run, False)

    def _pair(self, out: SavedResult, made: dict[int, SavedRecord], runs: int,
              rank: int | None) -> SavedFile:
        """One save as every run made it, compared with run 1's."""
        first = made.get(1) or made[min(made)]
        entry = SavedFile(order=first.order, kind=first.kind, path=first.path,
                          saver=first.saver, step=first.step,
                          location=first.location, tensors=first.count,
                          agrees=True, paths=[made[k].path if k in made else None
                                              for k in range(1, runs + 1)], rank=rank)
        for k in range(2, runs + 1):
            ref, other = made.get(1), made.get(k)
            if ref is not None and other is not None:
                n, found = compare_tensors(ref.tensors, other.tensors)
                out.tensors_compared += n
                if found is None:
                    continue
                key, what, detail = found
                if what == "missing":
                    detail = f"in run 1's save, not in run {k}'s"
            elif self._cut(1) or self._cut(k):
                continue  # a run cut short: the saves it did not reach are no difference
            else:
                key, what = None, "not saved"
                detail = f"saved by run {1 if other is None else k} only"
            if entry.first_difference is None:
                entry.first_difference = SavedDifference(k, key, what, detail)
            entry.agrees = False
            out.divergences.append(self._divergence(entry, k, key, detail))
        return entry

    def _divergence(self, entry: SavedFile, run: int, key: str | None,
                    detail: str) -> SavedDivergence:
        if entry.kind == SAVED_STATE:
            signal = signals.state(key or "")
            text = f"the modules' state at the end ({entry.where})"
        else:
            signal = signals.saved(entry.name, key)
            text = f"{entry.name} ({entry.where})"
        said = f"{text}: {key}: {detail}" if key else f"{text}: {detail}"
        if entry.rank is not None:
            said = f"rank {entry.rank}: {said}"
        return SavedDivergence(run, None, signal, detail=said, policy="exact bits",
                               file=entry.name if entry.kind == SAVED_FILE else None, key=key,
                               save_step=entry.step, location=entry.location)


def merge(result: ComparisonResult, saved: SavedResult) -> ComparisonResult:
    """``result`` with the divergences of what the runs left: the first of them is the check's
    divergence when no step differs (before a final metric's), and each run that agreed on every
    step gets its own."""
    if not saved.divergences:
        return result
    for run, d in saved.per_run().items():
        current = result.per_run.get(run)
        if current is None or current.step is None:
            result.per_run[run] = d
    if result.divergence is None or result.divergence.step is None:
        first = saved.divergences[0]
        result.divergence = first
        result.divergent_signal = first.signal
        result.first_divergent_step = None
    return result
