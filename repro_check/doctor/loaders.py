"""DataLoader hazards: workers whose random streams no seed reaches (RC101), batches handed out
in the order workers finish them (RC112).

A loader with workers and neither ``generator=`` nor ``worker_init_fn=`` is a hazard only while
nothing seeds torch with a fixed value: :mod:`~repro_check.doctor.program` decides that over
every file read.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from repro_check.doctor.evaluate import Evaluator, Hazard, text


def dataloader(ev: Evaluator, call: ast.Call) -> Iterator[Hazard]:
    """A ``DataLoader(...)`` call, its ``num_workers`` followed to a constant where it can be."""
    kw, opaque = ev.keywords(call)
    workers = kw.get("num_workers", call.args[5] if len(call.args) > 5 else None)
    if workers is None:
        return
    n = ev.const(workers)
    known_zero = n == 0 and not isinstance(n, bool)
    if not known_zero and ev.const(kw.get("in_order")) is False:
        yield ("RC112", call, "DataLoader(in_order=False) hands out batches in the order "
                              "workers finish them")
    if not (isinstance(n, int) and not isinstance(n, bool) and n > 0):
        return
    given = {name for name, value in kw.items() if name in ("generator", "worker_init_fn")
             and not (isinstance(value, ast.Constant) and value.value is None)}
    if len(call.args) > 10:
        given.add("worker_init_fn")
    if len(call.args) > 12:
        given.add("generator")
    if given or opaque:
        return
    yield ("RC101", call, f"DataLoader with num_workers={text(workers, 30)} and no "
                          "generator or worker_init_fn, while nothing seeds torch with a fixed "
                          "value")
