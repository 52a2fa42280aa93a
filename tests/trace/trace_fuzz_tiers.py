"""The two tiers of the trace-area fuzz tests (test_trace_fuzz, test_input_fuzz).

A property whose examples cost seconds runs twice: with a few examples in the fast tier
(``make test``), and with the full count it was written with in the slow tier (``make
test-slow``, ``-m slow``), so that no example is lost, only moved. The property is the same
function in both: the test builds it with the tier's count and calls it.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

#: examples a costly property tries in the fast tier
FAST_EXAMPLES = 40


def tiers(full: int, fast: int = FAST_EXAMPLES) -> pytest.MarkDecorator:
    """Parametrize a test by ``examples``: ``[fast]`` in the fast tier, ``[full-count]`` (slow)."""
    return pytest.mark.parametrize("examples", [
        pytest.param(fast, id="fast"),
        pytest.param(full, id="full-count", marks=pytest.mark.slow)])


def fuzz(examples: int) -> settings:
    """The settings a property runs with: ``examples`` of them, no deadline (a loaded machine
    must not fail a test), fixtures used from the test around it."""
    return settings(max_examples=examples, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])
