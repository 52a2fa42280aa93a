"""``bisect GOOD BAD TARGET``: the first commit between GOOD and BAD whose run differs from GOOD's
(or from a golden), with ``git bisect`` semantics, the user's checkout never moved.

GOOD's run is recorded once as the reference (unless ``--golden`` gives one). Then ``git bisect``
runs in a checkout of its own (``git worktree add``; its bisect state is that worktree's, not the
user's): each commit it picks is run once and compared with the reference, and marked good
(same), bad (differs) or skipped (the target fails to run there, its TARGET not resolving
included: ``git bisect run``'s exit 125).
BAD itself is only run when the search ends on it. At the first commit that differs, a probe run
of each side records every op of the first divergent step, to name the op and module. The bisect
log is kept beside the traces; the checkouts are removed however the command ends.

Runs: one for GOOD, about log2(commits) for the search, two probes.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import ContextManager, Literal

from repro_check.compare.drift import loss_drift
from repro_check.commands.diagnose import ProbeCollector
from repro_check.commands.skeleton import Planned
from repro_check.diagnose.localize import CodeSides, compare
from repro_check.errors import TargetNotFound, TraceFileError, UsageError
from repro_check.commands.record import record_golden
from repro_check.commands.verify import prepare, verify_golden
from repro_check.report.model import BisectCommit, BisectPart, Report, JudgedCommit
from repro_check.run import revisions
from repro_check.run.options import InternalSettings, RunOptions
from repro_check.run.session import Session, make_trace_dir
from repro_check.trace.results import Listener

Log = Callable[[str], None]
CommitVerdict = Literal["good", "bad", "skip"]
#: what ``git bisect`` prints when it is done
FOUND = "is the first bad commit"
ONLY_SKIPPED = "only 'skip'ped commits left"


def commits_between(root: Path, good: str, bad: str) -> list[str]:
    """The commits after GOOD up to BAD, oldest first (those bisect may name)."""
    out = revisions.git(root, "rev-list", "--reverse", "--ancestry-path", f"{good}..{bad}", "--")
    return out.split()


def plan(good: str, bad: str) -> tuple[Path, str, str, list[str]]:
    """Everything checked before any run: a repository, two commits, GOOD an ancestor of BAD."""
    root = revisions.repository()
    if revisions.WORKTREE in (good, bad):
        raise UsageError("bisect walks commits: commit the change, or compare it with "
                         "--across rev=HEAD,WORKTREE")
    good_sha, bad_sha = revisions.resolve(root, good), revisions.resolve(root, bad)
    if good_sha == bad_sha:
        raise UsageError(f"GOOD {good} and BAD {bad} are the same commit")
    between = commits_between(root, good_sha, bad_sha)
    if not between:  # --ancestry-path: only descendants of GOOD
        raise UsageError(f"GOOD {good} is not an ancestor of BAD {bad}")
    return root, good_sha, bad_sha, between


def run_bisect(options: RunOptions, good: str, bad: str, golden: str | None = None,
               listener: Listener | None = None, log: Log | None = None) -> Report:
    """Find the first commit after ``good`` up to ``bad`` whose run differs from ``good``'s (or
    from ``golden``). The report is that commit's comparison with the reference, with a
    :class:`BisectPart`; exit 1 when one was found, 0 when BAD matches, 3 when GOOD cannot run.
    """
    say = log or (lambda text: None)
    # one run a commit, judged good or bad against the reference: no negative control each
    options = dataclasses.replace(options, runs=1, control=False)
    root, good_sha, bad_sha, between = plan(good, bad)
    Session(options)  # the target resolves (exit 2) before anything is checked out
    if golden is not None:  # a golden that cannot be read fails before any run too
        prepare(options, golden)
    bisection = Bisection(options, root, (good_sha, bad_sha), len(between), listener, say)
    say(f"bisect: {len(between)} commit(s) after {good_sha[:12]} up to {bad_sha[:12]}, about "
        f"{max(1, len(between) - 1).bit_length()} run(s) to test them")
    with revisions.Checkouts(root) as checkouts:
        return bisection.run(checkouts, golden)


class Bisection:
    """One bisect from GOOD to BAD: the reference, each commit git picks run and judged, then
    the first that differs localized. Its :class:`BisectPart` fills as the runs go; the report
    returned is one run's, with the part added."""

    #: set by :meth:`run` once the reference is known: the search's checkout, the runs' settings
    #: to start from it, the reference golden
    search_dir: Path
    at_search: InternalSettings
    reference: str

    def __init__(self, options: RunOptions, root: Path, ends: tuple[str, str], candidates: int,
                 listener: Listener | None, say: Log) -> None:
        self.options, self.root, self.listener, self.say = options, root, listener, say
        self.good_sha, self.bad_sha = ends
        self.started = time.monotonic()
        self.part = BisectPart(good=commit_of(root, self.good_sha),
                               bad=commit_of(root, self.bad_sha), candidates=candidates)
        #: GOOD's golden, and the bisect log when the report's run kept no trace folder
        self.home = make_trace_dir(options.trace_dir)
        #: each tested commit's report, by sha
        self.reports: dict[str, Report] = {}

    def run(self, checkouts: revisions.Checkouts, golden: str | None) -> Report:
        """The reference (GOOD's run, or ``golden``), the search, the report."""
        if golden is None:
            recorded = self.record_good(checkouts)
            if recorded.error is not None or recorded.interrupted or \
                    recorded.gate is None or recorded.gate.golden is None:
                return self.good_failed(recorded)
            self.reference = recorded.gate.golden
        else:
            self.reference = golden
        self.part.reference = "golden" if golden is not None else "GOOD"
        self.search_dir = checkouts.checkout(self.bad_sha)
        #: the search's runs start from its own checkout, which git bisect moves
        self.at_search = InternalSettings(checkout=(str(self.root), str(self.search_dir)))
        found, self.part.undecided, self.part.log = search(
            self.search_dir, self.good_sha, self.bad_sha, self.verdict_of)
        return self.conclude(found, checkouts)

    def record_good(self, checkouts: revisions.Checkouts) -> Report:
        """GOOD's run, recorded as the reference golden in :attr:`home`."""
        good_dir = checkouts.checkout(self.good_sha)
        reference = str(self.home / "good.golden.jsonl")
        self.say(f"recording GOOD {self.good_sha[:12]}")
        try:
            recorded = record_golden(self.options, reference, self.listener,
                                     InternalSettings(checkout=(str(self.root), str(good_dir))))
        except TargetNotFound as e:  # TARGET resolves here, but not at GOOD
            recorded = unresolved(self.options, e, good_dir)
        self.part.runs += 1
        return recorded

    def good_failed(self, recorded: Report) -> Report:
        """GOOD's run, which left nothing to compare with: exit 3 (or the interrupt's)."""
        self.part.seconds = time.monotonic() - self.started
        error = recorded.error
        if error is not None:
            error = f"GOOD {self.good_sha[:12]} cannot run: {error}"
        elif not recorded.interrupted:
            error = f"GOOD {self.good_sha[:12]} recorded nothing to compare"
        return dataclasses.replace(recorded, bisect=self.part, error=error)

    def test(self, sha: str) -> Report:
        """Run the checked-out commit ``sha`` once against the reference, and judge it."""
        part = self.part
        self.say(f"testing {sha[:12]} ({len(part.tested) + 1})")
        try:
            rep = verify_golden(self.options, self.reference, self.listener, self.at_search)
        except TargetNotFound as e:  # a commit without it (or broken there) is skipped
            rep = unresolved(self.options, e, self.search_dir)
        part.runs += 1
        self.reports[sha] = rep
        verdict: CommitVerdict = "skip" if rep.error is not None else \
            "good" if rep.reproducible else "bad"
        entry = JudgedCommit(**revisions.describe(self.root, sha).to_dict(), verdict=verdict,
                             step=rep.first_divergent_step, signal=rep.divergent_signal,
                             error=rep.error if verdict == "skip" else None)
        if verdict == "skip":
            part.skipped.append(sha)
        part.tested.append(entry)
        return rep

    def verdict_of(self, sha: str) -> str | None:
        """``git bisect``'s word for ``sha`` (None: interrupted, stop)."""
        rep = self.test(sha)
        return None if rep.interrupted else self.part.tested[-1].verdict

    def conclude(self, found: str | None, checkouts: revisions.Checkouts) -> Report:
        """The report once git bisect is done: BAD tested when it named BAD untested, an
        interrupt's, the undecided's, or the first commit that differs, localized."""
        part = self.part
        interrupted = next((r for r in self.reports.values() if r.interrupted), None)
        if interrupted is not None:
            return self.finish(interrupted)
        if found is not None and found not in self.reports:  # BAD, which git takes as bad untested
            search_at(self.search_dir, found)
            rep = self.test(found)
            if rep.interrupted:
                return self.finish(rep)
            if part.tested[-1].verdict == "good":
                part.matches = True
                return self.finish(rep)
            if part.tested[-1].verdict == "skip":
                part.undecided = [found]
                found = None
        if found is None:
            return self.finish(self.reports[part.tested[-1].sha], error=(
                "the first commit that differs is one of "
                f"{', '.join(s[:12] for s in part.undecided)}: the target does not run there"))
        return self.first_bad(found, checkouts)

    def first_bad(self, found: str, checkouts: revisions.Checkouts) -> Report:
        """The first commit that differs: its step, signal and loss drift, and the op that
        differs first (a probe run of each side) when a step's values differ."""
        part, report = self.part, self.reports[found]
        part.first_bad = commit_of(self.root, found)
        part.step, part.signal = report.first_divergent_step, report.divergent_signal
        _drift(part, self.reference, report)
        if part.step is not None and part.signal not in (None, "steps") \
                and not str(part.signal).startswith("metric:"):
            good_dir = checkouts.checkout(self.good_sha)
            search_at(self.search_dir, found)
            _localize(part, self.options, part.step, self.root, good_dir, self.search_dir,
                      self.say)
        return self.finish(report)

    def finish(self, report: Report, error: str | None = None) -> Report:
        """``report`` with the bisect's part (and ``error`` when given); the bisect log
        written beside the report's run, or in the bisect's own folder (a run that did not
        resolve kept none)."""
        part = self.part
        part.seconds = time.monotonic() - self.started
        if part.log:
            path = Path(report.trace_dir or self.home) / "bisect.log"
            try:
                path.write_text(part.log)
                part.log_path = str(path)
            except OSError:
                pass
        if error is None:
            return dataclasses.replace(report, bisect=part)
        return dataclasses.replace(report, bisect=part, error=error)


def unresolved(options: RunOptions, error: TargetNotFound, checkout: Path) -> Report:
    """The report of a run whose TARGET does not resolve at a commit (no such file or function
    there, a syntax error): the target fails to run there (exit 3), which ``git bisect run``
    skips, not a usage error of the command (TARGET resolved in the current checkout). Paths
    in the temporary ``checkout`` are said relative to it (it is removed afterwards)."""
    said = str(error).replace(f"{checkout}{os.sep}", "")
    return Report(target=options.target or "", args=options.target_args,
                  seed=options.run_seed, components=options.components, runs=1, results=[],
                  comparison=None, max_steps=options.max_steps, threads=options.run_threads,
                  error=f"TARGET does not resolve at this commit: {said}")


def commit_of(root: Path, sha: str) -> BisectCommit:
    """``sha``'s hash, subject, author date and author, as the report names a commit."""
    return BisectCommit(**revisions.describe(root, sha).to_dict())


def search(folder: Path, good: str, bad: str, verdict_of: Callable[[str], str | None]
           ) -> tuple[str | None, list[str], str]:
    """``git bisect`` in ``folder`` (a worktree of its own) from GOOD to BAD, each commit it
    checks out judged by ``verdict_of``: ``good``, ``bad``, ``skip``, or None to stop (an
    interrupt). Returns the first bad commit (None when undecided or stopped), the commits it
    could not tell apart (only skipped ones left), and the bisect log."""
    out = revisions.git(folder, "bisect", "start", bad, good, "--")
    found = _found(out)  # one commit: BAD, named at once
    undecided: list[str] = []
    while found is None:
        sha = revisions.git(folder, "rev-parse", "HEAD").strip()
        verdict = verdict_of(sha)
        if verdict is None:
            break
        out = revisions.git(folder, "bisect", verdict, check=False)
        found = _found(out)
        if found is None and ONLY_SKIPPED in out:
            undecided = _undecided(out)
            break
    return found, undecided, revisions.git(folder, "bisect", "log", check=False)


def search_at(folder: Path, sha: str) -> None:
    """Check ``sha`` out in the bisect's own checkout (its bisect state stays)."""
    revisions.git(folder, "checkout", "--quiet", "--detach", sha)


def _found(out: str) -> str | None:
    for line in out.splitlines():
        if line.rstrip().endswith(FOUND):
            return line.split()[0]
    return None


def _undecided(out: str) -> list[str]:
    """The commits git could not tell apart (it lists them after saying so)."""
    shas = []
    for line in out.splitlines():
        word = line.split()[0] if line.split() else ""
        if len(word) == 40 and all(c in "0123456789abcdef" for c in word):
            shas.append(word)
    return shas


def _drift(part: BisectPart, reference: str, report: Report) -> None:
    run = report.results[-1] if report.results else None
    if run is None or not run.trace_path:
        return
    try:
        part.drift = loss_drift(reference, run.trace_path)
    except TraceFileError:
        part.drift = None


def _localize(part: BisectPart, options: RunOptions, step: int,
              root: Path, good_dir: Path, bad_dir: Path, say: Log) -> None:
    """A probe run at GOOD and at the first commit that differs, to the first divergent step;
    the first op whose result differs is named."""
    session = Session(options, runs=2)
    specs = session.specs()
    probes = [revisions.relocate(dataclasses.replace(
        spec, told=spec.told.replace(max_steps=step, probe_step=step),
        trace_path=session.folder / f"probe-{name}.jsonl"), root, folder)
        for folder, spec, name in ((good_dir, specs[0], "good"), (bad_dir, specs[1], "first-bad"))]
    say(f"localization: 2 probe runs to step {step}, recording every op of it")
    collector = ProbeCollector()
    outcome = session.run(collector, 2, specs=probes)
    part.probe_runs = 2
    if outcome.interrupted or any(r.failed for r in outcome.results):
        return
    # GOOD and the commit run different code: ops that differ are its change, not a value
    # that is not reproducible
    first_bad = part.first_bad.sha[:12] if part.first_bad is not None else "BAD"
    sides = CodeSides(f"GOOD {part.good.sha[:12]}", f"commit {first_bad}")
    loc = compare(step, collector.probes.get((1, 0), []), collector.probes.get((2, 0), []),
                  code=sides)
    part.localization = loc
    if loc.found:
        part.op, part.module = loc.op, loc.module


class BisectCommand:
    """``bisect GOOD BAD TARGET``: the first commit whose run differs from GOOD's (or from a
    golden), one run a commit."""

    name = "bisect"
    timed = True

    def __init__(self, options: RunOptions, good: str, bad: str, golden: str | None,
                 progress: Callable[[RunOptions, int], ContextManager[Listener | None]],
                 log: Log | None) -> None:
        self.options, self.good, self.bad, self.golden = options, good, bad, golden
        self.progress, self.log = progress, log

    def describe(self, planned: Planned) -> str:
        return f"bisecting {planned.target}"

    def prepare(self, planned: Planned) -> None:
        pass

    def run(self, planned: Planned) -> Report:
        with self.progress(self.options, 1) as listener:
            return run_bisect(self.options, self.good, self.bad, self.golden, listener, self.log)
