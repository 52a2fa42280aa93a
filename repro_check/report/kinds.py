"""Which kind a report is, told in one place: two finished runs' logs or checkpoints, a gate (``record``, ``verify``, ``diff``),
``--across``, ``resume``, or a check. Asked in this order, the first kind that applies is the
report's; every output (terminal, HTML, CI) renders the kind it is given, and none branches on
the report's parts to find out. Loads rich (each kind's module has its terminal renderer)."""

from __future__ import annotations

from repro_check.report.across import ACROSS
from repro_check.report.check import CHECK
from repro_check.report.finished import FINISHED
from repro_check.report.gate import GATE
from repro_check.report.model import Report
from repro_check.report.part import Kind
from repro_check.report.resume import RESUME

#: every kind, in the order they are asked (a check last: it applies to any report)
KINDS: tuple[Kind, ...] = (FINISHED, GATE, ACROSS, RESUME, CHECK)


def kind_of(report: Report) -> Kind:
    """The report's kind: the first of :data:`KINDS` that applies."""
    return next(kind for kind in KINDS if kind.applies(report))
