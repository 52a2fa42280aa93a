"""One vocabulary of signals: what a real run writes, what ``--signals`` and the comparisons
accept and name, and what the reports say, all from :mod:`repro_check.trace.signals`."""

from __future__ import annotations

from typing import Any

from repro_check.compare.tolerances import SIGNALS, parse_signals
from repro_check.distributed.compare import SIGNAL_ORDER
from repro_check.report.text import signal_sentence
from repro_check.trace import signals
from repro_check.trace.format import load_trace

pytest_plugins = ["tests.api_runs"]


def test_every_signal_a_real_run_writes_is_in_the_vocabulary(same_check: Any) -> None:
    """The child writes no step signal the parent's vocabulary does not name (a new one must be
    added there, so the reports can say what it is)."""
    written: set[str] = set()
    for result in same_check.results:
        trace = load_trace(result.trace_path)
        for step in trace.steps:
            written |= set(step.signals)
    assert written, "the run recorded steps"
    assert written <= set(signals.STEP_SIGNALS), written - set(signals.STEP_SIGNALS)
    assert {"loss", "params", "grads"} <= written


def test_the_options_and_the_rank_order_take_the_vocabulary() -> None:
    assert SIGNALS == (signals.RNG, *signals.STEP_SIGNALS)
    assert parse_signals(",".join(SIGNALS)) == SIGNALS
    # every step signal has its place in a step, and the rng streams come first
    assert SIGNAL_ORDER[0] == signals.RNG and SIGNAL_ORDER[-1] == "steps"
    assert set(SIGNAL_ORDER) == {signals.RNG, "steps"} | {
        s for s in signals.STEP_SIGNALS if not signals.is_rng(s)}


def test_every_signal_has_a_sentence_that_names_it() -> None:
    """A reader sees what differs in words, never a fallback made from the bare name."""
    for name in (*signals.STEP_SIGNALS, *signals.RUN_SIGNALS, signals.metric("accuracy")):
        text = signal_sentence(name, 3)
        assert "step 3" in text or "metric accuracy" in text, (name, text)
        assert f"{name} at step" not in text, (name, text)
