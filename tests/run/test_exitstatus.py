"""How a run's or a rank's exit status is read: one rule for both (run/exitstatus.py)."""

from __future__ import annotations

import signal

from repro_check.trace.exits import EXIT_CHANNEL, EXIT_RAISED, EXIT_RESOLVE, EXIT_TERMINATED
from repro_check.run.exitstatus import classify_exit, status_of


def test_a_run_and_a_rank_that_end_the_same_way_are_named_the_same() -> None:
    for rank in (False, True):
        killed = classify_exit(-signal.SIGKILL, "pending", None, rank=rank)
        assert (killed.status, killed.signal) == ("crashed", "SIGKILL")
        assert classify_exit(EXIT_RESOLVE, "pending", None, rank=rank).status == "unresolved"
        channel = classify_exit(EXIT_CHANNEL, "completed", None, rank=rank)
        assert channel.status == "failed" and channel.error and channel.error["kind"] == "channel"
        raised = classify_exit(EXIT_RAISED, "pending", {"kind": "raised"}, rank=rank)
        assert (raised.status, raised.error) == ("failed", {"kind": "raised"})
        assert classify_exit(0, "pending", None, rank=rank).status == "exited"
        assert classify_exit(0, "completed", None, rank=rank).status == "completed"


def test_what_differs_for_a_rank_is_said_by_its_arguments() -> None:
    # torchrun stopped it: a signal or a non-zero status is no crash of its own
    assert classify_exit(-signal.SIGTERM, "pending", None, stopped=True, rank=True).status \
        == "terminated"
    assert classify_exit(1, "pending", None, stopped=True, rank=True).status == "terminated"
    # a run's non-zero status after the target returned fails it; a rank's teardown may not
    late = classify_exit(1, "completed", None)
    assert late.status == "failed" and late.error is not None
    assert "after the target returned" in late.error["message"]
    assert classify_exit(1, "completed", None, rank=True).status == "completed"
    # a SIGTERM repro-check did not send is named for a run
    term = classify_exit(EXIT_TERMINATED, "pending", None)
    assert term.status == "failed" and term.error and "did not send" in term.error["message"]


def test_an_unknown_status_a_child_records_is_no_success() -> None:
    assert status_of("completed") == "completed"
    assert status_of("done") == "failed" and status_of(None) == "failed"
