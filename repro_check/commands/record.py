"""``record``: run a target and save its trace as the golden reference for ``verify``."""

from __future__ import annotations

import os

from repro_check.compare.steps import Comparison, Policy
from repro_check.commands.skeleton import GivenCommand, Planned
from repro_check.gate.golden import make_parent, write_golden
from repro_check.report.model import GatePart, Report
from repro_check.run.options import PLAIN, RECORD_RUNS, InternalSettings, RunOptions
from repro_check.run.replay import replay_line
from repro_check.compare.feed import Feed
from repro_check.run.session import Session, failure
from repro_check.trace.results import Listener
from repro_check.trace.atomic import check_writable


def record_golden(options: RunOptions, output: str | os.PathLike[str],
                  listener: Listener | None = None, internal: InternalSettings = PLAIN) -> Report:
    """Run the target ``options.runs`` times and save the result as the golden ``output``.

    With more than one run, each step keeps the runs' spread (min and max of every scalar), which
    ``verify`` accepts. Nothing is written when a run fails (exit 3) or the runs record different
    numbers of steps (exit 1). The report's exit code is 0 once the golden is written.
    """
    # the target is resolved before the golden's folder is made
    session = Session(options, internal=internal)
    make_parent(output)
    check_writable(output, "golden")
    comparison = Comparison(options.runs, Policy())
    outcome = session.run(Feed(comparison, listener))
    result = comparison.result()
    error = failure(outcome.results, result)
    warnings = [f"run {r.index}: {w}" for r in outcome.results for w in r.warnings]
    counts = {r.steps for r in outcome.results}
    gate = GatePart("record", output=str(output))
    if not outcome.interrupted and error is None:
        if len(counts) > 1:
            warnings.append("the runs recorded different numbers of steps "
                            f"({', '.join(str(r.steps) for r in outcome.results)}): no "
                            "golden written")
        else:
            stored = write_golden(output, [r.trace_path for r in outcome.results if r.trace_path])
            gate = GatePart("record", output=str(output), golden=stored["path"],
                            band=options.runs > 1, spread_steps=stored["spread_steps"],
                            widest_spread=stored["widest_spread"])
    replay = None if gate.golden is not None else replay_line(
        options, subcommand="record", output=str(output),
        upto=result.first_divergent_step or options.max_steps,
        runs=options.runs if options.runs != 1 else None)
    return Report(target=options.target or "", args=options.target_args,
                  seed=options.run_seed, components=options.components, runs=options.runs,
                  results=outcome.results, comparison=result, policy=Policy(),
                  max_steps=options.max_steps, threads=options.run_threads, error=error,
                  warnings=warnings, interrupted=outcome.interrupted,
                  trace_dir=str(outcome.folder), gate=gate, replay=replay)


class RecordCommand(GivenCommand):
    """``record``: each planned target run and saved as its golden."""

    name = "record"
    timed = True

    def describe(self, planned: Planned) -> str:
        cell = f" ({planned.cell})" if planned.cell else ""
        return f"recording {planned.target}{cell} -> {planned.golden}"

    def run(self, planned: Planned) -> Report:
        assert planned.golden is not None
        options = self.given.options(planned.target, planned.entry,
                                     keys={"runs": "record-runs"}, defaults={"runs": RECORD_RUNS})
        if planned.args:  # a cell of --across 'args=A|B'
            options = options.replace(args=(*(options.args or ()), *planned.args))
        with self.given.progress(options, options.runs) as listener:
            return record_golden(options, planned.golden, listener, self.given.internal)
