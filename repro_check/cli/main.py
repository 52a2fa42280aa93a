"""The console script: the command is picked from the first argument, and every error of ours
becomes its exit code and one line on stderr, so no traceback of repro-check's own ever reaches
the user.

Nothing but :mod:`os`, :mod:`sys` and :mod:`signal` is imported before :func:`console_main`
makes Ctrl-C, SIGTERM and SIGHUP end the process with one line and exit 130 (the package's
``__init__`` loads nothing either), so the window in which such a signal still ends the process
by itself is the interpreter's own start; the commands' own signal handling takes over from
there, and the console script keeps the handlers until the interpreter exits, so a signal while
it finishes is exit 130 and one line too.
"""

from __future__ import annotations

import os
import signal
import sys

# `typing` itself is not imported before the signal handlers: type checkers treat a name
# TYPE_CHECKING as theirs
TYPE_CHECKING = False

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from types import FrameType
    from typing import Any

    from repro_check.errors import ExitCode

#: the exit status of an interrupted command (``ExitCode.INTERRUPTED``, without importing it)
_INTERRUPTED = 130
_EARLY_SIGNALS = tuple(s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None))
                       if s is not None)


def main(argv: Sequence[str] | None = None) -> ExitCode:
    # after the early signal handlers: a Ctrl-C while these load exits cleanly, ``--help`` stays cheap
    from repro_check.cli.commands import COMMANDS, check_command
    from repro_check.errors import ExitCode, ReproCheckError
    from repro_check.run import signals

    with signals.DeferredSignals() as guard:
        signals.ACTIVE.append(guard)
        try:
            argv = debug_flag(list(sys.argv[1:] if argv is None else argv))
            if argv and argv[0] not in COMMANDS:
                mistyped_command(argv[0], COMMANDS)
            command = COMMANDS[argv.pop(0)] if argv and argv[0] in COMMANDS else check_command
            code = command(argv)
        except ReproCheckError:
            if not guard.interrupted:
                raise
            code = ExitCode.INTERRUPTED  # the signal came first: what failed after it is moot
        finally:
            signals.ACTIVE.remove(guard)
    if guard.interrupted:
        sys.stderr.write("repro-check: interrupted\n")
        return ExitCode.INTERRUPTED
    return code


def debug_flag(argv: list[str]) -> list[str]:
    """``--debug`` (any command, before a ``--``): the same as ``REPRO_CHECK_DEBUG=1``, so each
    run prints what it patched and an internal error shows its traceback. Set in the
    environment, the runs inherit it."""
    ours = argv[:argv.index("--")] if "--" in argv else argv
    if "--debug" not in ours:
        return argv
    os.environ["REPRO_CHECK_DEBUG"] = "1"
    i = argv.index("--debug")
    return argv[:i] + argv[i + 1:]


def _interrupted_early(signum: int, frame: FrameType | None) -> None:
    """A signal while repro-check is still starting (nothing runs yet, nothing is half written),
    or once the command is done and the interpreter exits (what it printed is flushed first)."""
    _flush_output()
    try:
        os.write(2, b"repro-check: interrupted\n")
    except OSError:
        pass
    os._exit(_INTERRUPTED)


def _flush_output() -> None:
    """What the command printed, out before the process leaves (best effort: the signal may have
    come in the middle of a write to the same stream)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError, RuntimeError):  # closed, or a reentrant write
            pass


def _early_signals() -> dict[int, Any]:
    """Install :func:`_interrupted_early` (not over a signal the caller ignores); the handlers it
    replaced."""
    previous: dict[int, Any] = {}
    for sig in _EARLY_SIGNALS:
        try:
            old = signal.getsignal(sig)
            if old != signal.SIG_IGN:
                previous[sig] = signal.signal(sig, _interrupted_early)
        except (ValueError, OSError):  # not the main thread
            pass
    return previous


def one_line(text: str) -> str:
    """``text`` as one line of a terminal: control characters and line breaks written out."""
    # only on the way to an error message
    from repro_check.report.text import visible

    return visible(text).replace("\n", "\\n")


def mistyped_command(word: str, commands: Iterable[str]) -> None:
    """A first word close to a command name (``verfy``) that is no TARGET either: one line
    naming the command, instead of argparse's "unrecognized arguments" about what follows.

    A bare TARGET may come first (``repro-check train:main``), so a word that looks like one
    (``:``, ``/``, ``.py``, a dotted module) or that names a module or folder found from the
    current folder is left to the check."""
    # only on the way to an error message
    import difflib
    import importlib.machinery

    # only on the way to an error message
    from repro_check.errors import UsageError

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
    """The console script: exit codes at the edge, one line for every error of ours. Under
    GitHub Actions nothing printed can act as a workflow command but repro-check's own.

    Without ``argv`` this is the process's own command line (the console script, ``python -m
    repro_check``), which ends when it returns: Ctrl-C, SIGTERM and SIGHUP stay exit 130 and one
    line until the interpreter is gone, instead of going back to ending the process by
    themselves. Called with ``argv`` (in-process), the caller's handlers are put back."""
    previous = _early_signals()
    try:
        # after the early signal handlers: a Ctrl-C while these load exits cleanly, ``--help`` stays cheap
        from repro_check.run.procs import ensure_standard_fds

        ensure_standard_fds()
        for stream in (sys.stdout, sys.stderr):  # a path or text no terminal can take, written out
            reconfigure = getattr(stream, "reconfigure", None)
            if reconfigure is not None:
                reconfigure(errors="backslashreplace")
        # after the early signal handlers: a Ctrl-C while these load exits cleanly, ``--help`` stays cheap
        from repro_check.report import ci

        if not ci.on_github():
            return _guarded(argv)
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = ci.CommandSafe(sys.stdout), ci.CommandSafe(sys.stderr)
        try:
            return _guarded(argv)
        finally:
            sys.stdout, sys.stderr = saved
    finally:
        _flush_output()
        for sig, old in previous.items() if argv is not None else ():
            if signal.getsignal(sig) == _interrupted_early:
                signal.signal(sig, old if old is not None else signal.SIG_DFL)


def _guarded(argv: Sequence[str] | None) -> int:
    try:
        # after the early signal handlers: a Ctrl-C while these load exits cleanly, ``--help`` stays cheap
        from repro_check.errors import ExitCode, ReproCheckError, TargetNotFound
        from repro_check.report.text import visible
    except KeyboardInterrupt:
        sys.stderr.write("repro-check: interrupted\n")
        return _INTERRUPTED
    try:
        return int(main(argv))
    except SystemExit as e:  # --help, --version
        return int(e.code or 0) if isinstance(e.code, int) else 0
    except TargetNotFound as e:
        if e.detail:
            sys.stderr.write(visible(e.detail.rstrip()) + "\n")
        sys.stderr.write(f"repro-check: error: {one_line(str(e))}\n")
        return int(e.exit_code)
    except ReproCheckError as e:
        sys.stderr.write(f"repro-check: error: {one_line(str(e))}\n")
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
            f"repro-check: internal error: {type(e).__name__}: {one_line(str(e))} "
            "(set REPRO_CHECK_DEBUG=1 to see the traceback)\n"
        )
        return int(ExitCode.INTERNAL_ERROR)
