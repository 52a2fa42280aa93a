"""Where a failed run stopped, read from its traceback or from the fault handler's stack."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import repro_check
from repro_check.trace.results import FailurePoint, Location, RunResult, failure_point

PKG = str(Path(repro_check.__file__).resolve().parent)
#: this interpreter's site-packages: a frame there is a library's, not the target's
SITE = sysconfig.get_paths()["purelib"]

#: the fault handler's stack of a run that crashed while pandas was imported (most recent first)
PANDAS_CRASH = f"""Fatal Python error: Segmentation fault

Thread 0x00007f0000000001 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 327 in wait
  File "/work/train.py", line 40 in loader_thread

Current thread 0x00007fd3b6de5b80 (most recent call first):
  File "{SITE}/pandas/errors/__init__.py", line 12 in <module>
  File "<frozen importlib._bootstrap>", line 241 in _call_with_frames_removed
  File "<frozen importlib._bootstrap_external>", line 940 in exec_module
  File "<frozen importlib._bootstrap>", line 1176 in _find_and_load
  File "{SITE}/pandas/__init__.py", line 44 in <module>
  File "<frozen importlib._bootstrap>", line 241 in _call_with_frames_removed
  File "<frozen importlib._bootstrap>", line 1176 in _find_and_load
  File "/work/train.py", line 3 in <module>
  File "<frozen runpy>", line 88 in _run_code
  File "<frozen runpy>", line 291 in run_path
  File "{PKG}/targets.py", line 301 in <lambda>
  File "{PKG}/child/main.py", line 272 in _call
  File "{PKG}/child/__main__.py", line 7 in <module>
  File "<frozen runpy>", line 198 in _run_module_as_main

Extension modules: numpy._core._multiarray_umath, torch._C (total: 2)
"""


def test_a_crash_while_a_library_is_imported_names_the_library_and_the_line() -> None:
    point = failure_point(PANDAS_CRASH)
    assert point == FailurePoint(importing="pandas",
                                 imported_at=Location("/work/train.py", 3, "<module>"),
                                 at=Location("/work/train.py", 3, "<module>"))
    assert point.describe() == "while importing pandas (imported at /work/train.py:3)"


def test_a_crash_in_repro_checks_own_start_is_before_the_target() -> None:
    text = f"""Current thread 0x00007f (most recent call first):
  File "{PKG}/child/seeding.py", line 80 in seed_all
  File "{PKG}/child/main.py", line 140 in main
  File "<frozen runpy>", line 198 in _run_module_as_main
"""
    point = failure_point(text)
    assert point == FailurePoint(before_target=True)
    assert point.describe() == "before the target's first line ran"


def test_a_traceback_gives_the_targets_innermost_line_not_the_librarys() -> None:
    text = f"""Traceback (most recent call last):
  File "/work/train.py", line 20, in <module>
    main()
  File "/work/train.py", line 12, in main
    loss = model(x)
  File "{SITE}/torch/nn/modules/module.py", line 1775, in _call_impl
    return forward_call(*args, **kwargs)
RuntimeError: shapes do not match
"""
    point = failure_point(text)
    assert point is not None and point.importing is None and not point.before_target
    assert point.at == Location("/work/train.py", 12, "main")  # not torch's frame inside it


def test_a_lazy_import_inside_a_function_is_named_too() -> None:
    text = f"""Traceback (most recent call last):
  File "/work/train.py", line 30, in main
    import h5py
  File "<frozen importlib._bootstrap>", line 1176, in _find_and_load
  File "{SITE}/h5py/__init__.py", line 25, in <module>
    from . import _errors
ImportError: h5py was built against another numpy
"""
    point = failure_point(text)
    assert point is not None and point.importing == "h5py"
    assert point.imported_at == Location("/work/train.py", 30, "main")


def test_no_stack_is_no_failure_point_and_a_timeout_has_none() -> None:
    assert failure_point("Killed\n") is None
    assert RunResult(1, status="timeout", output_tail=PANDAS_CRASH).failed_at is None
    assert RunResult(1, status="completed", output_tail=PANDAS_CRASH).failed_at is None
    assert RunResult(2, status="crashed", output_tail=PANDAS_CRASH).failed_at is not None
