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
    started = time.monotonic()
    part = BisectPart(good=commit_of(root, good_sha), bad=commit_of(root, bad_sha),
                      candidates=len(between))
    say(f"bisect: {len(between)} commit(s) after {good_sha[:12]} up to {bad_sha[:12]}, about "
        f"{max(1, len(between) - 1).bit_length()} run(s) to test them")
    #: GOOD's golden, and the bisect log when the report's run kept no trace folder
    home = make_trace_dir(options.trace_dir)
    with revisions.Checkouts(root) as checkouts:
        if golden is None:
            good_dir = checkouts.checkout(good_sha)
            reference = str(home / "good.golden.jsonl")
            say(f"recording GOOD {good_sha[:12]}")
            try:
                recorded = record_golden(options, reference, listener,
                                         InternalSettings(checkout=(str(root), str(good_dir))))
            except TargetNotFound as e:  # TARGET resolves here, but not at GOOD
                recorded = unresolved(options, e, good_dir)
            part.runs += 1
            if recorded.error is not None or recorded.interrupted or \
                    recorded.gate is None or recorded.gate.golden is None:
                part.seconds = time.monotonic() - started
                recorded.bisect = part
                if recorded.error is not None:
                    recorded.error = f"GOOD {good_sha[:12]} cannot run: {recorded.error}"
                elif not recorded.interrupted:
                    recorded.error = f"GOOD {good_sha[:12]} recorded nothing to compare"
                return recorded
            reference = recorded.gate.golden
        else:
            reference = golden
        part.reference = "golden" if golden is not None else "GOOD"
        search_dir = checkouts.checkout(bad_sha)
        #: the search's runs start from its own checkout, which git bisect moves
        at_search = InternalSettings(checkout=(str(root), str(search_dir)))
        reports: dict[str, Report] = {}

        def test(sha: str) -> Report:
            say(f"testing {sha[:12]} ({len(part.tested) + 1})")
            try:
                rep = verify_golden(options, reference, listener, at_search)
            except TargetNotFound as e:  # a commit without it (or broken there) is skipped
                rep = unresolved(options, e, search_dir)
            part.runs += 1
            reports[sha] = rep
            verdict: CommitVerdict = "skip" if rep.error is not None else \
                "good" if rep.reproducible else "bad"
            entry = JudgedCommit(**revisions.describe(root, sha).to_dict(), verdict=verdict,
                                 step=rep.first_divergent_step, signal=rep.divergent_signal,
                                 error=rep.error if verdict == "skip" else None)
            if verdict == "skip":
                part.skipped.append(sha)
            part.tested.append(entry)
            return rep

        def verdict_of(sha: str) -> str | None:
            rep = test(sha)
            return None if rep.interrupted else part.tested[-1].verdict

        found, part.undecided, part.log = search(search_dir, good_sha, bad_sha, verdict_of)
        interrupted = next((r for r in reports.values() if r.interrupted), None)
        if interrupted is not None:
            return _finish(interrupted, part, started, home)
        if found is not None and found not in reports:  # BAD, which git takes as bad untested
            search_at(search_dir, found)
            rep = test(found)
            if rep.interrupted:
                return _finish(rep, part, started, home)
            if part.tested[-1].verdict == "good":
                part.matches = True
                return _finish(rep, part, started, home)
            if part.tested[-1].verdict == "skip":
                part.undecided = [found]
                found = None
        if found is None:
            last = reports[part.tested[-1].sha]
            last.error = ("the first commit that differs is one of "
                          f"{', '.join(s[:12] for s in part.undecided)}: the target does not run "
                          "there")
            return _finish(last, part, started, home)
        report = reports[found]
        part.first_bad = commit_of(root, found)
        part.step, part.signal = report.first_divergent_step, report.divergent_signal
        _drift(part, reference, report)
        if part.step is not None and part.signal not in (None, "steps") \
                and not str(part.signal).startswith("metric:"):
            good_dir = checkouts.checkout(good_sha)
            search_at(search_dir, found)
            _localize(part, options, part.step, root, good_dir, search_dir, say)
        return _finish(report, part, started, home)


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


def _finish(report: Report, part: BisectPart, started: float, home: Path) -> Report:
    part.seconds = time.monotonic() - started
    report.bisect = part
    if part.log:  # beside the report's run, or in the bisect's own folder (a run that
        # did not resolve kept none)
        path = Path(report.trace_dir or home) / "bisect.log"
        try:
            path.write_text(part.log)
            part.log_path = str(path)
        except OSError:
            pass
    return report


class BisectCommand:
    """``bisect GOOD BAD TARGET``: the first commit whose run differs from GOOD's (or from a
    golden), one run a commit."""

    name = "bisect"
    timed = True

    def __init__(self, options: RunOptions, good: str, bad: str, golden: str | None,
                 progress: Callable[[RunOptions, int], ContextManager[Listener]],
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
