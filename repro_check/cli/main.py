"""The console script: the command is picked from the first argument, and every error of ours
becomes its exit code and one line on stderr, so no traceback of repro-check's own ever reaches
the user."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from repro_check.errors import ExitCode, ReproCheckError, TargetNotFound, UsageError
from repro_check.report.text import visible


def main(argv: Sequence[str] | None = None) -> ExitCode:
    from repro_check.cli.commands import COMMANDS, check_command
    from repro_check.run import signals

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] not in COMMANDS:
        mistyped_command(argv[0], COMMANDS)
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


def mistyped_command(word: str, commands: Sequence[str]) -> None:
    """A first word close to a command name (``verfy``) that is no TARGET either: one line
    naming the command, instead of argparse's "unrecognized arguments" about what follows.

    A bare TARGET may come first (``repro-check train:main``), so a word that looks like one
    (``:``, ``/``, ``.py``, a dotted module) or that names a module or folder found from the
    current folder is left to the check."""
    import difflib
    import importlib.machinery

    if word.startswith("-") or any(c in word for c in ":/\\.") or not word.isidentifier():
        return
    close = difflib.get_close_matches(word, list(commands), n=1, cutoff=0.7)
    if not close:
        return
    try:
        found = importlib.machinery.PathFinder.find_spec(word, [os.getcwd(), *sys.path[1:]])
    except (ImportError, ValueError):
        found = None
    if found is None and not os.path.exists(word):
        raise UsageError(f"unknown command {word!r} (did you mean {close[0]!r}?); a TARGET "
                         "here would be module:function or path/to/file.py")


def console_main(argv: Sequence[str] | None = None) -> int:
    """The console script: exit codes at the edge, one line for every error of ours."""
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
