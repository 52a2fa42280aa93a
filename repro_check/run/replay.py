"""One copy-pasteable command line that repeats a run, for every command's report."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from repro_check.trace import seeding
from repro_check.run.options import CHECK_RUNS, RunOptions


def replay_line(
    options: RunOptions,
    *,
    subcommand: str | None = None,
    upto: int | None = None,
    runs: int | None = None,
    golden: str | None = None,
    output: str | None = None,
    extra: Sequence[str] = (),
    command: str = "repro-check",
) -> str:
    """``repro-check [SUBCOMMAND] TARGET --seed N ... [--max-steps UPTO] [-- ARGS]``.

    ``upto`` replaces ``--max-steps`` (the step a failure showed at); ``runs`` is written when
    given (a check writes it only when it is not the default); ``extra`` goes before ``--``.
    """
    parts = [command]
    if subcommand:
        parts.append(subcommand)
    if options.target:
        parts.append(options.target)
    if golden:
        parts += ["--golden", golden]
    if output:
        parts += ["-o", output]
    components = options.components
    if not components:
        parts.append("--no-seed")
    else:
        parts += ["--seed", str(options.seed_value)]
        off = [c for c in seeding.COMPONENTS if c not in components]
        if off:
            parts += ["--without", ",".join(off)]
        if options.run_threads is not None and options.run_threads != 1:
            parts += ["--threads", str(options.run_threads)]
    if runs is not None:
        parts += ["--runs", str(runs)]
    max_steps = upto if upto is not None else options.max_steps
    if max_steps is not None:
        parts += ["--max-steps", str(max_steps)]
    if options.timeout is not None:
        parts += ["--timeout", f"{options.timeout:g}"]
    for name, regex in options.printed_metrics:
        parts += ["--metric", f"{name}={regex}"]
    parts += list(extra)
    if options.args:
        parts += ["--", *options.args]
    return " ".join(shlex.quote(p) for p in parts)


def check_runs(runs: int) -> int | None:
    """What a check's replay line says of its run count: nothing for the default."""
    return None if runs == CHECK_RUNS else runs
