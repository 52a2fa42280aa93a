"""The console script: the command is picked from the first argument, and every error of ours
becomes its exit code and one line on stderr, so no traceback of repro-check's own ever reaches
the user."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from repro_check.errors import ExitCode, ReproCheckError, TargetNotFound
from repro_check.report.text import visible


def main(argv: Sequence[str] | None = None) -> ExitCode:
    from repro_check.cli.commands import COMMANDS, check_command
    from repro_check.run import signals

    argv = list(sys.argv[1:] if argv is None else argv)
    command = COMMANDS[argv.pop(0)] if argv and argv[0] in COMMANDS else check_command
    with signals.DeferredSignals() as guard:
        signals.ACTIVE.append(guard)
        try:
            code = command(argv)
        finally:
            signals.ACTIVE.remove(guard)
    if guard.interrupted:
        sys.stderr.write("repro-check: interrupted\n")
        return ExitCode.INTERRUPTED
    return code


def console_main(argv: Sequence[str] | None = None) -> int:
    """The console script: exit codes at the edge, one line for every error of ours. Under
    GitHub Actions nothing printed can act as a workflow command but repro-check's own."""
    from repro_check.report import ci

    for stream in (sys.stdout, sys.stderr):  # a path or text no terminal can take, written out
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    if not ci.on_github():
        return _console_main(argv)
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = ci.CommandSafe(sys.stdout), ci.CommandSafe(sys.stderr)
    try:
        return _console_main(argv)
    finally:
        sys.stdout, sys.stderr = saved


def _console_main(argv: Sequence[str] | None) -> int:
    try:
        return int(main(argv))
    except SystemExit as e:  # --help, --version
        return int(e.code or 0) if isinstance(e.code, int) else 0
    except TargetNotFound as e:
        if e.detail:
            sys.stderr.write(visible(e.detail.rstrip()) + "\n")
        sys.stderr.write(f"repro-check: error: {visible(str(e))}\n")
        return int(e.exit_code)
    except ReproCheckError as e:
        sys.stderr.write(f"repro-check: error: {visible(str(e))}\n")
        return int(e.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write("repro-check: interrupted\n")
        return int(ExitCode.INTERRUPTED)
    except BrokenPipeError:
        return int(ExitCode.USAGE_ERROR)
    except Exception as e:  # noqa: BLE001 - the edge: a bug of ours is one line, not a traceback
        if os.environ.get("REPRO_CHECK_DEBUG"):
            raise
        sys.stderr.write(
            f"repro-check: internal error: {type(e).__name__}: {visible(str(e))} "
            "(set REPRO_CHECK_DEBUG=1 to see the traceback)\n"
        )
        return int(ExitCode.INTERNAL_ERROR)
