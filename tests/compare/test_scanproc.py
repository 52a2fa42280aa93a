"""``--metric`` rules matched in a process of their own (:mod:`repro_check.compare.scanproc`):
the same metrics as the scan in this process gives, and a rule that backtracks for ever is
killed within the run's ``--timeout`` (exit 2, one line) instead of hanging repro-check."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from repro_check.compare import printed, scanproc
from repro_check.errors import ExitCode, UsageError

from ..conftest import cli_env, repro_check_cli

RULES = (("x", r"x=(\d+)"), ("loss", r"LOSS (?P<value>\S+)"), ("acc", r"ACC:(\d\.\d+)"))
OUTPUT = (b"acc: 0.5\nx=3 loss: 1.0\nTest set: Average loss: 0.0345, Accuracy: 98/100 (98%)\n"
          b"LOSS 2.5 x=4\rval_acc 0.7 ACC:0.25\n" + b"y" * 70000 + b" x=77\nx=5")
#: catastrophic backtracking on a line of a's that ends in b
BAD = r"^(a+)+$"
AAB = b"a" * 40 + b"b\n"


def in_process(chunks: list[bytes], rules: tuple[tuple[str, str], ...]) -> dict[str, object]:
    s = printed.Scanner(rules)
    for c in chunks:
        s.add(c)
    return s.finish()


def test_the_process_finds_what_the_scan_in_this_process_finds() -> None:
    for size in (len(OUTPUT), 7, 4096):
        chunks = [OUTPUT[i:i + size] for i in range(0, len(OUTPUT), size)]
        remote = scanproc.scanner(RULES)
        assert isinstance(remote, scanproc.Remote)
        for c in chunks:
            remote.add(c)
        found = remote.finish(60)
        expected = in_process(chunks, RULES)
        assert list(found.items()) == list(expected.items())  # values and order alike
        assert {"printed:x", "printed:loss", "printed:acc", "printed:average_loss"} <= set(found)
        assert remote.proc.poll() is not None


def test_no_rule_of_the_user_starts_no_process() -> None:
    assert type(scanproc.scanner(())) is printed.Scanner


def test_the_protocol() -> None:
    frames = b"".join(len(c).to_bytes(4, "big") + c for c in (b"x=1\nLOSS 3", b"\nx=2\n"))
    inp = io.BytesIO(json.dumps(RULES).encode() + b"\n" + frames + b"\0\0\0\0")
    out = io.BytesIO()
    scanproc.serve(inp, out)
    lines = out.getvalue().splitlines()
    assert lines[0] == b"r 0" and lines[-1].startswith(b"= ")
    # each name with its last text and the scan it first appeared in
    assert json.loads(lines[-1][2:]) == [["x", "2", 1], ["loss", "3", 2]]


def test_a_rule_that_does_not_finish_is_killed_and_named() -> None:
    import time

    remote = scanproc.Remote((("fine", r"x=(\d+)"), ("bad", BAD)))
    remote.add(b"x=1\n" + AAB)
    deadline = time.monotonic() + 120  # a guard only: the process starts and says "r 1"
    while remote.running != 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert remote.running == 1  # it reached the second rule, which never ends
    with pytest.raises(scanproc.RuleTimedOut) as info:
        remote.finish(0.5)
    assert isinstance(info.value, UsageError)
    assert str(info.value) == ("--metric bad: the regex did not finish on the run's output "
                               "within the timeout (catastrophic backtracking?)")
    assert remote.proc.poll() is not None
    remote.close()  # again: nothing left to do


def test_a_process_that_died_is_said_at_once() -> None:
    remote = scanproc.Remote((("x", r"x=(\d+)"),))
    remote.proc.kill()
    remote.add(b"x=1\n")
    with pytest.raises(UsageError, match="ended without a result"):
        remote.finish(600)  # not waited for: the process is gone
    assert remote.proc.poll() is not None


def _left_running(mark: str) -> list[int]:
    """Processes whose environment carries ``mark``."""
    left = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if mark.encode() in (entry / "environ").read_bytes():
                left.append(int(entry.name))
        except OSError:
            pass
    return left


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc")
def test_a_regex_that_backtracks_for_ever_ends_the_command_within_its_timeout(
        tmp_path: Path) -> None:
    script = tmp_path / "aab.py"
    script.write_text(f"print({AAB.decode()!r}, end='')\nprint('accuracy: 0.5')\n")
    mark = f"REPRO_CHECK_TEST_MARK={uuid.uuid4()}"
    env = cli_env(**dict([mark.split("=", 1)]))
    # the old scan held the GIL for ever: this timeout is only a guard against that hang. The
    # runs must end within --timeout for the scan to get its turn: where a loaded machine kept
    # them from it (a run timed out), the check is made again with a limit two or three times
    # as long
    for limit in (10, 20, 60, 180):
        proc = repro_check_cli([str(script), "--metric", f"x={BAD}", "--timeout", str(limit)],
                               cwd=tmp_path, env=env, timeout=12 * limit)
        if not (proc.returncode == ExitCode.TARGET_FAILED and "timeout" in proc.stderr):
            break
        assert _left_running(mark) == [], "a process of the timed-out command is still running"
    assert proc.returncode == ExitCode.USAGE_ERROR, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert errors == ["repro-check: error: --metric x: the regex did not finish on the run's "
                      "output within the timeout (catastrophic backtracking?)"]
    assert "Traceback" not in proc.stderr
    assert _left_running(mark) == [], "a process of the command is still running"
    assert os.environ.get(mark.split("=", 1)[0]) is None


def test_the_scanner_process_imports_nothing_heavy() -> None:
    code = ("import sys, repro_check.compare.scanproc; "
            "print(sorted(m for m in ('torch', 'numpy', 'rich') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], env=cli_env(), capture_output=True,
                         text=True, check=True).stdout
    assert out.strip() == "[]"
