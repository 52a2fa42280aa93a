"""pytest plugin: assert that training is reproducible from a test suite.

Registered under the ``pytest11`` entry point, so installing repro-check makes it available;
importing it costs nothing (torch and the runner load only when a test uses it), and a test
session that uses neither the fixture nor the marker is unaffected.

* ``assert_reproducible(target, seed=0, runs=2, max_steps=None, args=(), golden=None, ...)``: a
  fixture; runs the check (or, with ``golden=``, verifies against the golden trace) and fails the
  test with the divergence report and the replay line. Returns the :class:`Report`.
* ``@pytest.mark.reproducible(seed=0, runs=2, max_steps=None, ...)`` on a test function that
  trains: the function itself (which must take no fixtures) is run under repro-check in fresh
  processes instead of in the test process. ``@pytest.mark.reproducible("train:main", ...)``
  (or ``target=``) checks that target, then runs the test body as usual.
* ``assert_resumes(target, at=K, resume_args="--resume {checkpoint}", args=(), ...)``: a
  fixture; runs ``repro-check resume`` and fails the test, naming the state not restored,
  unless the resumed run equals the uninterrupted one. Returns the :class:`Report`.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from repro_check.errors import ReproCheckError

if TYPE_CHECKING:
    from repro_check.report.model import Report

MARKER = "reproducible"


def keywords() -> tuple[str, ...]:
    """The keyword arguments the marker and the fixture accept besides the target: every run
    option :data:`repro_check.run.options.OPTIONS` lets a test give (read by the same builder as
    the Python API's), and ``golden``. Looked up on use: importing the plugin imports nothing."""
    # when a test uses it: pytest loads this plugin in every session
    from repro_check.run.options import PYTEST_KEYWORDS

    return (*PYTEST_KEYWORDS, "golden")


def __getattr__(name: str) -> Any:
    if name == "OPTIONS":  # the keyword list, as it was once spelled
        return keywords()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: seconds a run under the fixture or the marker may take unless told otherwise
DEFAULT_TIMEOUT = 900.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("repro_check_timeout",
                  "seconds each repro-check run of assert_reproducible or "
                  f"@pytest.mark.{MARKER} may take (default {DEFAULT_TIMEOUT:g}; 0: no limit)",
                  default=str(DEFAULT_TIMEOUT))


def default_timeout(config: pytest.Config) -> float | None:
    """The ``repro_check_timeout`` ini value (None for 0: no limit)."""
    text = str(config.getini("repro_check_timeout")).strip()
    try:
        value = float(text)
    except ValueError:
        raise pytest.UsageError(
            f"repro_check_timeout must be a number of seconds, got {text!r}") from None
    if value != value or value < 0:
        raise pytest.UsageError(f"repro_check_timeout must be >= 0, got {text!r}")
    return value or None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(target=None, *, seed=0, runs=2, max_steps=None, args=(), golden=None, "
        "timeout=repro_check_timeout): run the test function (or TARGET) under repro-check and "
        "fail with the divergence report when it is not reproducible",
    )


def run_reproducibility(target: str, trace_dir: str | Path | None = None, **options: Any) -> Report:
    """Check ``target`` (or verify it against ``golden=``) and return the report: the Python
    API's, so that the plugin runs its command through the same path as the command line."""
    unknown = sorted(set(options) - set(keywords()))
    if unknown:
        raise TypeError(f"unexpected option(s) for repro-check: {', '.join(unknown)}")
    # when a test uses it: pytest loads this plugin in every session
    from repro_check import api

    golden = options.pop("golden", None)
    options["trace_dir"] = options.get("trace_dir") or trace_dir
    if golden is not None:
        return api.verify(target, golden, **options)
    return api.check(target, **options)


def report_text(report: Report, width: int = 100) -> str:
    """The report as the terminal shows it, in plain text, for a test failure."""
    from rich.console import Console

    # when a test uses it: pytest loads this plugin in every session
    from repro_check.report.render import summary

    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, highlight=False)
    console.print(summary(report), crop=False)
    return buf.getvalue()


def _fail_unless_reproducible(report: Report) -> Report:
    if report.interrupted:  # Ctrl-C stops the test session, as anywhere else in pytest
        raise KeyboardInterrupt
    if report.exit_code != 0:
        what = "unverified" if report.unverified else "not reproducible"
        pytest.fail(f"repro-check: {report.target} is {what} "
                    f"(exit {int(report.exit_code)})\n{report_text(report)}", pytrace=False)
    return report


@pytest.fixture
def assert_reproducible(request: pytest.FixtureRequest,
                        tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Report]:
    """``assert_reproducible("train:main", seed=1, max_steps=20)``: fails the test with the
    divergence report unless every run agrees (or the run matches ``golden=``)."""
    folder = tmp_path_factory.mktemp("repro-check")
    timeout = default_timeout(request.config)

    def check(target: str, **options: Any) -> Report:
        options.setdefault("timeout", timeout)
        try:
            report = run_reproducibility(target, trace_dir=folder, **options)
        except ReproCheckError as e:
            pytest.fail(f"repro-check: {e}", pytrace=False)
        return _fail_unless_reproducible(report)

    return check


def run_resume_check(target: str, trace_dir: str | Path | None = None, *, at: int,
                     resume_args: str | None = None, checkpoint: str | None = None,
                     **options: Any) -> Report:
    """``repro-check resume`` on ``target`` (the options as for :func:`run_reproducibility`,
    but neither ``golden`` nor ``runs``: a resume is three runs of its own) and its report."""
    unknown = sorted(set(options) - set(keywords()) | ({"golden", "runs"} & set(options)))
    if unknown:
        raise TypeError(f"unexpected option(s) for repro-check resume: {', '.join(unknown)}")
    # when a test uses it: pytest loads this plugin in every session
    from repro_check import api

    options["trace_dir"] = options.get("trace_dir") or trace_dir
    return api.resume(target, at=at, resume_args=resume_args, checkpoint=checkpoint, **options)


@pytest.fixture
def assert_resumes(request: pytest.FixtureRequest,
                   tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Report]:
    """``assert_resumes("train.py", at=4, resume_args="--resume {checkpoint}")``: fails the test
    with the resume report (the state not restored) unless the resumed run equals the run that
    never stopped, step for step and metric for metric."""
    folder = tmp_path_factory.mktemp("repro-check-resume")
    timeout = default_timeout(request.config)

    def check(target: str, **options: Any) -> Report:
        options.setdefault("timeout", timeout)
        try:
            report = run_resume_check(target, folder, **options)
        except ReproCheckError as e:
            pytest.fail(f"repro-check: {e}", pytrace=False)
        if report.interrupted:
            raise KeyboardInterrupt
        if report.exit_code != 0:
            names = ", ".join(report.resume.not_restored_names) if report.resume else ""
            pytest.fail(f"repro-check: {report.target} does not resume exactly (exit "
                        f"{int(report.exit_code)}{'; not restored: ' + names if names else ''})"
                        f"\n{report_text(report)}", pytrace=False)
        return report

    return check


def _function_target(item: pytest.Function) -> str:
    """The test function as a repro-check TARGET (``path/to/test_x.py:test_name``)."""
    if item.cls is not None:
        pytest.fail(f"@pytest.mark.{MARKER} without a target needs a module-level test "
                    f"function; {item.name} is a method (give target=...)", pytrace=False)
    argnames: Sequence[str] = item._fixtureinfo.argnames  # noqa: SLF001 - pytest's own record
    if argnames:
        pytest.fail(f"@pytest.mark.{MARKER} runs {item.originalname} in fresh processes, so it "
                    f"cannot take fixtures ({', '.join(argnames)}); give target=... instead",
                    pytrace=False)
    return f"{item.path}:{item.originalname}"


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    marker = pyfuncitem.get_closest_marker(MARKER)
    if marker is None:
        return None
    options = dict(marker.kwargs)
    target = marker.args[0] if marker.args else options.pop("target", None)
    own_body = target is None
    if own_body:
        target = _function_target(pyfuncitem)
    folder = pyfuncitem.config._tmp_path_factory.mktemp("repro-check")  # type: ignore[attr-defined]
    options.setdefault("timeout", default_timeout(pyfuncitem.config))
    try:
        report = run_reproducibility(str(target), trace_dir=folder, **options)
    except ReproCheckError as e:
        pytest.fail(f"repro-check: {e}", pytrace=False)
    except TypeError as e:
        pytest.fail(f"@pytest.mark.{MARKER}: {e}", pytrace=False)
    _fail_unless_reproducible(report)
    return True if own_body else None
